// Numeric metrics with a Hybrid mean (issue 40): every case of tests/vectors/numeric_mean_v1.json replayed by the JS
// client from the device config alone and the recorded random bytes (the part drawn first; part 0 a Hybrid report
// framed with the mean's fingerprint, the others the histogram's), the parts uniform over many reports, and a damaged
// "mean" entry refused naming what is wrong.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { DeviceConfig, InvalidConfigError, decodeMessage, fromHex, hex, privatize } from "../dist/index.js";
import { RecordedStream, privatizeWith } from "../dist/testing.js";
import { VECTORS } from "./support.mjs";

const doc = JSON.parse(readFileSync(`${VECTORS}/numeric_mean_v1.json`, "utf8"));
const config = new DeviceConfig(doc.device_config);
const number = (v) => (typeof v === "string" ? Number(v) : v); // "Infinity" / "-Infinity"
const lookup = (fp) => config.byFingerprint.get(fp)?.params;

for (const [i, c] of doc.cases.entries()) {
  test(`mean case ${i}: ${c.metric} ${c.value} -> part ${c.part}`, () => {
    const stream = new RecordedStream(fromHex(c.random_hex));
    const report = privatizeWith(stream, config.metric(c.metric), number(c.value));
    assert.equal(hex(report.message), c.message_hex);
    assert.equal(stream.remaining, 0, "must consume exactly the recorded bytes");
    assert.equal(report.fingerprint, c.fingerprint);
    const [record] = decodeMessage(report.message, lookup).records;
    if (c.part === 0) assert.equal(record.z, c.z);
  });
}

test("every metric's mean is in the config, its carrier found by fingerprint", () => {
  for (const entry of doc.device_config.metrics) {
    const version = config.metric(entry.name);
    assert.equal(version.mean.params.fingerprintHex, entry.mean.fingerprint);
    assert.equal(version.mean.parts, entry.mean.parts);
    assert.equal(config.byFingerprint.get(entry.mean.fingerprint).version, version);
  }
});

test("parts are drawn uniformly and each report decodes with its parameters", () => {
  const n = 3000; // latency_split: two parts, 1500 +- 27.4 (binomial sd) each
  let mean = 0;
  const carrier = config.metric("latency_split").mean.params;
  for (let i = 0; i < n; i++) {
    const report = privatize(config, "latency_split", 60);
    const [record] = decodeMessage(report.message, lookup).records;
    if (report.fingerprint === carrier.fingerprintHex) {
      mean += 1;
      assert.ok(record.z < carrier.m);
    }
  }
  assert.ok(Math.abs(mean - n / 2) < 4.5 * Math.sqrt(n / 4), String(mean));
});

test("a damaged mean entry is refused naming what is wrong", () => {
  const cases = [
    [(e) => { e.mean.grid += 1; }, /mean\.grid/],
    [(e) => { e.mean.window += 1; }, /grid \+ window \+ 2/],
    [(e) => { e.mean.parts = 0; }, /mean\.parts/],
    [(e) => { e.mean.upper = 1; }, /lower and upper/],
    [(e) => { e.mean.pm_keep = "18446744073709551616"; }, /mean\.pm_keep/],
    [(e) => { e.mean.fingerprint = e.fingerprint; }, /mean\.fingerprint/],
    [(e) => { delete e.numeric; e.mechanism = "direct"; }, /numeric metric/],
  ];
  for (const [damage, message] of cases) {
    const entry = structuredClone(doc.device_config.metrics.find((m) => m.name === "latency_split"));
    damage(entry);
    assert.throws(() => new DeviceConfig({ format: 1, metrics: [entry] }),
      (err) => err instanceof InvalidConfigError && message.test(err.message), String(message));
  }
});
