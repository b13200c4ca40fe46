// Longitudinal reports (issue 38): tests/vectors/longitudinal_v1.json replayed byte for byte (hash and memoized
// response from the secret, the second round from the recorded bytes), the config's thresholds checked, and
// the client's ledger charging eps_inf once per hashed value.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { DeviceConfig, InvalidConfigError, MemoryStorage, OcmsClient, decodeMessage, fromHex, hex } from "../dist/index.js";
import { PrfStream, RecordedStream, longitudinalReport, seenKey } from "../dist/testing.js";
import { VECTORS } from "./support.mjs";

const doc = JSON.parse(readFileSync(`${VECTORS}/longitudinal_v1.json`, "utf8"));
const config = new DeviceConfig(doc.device_config);

test("the PRF stream is keyed BLAKE2b-512 of label || counter", () => {
  const stream = new PrfStream(fromHex(doc.prf.secret_hex), fromHex(doc.prf.label_hex));
  const bytes = new Uint8Array(128);
  for (let i = 0; i < 128; i++) bytes[i] = stream.byte();
  assert.equal(hex(bytes.subarray(0, 64)), doc.prf.first_64_hex);
  assert.equal(hex(bytes.subarray(64)), doc.prf.next_64_hex);
});

for (const [i, c] of doc.cases.entries()) {
  test(`case ${i}: ${c.metric} ${JSON.stringify(c.value).slice(0, 30)}`, () => {
    const version = config.metric(c.metric);
    const stream = new RecordedStream(fromHex(c.random_hex));
    const made = longitudinalReport(stream, fromHex(c.secret_hex), version, version.encode(c.value));
    assert.equal(hex(made.message), c.message_hex);
    assert.equal(stream.remaining, 0, "must consume exactly the recorded bytes");
    assert.equal(made.hashed, c.hashed);
    assert.equal(hex(seenKey(version, made.hashed)), c.seen_key_hex);
    const [record] = decodeMessage(made.message, (fp) => config.byFingerprint.get(fp)?.params).records;
    assert.deepEqual({ a0: String(record.a0), a1: String(record.a1), z: record.z }, c.report);
  });
}

test("a report threshold that would weaken privacy is refused", () => {
  const metrics = structuredClone(doc.device_config.metrics);
  const t2 = BigInt(metrics[0].longitudinal.report_threshold);
  metrics[0].longitudinal.report_threshold = String(t2 + (t2 >> 20n));
  assert.throws(() => new DeviceConfig({ ...doc.device_config, metrics }), InvalidConfigError);
  const low = structuredClone(doc.device_config.metrics);
  low[0].longitudinal.lifetime_epsilon = low[0].epsilon;
  assert.throws(() => new DeviceConfig({ ...doc.device_config, metrics: low }), InvalidConfigError);
});

test("the client charges eps_inf once per hashed value and nothing for repeats", async () => {
  const storage = new MemoryStorage();
  const client = new OcmsClient(config, { budget: 100, storage });
  const results = [];
  for (let i = 0; i < 20; i++) results.push(await client.report("cat_direct", "red"));
  assert.equal(results[0].epsilonCharged, 3);
  assert.ok(results.slice(1).every((r) => r.epsilonCharged === 0 && r.memoized));
  assert.equal(await client.ledger.spent("cat_direct"), 3);
  const again = await client.report("cat_direct", "blue");
  assert.equal(again.epsilonCharged, 3);
  // one secret for life: a second client on the same storage continues the same memoization
  const other = new OcmsClient(config, { budget: 100, storage });
  assert.equal((await other.report("cat_direct", "red")).epsilonCharged, 0);
  // the storage holds digests, not values or hashed values
  assert.ok(!storage.read("ocms-longitudinal-seen").includes("red"));
  // reports of one value on one device carry the same hash, and vary only by the second round
  const hashes = new Set();
  for (let i = 0; i < 10; i++) {
    const r = await client.report("cat_small", "home");
    const [record] = decodeMessage(r.message, (fp) => config.byFingerprint.get(fp)?.params).records;
    hashes.add(`${record.a0},${record.a1}`);
  }
  assert.equal(hashes.size, 1);
});
