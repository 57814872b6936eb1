// amqplib client for tests/amqp/test_amqplib.py: publish N messages without waiting, then
// close the connection at once; print what happened as one JSON line.
//   node amqplib_close.js PORT N QUEUE_MODE   (QUEUE_MODE: exclusive | durable:NAME)
// exclusive: connection.close() right after the sends (amqplib may write the close frame
// ahead of the queued publishes: those the broker then discards, as RabbitMQ does);
// durable:NAME: persistent messages, then channel.close() (written after the publishes on
// the same channel, so every one of them reaches the broker first), then connection.close().
'use strict';
const amqp = require('amqplib');

const [port, count, mode] = [process.argv[2], Number(process.argv[3]), process.argv[4]];
const started = Date.now();
const out = { closed: false, errors: [] };
const deadline = setTimeout(() => {
  out.errors.push('close did not complete within 20 s');
  console.log(JSON.stringify(out));
  process.exit(2);
}, 20000);

async function main() {
  const conn = await amqp.connect(`amqp://127.0.0.1:${port}`);
  conn.on('error', (e) => out.errors.push(`connection error: ${e.message}`));
  const ch = await conn.createChannel();
  ch.on('error', (e) => out.errors.push(`channel error: ${e.message}`));
  let queue;
  if (mode === 'exclusive') {
    queue = (await ch.assertQueue('', { exclusive: true })).queue;
  } else {
    queue = mode.split(':')[1];
    await ch.assertQueue(queue, { durable: true });
  }
  const body = Buffer.from('x'.repeat(32));
  for (let i = 0; i < count; i++) {
    ch.sendToQueue(queue, body, { persistent: mode !== 'exclusive' });
  }
  if (mode !== 'exclusive') await ch.close();
  await conn.close();
  out.closed = true;
  out.ms = Date.now() - started;
}

main().catch((e) => out.errors.push(`${e.code || ''} ${e.message}`)).finally(() => {
  clearTimeout(deadline);
  console.log(JSON.stringify(out));
  process.exit(out.closed && out.errors.length === 0 ? 0 : 1);
});
