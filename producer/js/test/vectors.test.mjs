// Every record of tests/vectors/*.json replayed by the JS client (a case the Python generators add is read
// here too): privatize_v1.json (single reports and frames from recorded random bytes, invalid values),
// wire_v1.json (decode, re-encode, one malformed message per reason), binding_v1.json (fingerprints).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { DeviceConfig, InvalidValueError, WireFormatError, decodeMessage, encodeRecords, frameOf, fromHex, hex }
  from "../dist/index.js";
import { RecordedStream, parameterFingerprint, primeField, binaryField, privatizeWith, ReportParams, isPrime }
  from "../dist/testing.js";
import { VECTORS, keepThresholdOf } from "./support.mjs";

const privatizeDoc = JSON.parse(readFileSync(`${VECTORS}/privatize_v1.json`, "utf8"));
const wireDoc = JSON.parse(readFileSync(`${VECTORS}/wire_v1.json`, "utf8"));
const bindingDoc = JSON.parse(readFileSync(`${VECTORS}/binding_v1.json`, "utf8"));
const config = new DeviceConfig(privatizeDoc.device_config);

function lookup(fingerprint) {
  return config.byFingerprint.get(fingerprint)?.params;
}

test("the vectors' device config parses and holds every metric", () => {
  assert.deepEqual([...config.metrics.keys()], privatizeDoc.device_config.metrics.map((m) => m.name));
  assert.ok(privatizeDoc.singles.length >= 39 && privatizeDoc.frames.length >= 4 && privatizeDoc.invalid.length >= 8);
});

for (const [i, c] of privatizeDoc.singles.entries()) {
  test(`single ${i}: ${c.metric} ${JSON.stringify(c.value).slice(0, 40)}${c.note ? " (forced rejection)" : ""}`, () => {
    const stream = new RecordedStream(fromHex(c.random_hex));
    const report = privatizeWith(stream, config.metric(c.metric), c.value);
    assert.equal(hex(report.message), c.message_hex);
    assert.equal(stream.remaining, 0, "must consume exactly the recorded bytes");
    assert.equal(report.level, c.level ?? null);
    const [record] = decodeMessage(report.message, lookup).records;
    assert.deepEqual({ a0: String(record.a0), a1: String(record.a1), z: record.z }, c.report);
  });
}

for (const f of privatizeDoc.frames) {
  test(`frame: ${f.metric} x ${f.values.length}`, () => {
    const version = config.metric(f.metric);
    const stream = new RecordedStream(fromHex(f.random_hex));
    const messages = f.values.map((v) => privatizeWith(stream, version, v).message);
    assert.equal(stream.remaining, 0);
    const frame = frameOf(version.params, messages);
    assert.equal(hex(frame), f.message_hex);
    const decoded = decodeMessage(frame, lookup).records.map((r) => ({ a0: String(r.a0), a1: String(r.a1), z: r.z }));
    assert.deepEqual(decoded, f.reports);
  });
}

for (const bad of privatizeDoc.invalid) {
  test(`invalid: ${bad.metric} ${JSON.stringify(bad.value)} (${bad.reason}) is refused before any byte is drawn`, () => {
    const stream = new RecordedStream(new Uint8Array(0));
    assert.throws(() => privatizeWith(stream, config.metric(bad.metric), bad.value), InvalidValueError);
    assert.equal(stream.used, 0);
  });
}

// ------------------------------------------------------------------ wire_v1.json
// Its parameter sets give epsilon, d and the fingerprint; m is the optimum cms_core chose. The fingerprint
// authenticates (epsilon, m, field, d, domain), so the m (and the field cms_core.fields.choose_field gives
// for it) whose fingerprint matches is that parameter set's, found by search.
function nextPrime(n) {
  let c = n < 2n ? 2n : n;
  while (!isPrime(c)) c++;
  return c;
}

