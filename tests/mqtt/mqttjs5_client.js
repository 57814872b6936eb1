// MQTT.js (protocolVersion 5) scenario for test_mqtt5_mqttjs.py: node mqttjs5_client.js PORT
// Prints one JSON object with what the clients saw; exits non-zero on any error.
"use strict";
const mqtt = require("mqtt");

const port = Number(process.argv[2]);
const url = `mqtt://127.0.0.1:${port}`;
const fail = (err) => { console.error(String(err && err.stack || err)); process.exit(2); };
setTimeout(() => fail("timeout"), 20000).unref();

function connect(clientId, clean, properties = {}) {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, { clientId, clean, reconnectPeriod: 0, protocolVersion: 5,
                                  properties });
    const got = [];
    c.on("message", (topic, payload, packet) => got.push({
      topic, payload: payload.toString(), qos: packet.qos, retain: packet.retain,
      properties: packet.properties || {},
    }));
    c.once("connect", (connack) => resolve({ c, connack, got }));
    c.once("error", reject);
  });
}
const call = (fn) => new Promise((resolve, reject) =>
  fn((err, res) => (err ? reject(err) : resolve(res))));
const until = (pred) => new Promise((resolve) => {
  const t = setInterval(() => { if (pred()) { clearInterval(t); resolve(); } }, 10);
});

(async () => {
  const out = {};
  const sub = await connect("js5-sub", false, { sessionExpiryInterval: 300 });
  out.connack = { present: sub.connack.sessionPresent, reasonCode: sub.connack.reasonCode,
                  properties: sub.connack.properties };
  const granted = await call((cb) => sub.c.subscribe({ "js5/#": { qos: 2 } }, cb));
  out.granted = granted.map((g) => g.qos);
  const pub = await connect("js5-pub", true);
  const properties = { contentType: "text/plain", responseTopic: "js5/reply",
                       correlationData: Buffer.from([0, 1, 2]),
                       userProperties: { a: "1", b: ["2", "3"] }, messageExpiryInterval: 300 };
  for (const qos of [0, 1, 2]) {
    await call((cb) => pub.c.publish("js5/a", `q${qos}`, { qos, properties }, cb));
  }
  // A Topic Alias set by the client, then used alone.
  await call((cb) => pub.c.publish("js5/aliased", "first", { qos: 1, properties: { topicAlias: 1 } }, cb));
  await call((cb) => pub.c.publish("", "second", { qos: 1, properties: { topicAlias: 1 } }, cb));
  await until(() => sub.got.length >= 5);
  out.live = sub.got.map((m) => ({ topic: m.topic, payload: m.payload, qos: m.qos,
    contentType: m.properties.contentType, responseTopic: m.properties.responseTopic,
    correlationData: m.properties.correlationData ? [...m.properties.correlationData] : null,
    userProperties: m.properties.userProperties || null,
    expiry: m.properties.messageExpiryInterval || null }));
  await call((cb) => sub.c.end(false, {}, cb));
  await call((cb) => pub.c.publish("js5/off", "queued", { qos: 1 }, cb));
  const again = await connect("js5-sub", false, { sessionExpiryInterval: 300 });
  out.againPresent = again.connack.sessionPresent;
  await until(() => again.got.length >= 1);
  out.queued = again.got.map((m) => m.payload);
  for (const c of [again.c, pub.c]) await call((cb) => c.end(false, {}, cb));
  console.log(JSON.stringify(out));
  process.exit(0);
})().catch(fail);
