// Numeric metrics (issue 40): every case of tests/vectors/numeric_v1.json (a number -> its bucket index, four
// layouts) replayed by the JS client from the device config alone, NaN and non-numbers refused, and a number
// reported as an ordinary report of its bucket's index (the wire shape of every integer metric).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { DeviceConfig, InvalidConfigError, InvalidValueError, decodeMessage, privatize } from "../dist/index.js";
import { VECTORS } from "./support.mjs";

const doc = JSON.parse(readFileSync(`${VECTORS}/numeric_v1.json`, "utf8"));
const config = new DeviceConfig(doc.device_config);
const number = (v) => (typeof v === "string" ? Number(v) : v); // "Infinity" / "-Infinity"

test("every numeric vector maps to its bucket", () => {
  assert.ok(doc.cases.length >= 600);
  for (const c of doc.cases) {
    assert.equal(config.metric(c.metric).numeric.bucket(number(c.value)), c.bucket, JSON.stringify(c));
  }
});

test("NaN and what is not a number are refused naming the metric", () => {
  for (const bad of [NaN, "12", 12n, null]) {
    assert.throws(() => privatize(config, "latency_ms", bad), (err) => err instanceof InvalidValueError
      && err.message.includes("latency_ms"));
  }
});

test("a number is reported as its bucket index through the metric's oracle", () => {
  const version = config.metric("temperature_c"); // direct RR over 7 buckets at epsilon 2: keep p = 0.552
  const counts = new Array(7).fill(0);
  const n = 2000;
  for (let i = 0; i < n; i++) {
    const report = privatize(config, "temperature_c", 21.5); // bucket 5: (17.25, 30]
    const [record] = decodeMessage(report.message, (fp) => config.byFingerprint.get(fp)?.params).records;
    counts[record.z] += 1;
  }
  const keep = Math.exp(2) / (Math.exp(2) + 6);
  const sd = Math.sqrt(n * keep * (1 - keep));
  assert.ok(Math.abs(counts[5] - n * keep) < 4.5 * sd, String(counts));
  assert.ok(Math.max(...counts.filter((_, i) => i !== 5)) < (n * keep) / 2, String(counts)); // negative control
  assert.equal(version.params.dictionarySize, 7n);
});

test("a numeric entry must agree with the dictionary", () => {
  const entry = structuredClone(doc.device_config.metrics[0]);
  entry.numeric.bounds = entry.numeric.bounds.slice(1);
  assert.throws(() => new DeviceConfig({ format: 1, metrics: [entry] }), InvalidConfigError);
  const unsorted = structuredClone(doc.device_config.metrics[0]);
  unsorted.numeric.bounds[1] = unsorted.numeric.bounds[0];
  assert.throws(() => new DeviceConfig({ format: 1, metrics: [unsorted] }), /increase strictly/);
});
