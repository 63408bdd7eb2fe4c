// confluent_produce.js: an independent Confluent producer for
// TestConfluentSerializerInterop. It registers harnessflow's Avro schemas
// through a schema registry's REST API and encodes events with npm's
// @kafkajs/confluent-schema-registry (avsc underneath), then produces them
// with kafkajs. Nothing of harnessflow's code runs here.
//
// Input, a JSON file named by argv[2]:
//   brokers     ["host:port"]
//   registry    the registry's base URL
//   schemas     {type: {subject, schema}}: each registered under its subject
//               with compatibility NONE (hf.cells holds two record types)
//   events      [{topic, key, type, value}]: value is the event's JSON form
//               (harnessflow's: "type" plus the schema's fields, times as
//               RFC 3339 text); it becomes avsc's form here
//   unknown_id  the event at index unknown_of is written once more, its
//               schema id replaced by this one (an id the registry does not
//               have), keyed "unknown-schema-id"
// Output on stdout: {"ids": {type: schema id}, "produced": N}.
'use strict';
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');
const { SchemaRegistry, SchemaType, COMPATIBILITY } = require('@kafkajs/confluent-schema-registry');

// avscValue turns harnessflow's JSON form into the value avsc encodes:
// without "type", timestamp-millis fields as epoch milliseconds.
function avscValue(schema, json) {
  const out = { ...json };
  delete out.type;
  for (const f of schema.fields) {
    const t = f.type;
    if (t && typeof t === 'object' && t.logicalType === 'timestamp-millis' && typeof out[f.name] === 'string') {
      const ms = Date.parse(out[f.name]);
      if (Number.isNaN(ms)) throw new Error(`${f.name}: not a time: ${out[f.name]}`);
      out[f.name] = ms;
    }
  }
  return out;
}

async function main() {
  const input = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const registry = new SchemaRegistry({ host: input.registry, retry: { retries: 0 } });
  const ids = {};
  const parsed = {};
  for (const [type, s] of Object.entries(input.schemas)) {
    const { id } = await registry.register(
      { type: SchemaType.AVRO, schema: s.schema },
      { subject: s.subject, compatibility: COMPATIBILITY.NONE });
    ids[type] = id;
    parsed[type] = JSON.parse(s.schema);
  }
  const byTopic = new Map();
  const encoded = [];
  for (const e of input.events) {
    const value = await registry.encode(ids[e.type], avscValue(parsed[e.type], e.value));
    if (!byTopic.has(e.topic)) byTopic.set(e.topic, []);
    const m = { topic: e.topic, key: e.key, value, timestamp: String(e.time) };
    encoded.push(m);
    byTopic.get(e.topic).push(m);
  }
  if (input.unknown_id) {
    const src = encoded[input.unknown_of];
    const bad = Buffer.from(src.value);
    bad.writeUInt32BE(input.unknown_id, 1);
    byTopic.get(src.topic).push({ key: 'unknown-schema-id', value: bad, timestamp: src.timestamp });
  }
  const kafka = new Kafka({ clientId: 'confluent-interop', brokers: input.brokers, logLevel: logLevel.ERROR });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  let produced = 0;
  try {
    for (const [topic, messages] of byTopic) {
      await producer.send({ topic, acks: -1, messages: messages.map((m) => ({ key: m.key, value: m.value, timestamp: m.timestamp })) });
      produced += messages.length;
    }
  } finally {
    await producer.disconnect();
  }
  process.stdout.write(JSON.stringify({ ids, produced }) + '\n');
}

main().catch((err) => {
  process.stderr.write(`confluent_produce: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
