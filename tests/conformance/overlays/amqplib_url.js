// Preloaded (node --require) by tests/conformance/run_amqplib.py before amqplib's own tests.
// 1. test/callback_api.test.js calls connect() without a URL (amqplib then dials
//    amqp://localhost:5672): such calls go to $URL, the oxiedge under test, as
//    channel_api.test.js already does by itself.
// 2. The runner's exclusions: node:test tests whose name is in $AMQPLIB_EXCLUDE (a JSON
//    list) are registered as skipped (node 20 has no --test-skip-pattern); the runner
//    reports them as excluded, with their reason.
// Nothing else of amqplib or its tests is changed.
'use strict';
const path = require('node:path');
const nodeTest = require('node:test');

const mod = require(path.join(process.env.AMQPLIB_SRC, 'lib', 'connect'));
const original = mod.connect;
mod.connect = function connect(url, options, callback) {
  return original.call(this, url || process.env.URL, options, callback);
};

const excluded = new Set(JSON.parse(process.env.AMQPLIB_EXCLUDE || '[]'));
const it = nodeTest.it;
nodeTest.it = function excludingIt(name, ...rest) {
  return excluded.has(name) ? it.skip(name, ...rest) : it(name, ...rest);
};
nodeTest.test = nodeTest.it;
