// oxiedge console: the pages are complete without this file. With it, the live part of a
// page (#live, server-rendered and escaped by the broker) is fetched again every few seconds
// and swapped in, and a destructive button asks before it posts.
"use strict";
(function () {
  var EVERY_MS = 5000;
  function confirmForms(root) {
    root.querySelectorAll("form[data-confirm]").forEach(function (form) {
      if (form.dataset.bound) { return; }
      form.dataset.bound = "1";
      form.addEventListener("submit", function (ev) {
        if (!window.confirm(form.dataset.confirm)) { ev.preventDefault(); }
      });
    });
  }
  function refresh(live) {
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) { return; }
      busy = true;
      var url = live.dataset.live + "?fragment=1" + (location.search ? "&" + location.search.slice(1) : "");
      fetch(url, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (r.redirected) { location.href = r.url; return null; } // the session ended
          return r.ok ? r.text() : null;
        })
        .then(function (text) {
          if (text !== null) { live.innerHTML = text; confirmForms(live); live.dataset.updated = Date.now(); }
        })
        .catch(function () {})
        .finally(function () { busy = false; });
    }, EVERY_MS);
  }
  document.addEventListener("DOMContentLoaded", function () {
    confirmForms(document);
    var live = document.getElementById("live");
    if (live) { refresh(live); }
  });
})();
