// MQTT.js interop scenario for test_mqttjs.py: node mqttjs_client.js PORT
// Prints one JSON object with what the clients saw; exits non-zero on any error.
"use strict";
const mqtt = require("mqtt");

const port = Number(process.argv[2]);
const url = `mqtt://127.0.0.1:${port}`;
const fail = (err) => { console.error(String(err && err.stack || err)); process.exit(2); };
setTimeout(() => fail("timeout"), 20000).unref();

// Messages queued for a persistent session arrive right behind the CONNACK, in the same
// read: the message listener must exist before "connect" fires.
function connect(clientId, clean, expect = 0) {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, { clientId, clean, reconnectPeriod: 0, protocolVersion: 4 });
    const got = expect ? collect(c, expect) : null;
    c.once("connect", (connack) => resolve({ c, present: connack.sessionPresent, got }));
    c.once("error", reject);
  });
}
const call = (fn) => new Promise((resolve, reject) =>
  fn((err, res) => (err ? reject(err) : resolve(res))));
function collect(c, n) {
  return new Promise((resolve) => {
    const got = [];
    c.on("message", (topic, payload, packet) => {
      got.push({ topic, payload: payload.toString(), qos: packet.qos, retain: packet.retain });
      if (got.length === n) resolve(got);
    });
  });
}

(async () => {
  const out = {};
  const sub = await connect("js-sub", false);
  out.firstPresent = sub.present;
  const granted = await call((cb) => sub.c.subscribe({ "js/#": { qos: 2 } }, cb));
  out.granted = granted.map((g) => g.qos);
  const live = collect(sub.c, 4);
  const pub = await connect("js-pub", true);
  await call((cb) => pub.c.publish("js/ret", "kept", { qos: 1, retain: true }, cb));
  for (const qos of [0, 1, 2]) {
    await call((cb) => pub.c.publish("js/a", `q${qos}`, { qos }, cb));
  }
  out.live = await live;
  await call((cb) => sub.c.end(false, {}, cb));
  for (const i of [1, 2]) {
    await call((cb) => pub.c.publish("js/off", `off${i}`, { qos: 1 }, cb));
  }
  const again = await connect("js-sub", false, 2);
  out.againPresent = again.present;
  out.queued = await again.got;
  const late = await connect("js-late", true);
  const retained = collect(late.c, 1);
  await call((cb) => late.c.subscribe("js/ret", { qos: 1 }, cb));
  out.retained = await retained;
  for (const c of [again.c, pub.c, late.c]) await call((cb) => c.end(false, {}, cb));
  console.log(JSON.stringify(out));
  process.exit(0);
})().catch(fail);
