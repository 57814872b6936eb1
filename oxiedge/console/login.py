"""The console's login form and logout (``/console/login``, ``/console/logout``).

The form posts a user name and password; ``Credentials.login`` checks them as every login is
checked (the failed-login throttle, then PBKDF2 in the hashing threads) and opens a session
whose token the answer sets as a cookie (``http/sessions.py``: ``HttpOnly``,
``SameSite=Strict``, ``Secure`` on the TLS listener; it ends after 30 idle minutes, 12 hours
at most, or at logout). A user without the ``administrator``, ``monitoring`` or
``management`` tag is refused like a wrong password would be, so it never gets a session.
A page asked for without credentials is sent here (``Route.page``: a ``303`` with ``next``)
instead of the browser's HTTP Basic prompt; HTTP Basic still works for scripts and the API.
"""

from __future__ import annotations

from ..http.access import Need, Principal, refusal
from ..http.credentials import Credentials
from ..http.messages import Request, Response
from ..http.sessions import clear_cookie, set_cookie
from .actions import cross_site, form_fields, local_path
from .html import SECURITY_HEADERS, esc

#: Longest login form read (a name and a password).
MAX_FORM = 4096


def _html(status: int, text: str, headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(status, text.encode(), "text/html; charset=utf-8",
                    [*SECURITY_HEADERS, ("cache-control", "no-store"), *(headers or [])])


def _see(location: str, cookie: str) -> Response:
    return Response(303, b"", "text/plain; charset=utf-8",
                    [("location", location), ("set-cookie", cookie),
                     ("cache-control", "no-store")])


def login_page(notice: str, back: str, user: str = "") -> str:
    """The login form (a whole document: no menu before the login)."""
    flash = f'<p class="notice" role="alert">{esc(notice)}</p>' if notice else ""
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            '<meta name=viewport content="width=device-width,initial-scale=1">'
            "<title>Log in - oxiedge</title>"
            '<link rel=stylesheet href="/console/static/console.css"></head><body>'
            "<header><strong>oxiedge</strong></header><main><h1>Log in</h1>"
            f'{flash}<form method=post action="/console/login" class="login">'
            f'<label>User <input name=user autocomplete=username required autofocus '
            f'value="{esc(user)}"></label>'
            "<label>Password <input name=password type=password "
            "autocomplete=current-password required></label>"
            f'<input type=hidden name=next value="{esc(back)}">'
            "<button type=submit>Log in</button></form>"
            '<p class="hint">The broker\'s users with the administrator, monitoring or '
            "management tag (oxiedge user add NAME --tags administrator).</p>"
            "</main></body></html>")


class Login:
    """The login and logout handlers of one listener."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    async def form(self, req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        back = local_path(req.query.get("next", "/"))
        if not self.credentials.users.has_users:  # nothing to log in to (anonymous rule)
            return _see(back, clear_cookie(req.secure))
        return _html(200, login_page("", back))

    async def submit(self, req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        why = cross_site(req)
        form = form_fields(req.body, 8) if len(req.body) <= MAX_FORM else None
        if why is not None or form is None:
            return _html(403, login_page(why or "form too large", "/"))
        name, password = form.get("user", "")[:256], form.get("password", "")
        back = local_path(form.get("next", "/"))
        token = await self.credentials.login(name, password.encode())
        if token is None:
            return _html(401, login_page("Login failed: wrong user name or password.", back,
                                         name))
        who = Principal(name, tuple(self.credentials.tags_of(name)))
        if refusal(who, Need.READ) is not None:
            self.credentials.sessions.close(token)
            return _html(403, login_page(f"{name} has no administrator, monitoring or "
                                         "management tag: it may not use the console.",
                                         back, name))
        return _see(back, set_cookie(token, req.secure))

    async def logout(self, req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        if cross_site(req) is None:
            self.credentials.logout(req.headers.get("cookie"))
        return _see("/console/login", clear_cookie(req.secure))
