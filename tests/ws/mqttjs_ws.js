// MQTT.js over WebSocket for test_mqttjs_ws.py: node mqttjs_ws.js URL [CA_FILE]
// Subscribes, publishes QoS 0/1/2 and a retained message, reads them back, and prints
// one JSON object with what it saw; exits non-zero on any error.
"use strict";
const fs = require("fs");
const mqtt = require("mqtt");

const url = process.argv[2];
const ca = process.argv[3] ? fs.readFileSync(process.argv[3]) : undefined;
const fail = (err) => { console.error(String(err && err.stack || err)); process.exit(2); };
setTimeout(() => fail("timeout"), 20000).unref();

function connect(clientId) {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, { clientId, clean: true, reconnectPeriod: 0,
                                  protocolVersion: 4, ca });
    c.once("connect", () => resolve(c));
    c.once("error", reject);
  });
}
const call = (fn) => new Promise((resolve, reject) =>
  fn((err, res) => (err ? reject(err) : resolve(res))));
function collect(c, n) {
  return new Promise((resolve) => {
    const got = [];
    c.on("message", (topic, payload, packet) => {
      if (got.length === n) return;  // (later messages belong to another check)
      got.push({ topic, payload: payload.toString(), qos: packet.qos, retain: packet.retain });
      if (got.length === n) resolve(got);
    });
  });
}

(async () => {
  const out = {};
  const sub = await connect("jsws-sub");
  out.granted = (await call((cb) => sub.subscribe({ "jsws/#": { qos: 2 } }, cb)))
    .map((g) => g.qos);
  const live = collect(sub, 3);
  const pub = await connect("jsws-pub");
  for (const qos of [0, 1, 2]) {
    await call((cb) => pub.publish("jsws/a", `q${qos}`, { qos }, cb));
  }
  out.live = await live;
  await call((cb) => pub.publish("jsws/ret", "kept", { qos: 1, retain: true }, cb));
  const late = await connect("jsws-late");
  const retained = collect(late, 1);
  await call((cb) => late.subscribe("jsws/ret", { qos: 1 }, cb));
  out.retained = await retained;
  for (const c of [sub, pub, late]) await call((cb) => c.end(false, {}, cb));
  console.log(JSON.stringify(out));
  process.exit(0);
})().catch(fail);