function chooseField(d, m) {
  const need = d + 1n > 7n * m ? d + 1n : 7n * m;
  if (need <= 2n ** 32n) {
    const p = nextPrime(need);
    if (p < 2n ** 32n) return primeField(p, "test");
  }
  if (need <= 2n ** 64n - 59n) return primeField(2n ** 64n - 59n, "test");
  for (const degree of [64, 128]) {
    if (d <= 1n << BigInt(degree) && 7n * m <= 1n << BigInt(degree)) {
      return binaryField(degree, degree === 64 ? (1n << 64n) | 27n : (1n << 128n) | 135n, "test");
    }
  }
  throw new Error(`no field for d=${d}`);
}

function wireParams(set) {
  const domain = set.value_domain ?? "integer";
  const d = domain === "string" ? 1n << 128n : BigInt(set.dictionary_size);
  for (let m = 2; m <= 100_000; m++) {
    const field = chooseField(d, BigInt(m));
    const fp = hex(parameterFingerprint(set.epsilon, m, field, d, domain, "ocms", null));
    if (fp === set.fingerprint) {
      return new ReportParams(fromHex(fp), set.epsilon, m, keepThresholdOf(set.epsilon, m), field, "ocms", d, "unbound");
    }
  }
  throw new Error(`no m gives the fingerprint ${set.fingerprint}`);
}

const wireSets = Object.fromEntries(Object.entries(wireDoc.param_sets).map(([name, set]) => [name, wireParams(set)]));
const wireLookup = (fp) => Object.values(wireSets).find((p) => p.fingerprintHex === fp);

for (const v of wireDoc.valid) {
  test(`wire valid: ${v.title}`, () => {
    const message = fromHex(v.hex);
    const { params, kind, records } = decodeMessage(message, wireLookup);
    assert.equal(params, wireSets[v.params]);
    assert.equal(kind, v.kind);
    assert.deepEqual(records.map((r) => ({ a0: String(r.a0), a1: String(r.a1), z: r.z })), v.records);
    const again = encodeRecords(params, v.records.map((r) => ({ a0: BigInt(r.a0), a1: BigInt(r.a1), z: r.z })), v.kind);
    assert.equal(hex(again), v.hex);
  });
}

for (const v of wireDoc.malformed) {
  test(`wire malformed: ${v.title} -> ${v.reason}`, () => {
    assert.throws(() => decodeMessage(fromHex(v.hex), wireLookup),
                  (err) => err instanceof WireFormatError && err.reason === v.reason);
  });
}

// ------------------------------------------------------------------ binding_v1.json
function fieldOfDescriptor(descriptorHex) {
  const bytes = fromHex(descriptorHex);
  const text = new TextDecoder().decode(bytes.subarray(0, 7));
  const big = (b) => b.reduce((x, y) => (x << 8n) | BigInt(y), 0n);
  if (text.startsWith("prime:")) return primeField(big(bytes.subarray(6)), "test");
  const degree = Number(big(bytes.subarray(7, 9)));
  return binaryField(degree, big(bytes.subarray(9)), "test");
}

for (const v of bindingDoc.vectors) {
  test(`binding: ${v.binding} (${v.field}, ${v.mechanism})`, () => {
    const field = fieldOfDescriptor(v.field_descriptor);
    assert.equal(hex(field.descriptor), v.field_descriptor);
    const d = BigInt(v.dictionary_size);
    assert.equal(hex(parameterFingerprint(v.epsilon, v.hash_range, field, d, v.value_domain, v.mechanism, v.binding)), v.fingerprint);
    assert.equal(hex(parameterFingerprint(v.epsilon, v.hash_range, field, d, v.value_domain, v.mechanism, null)), v.unbound_fingerprint);
    const params = new ReportParams(fromHex(v.fingerprint), v.epsilon, v.hash_range, keepThresholdOf(v.epsilon, v.hash_range),
                                    field, v.mechanism, d, v.binding);
    const [record] = decodeMessage(fromHex(v.single_report.hex), (fp) => (fp === v.fingerprint ? params : undefined)).records;
    assert.deepEqual({ a0: String(record.a0), a1: String(record.a1), z: record.z },
                     { a0: v.single_report.a0, a1: v.single_report.a1, z: v.single_report.z });
  });
}
