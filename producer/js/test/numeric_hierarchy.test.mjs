// Numeric metrics reported as hierarchical histograms (issue 40): every case of tests/vectors/numeric_hierarchy_v1.json
// replayed by the JS client from the device config alone and the recorded random bytes (the level drawn first, the
// bucket's node reported with that level's parameters and fingerprint), the levels uniform over many reports, and a
// damaged "hierarchy" entry refused naming what is wrong.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { DeviceConfig, InvalidConfigError, decodeMessage, fromHex, hex, privatize } from "../dist/index.js";
import { RecordedStream, privatizeWith } from "../dist/testing.js";
import { VECTORS } from "./support.mjs";

const doc = JSON.parse(readFileSync(`${VECTORS}/numeric_hierarchy_v1.json`, "utf8"));
const config = new DeviceConfig(doc.device_config);
const number = (v) => (typeof v === "string" ? Number(v) : v); // "Infinity" / "-Infinity"
const lookup = (fp) => config.byFingerprint.get(fp)?.params;

for (const [i, c] of doc.cases.entries()) {
  test(`tree case ${i}: ${c.metric} ${c.value} -> level ${c.level} node ${c.node}`, () => {
    const stream = new RecordedStream(fromHex(c.random_hex));
    const report = privatizeWith(stream, config.metric(c.metric), number(c.value));
    assert.equal(hex(report.message), c.message_hex);
    assert.equal(stream.remaining, 0, "must consume exactly the recorded bytes");
    assert.equal(report.level, c.level);
    assert.equal(report.fingerprint, c.fingerprint);
    const [record] = decodeMessage(report.message, lookup).records;
    assert.deepEqual({ a0: String(record.a0), a1: String(record.a1), z: record.z }, c.report);
  });
}

test("every level of every tree is in the config and some case's", () => {
  for (const entry of doc.device_config.metrics) {
    const version = config.metric(entry.name);
    assert.deepEqual(version.tree.levels.map((p) => p.fingerprintHex), entry.hierarchy.levels.map((l) => l.fingerprint));
    assert.equal(version.params.fingerprintHex, entry.fingerprint); // the finest level's
    const drawn = new Set(doc.cases.filter((c) => c.metric === entry.name).map((c) => c.level));
    assert.equal(drawn.size, entry.hierarchy.levels.length);
  }
});

test("levels are drawn uniformly and each report decodes with its level", () => {
  const n = 3000; // size_tree: three levels, 1000 +- 25.8 (binomial sd) each
  const perLevel = [0, 0, 0];
  for (let i = 0; i < n; i++) {
    const report = privatize(config, "size_tree", 17.3); // bucket 18: nodes 1, 4, 18
    const found = config.byFingerprint.get(report.fingerprint);
    assert.equal(found.level, report.level);
    decodeMessage(report.message, lookup);
    perLevel[report.level - 1] += 1;
  }
  const sd = Math.sqrt(n * (1 / 3) * (2 / 3));
  for (const count of perLevel) assert.ok(Math.abs(count - n / 3) < 4.5 * sd, String(perLevel));
});

test("a damaged hierarchy entry is refused naming what is wrong", () => {
  const cases = [
    [(e) => { e.hierarchy.levels[0].span += 1; }, /levels\[0\]\.span/],
    [(e) => { e.hierarchy.branching = 40; }, /branching/],
    [(e) => { e.hierarchy.levels.pop(); }, /expected 3 levels/],
    [(e) => { e.hierarchy.levels[1].fingerprint = e.hierarchy.levels[0].fingerprint; }, /levels\[1\]\.fingerprint/],
    [(e) => { e.fingerprint = e.hierarchy.levels[0].fingerprint; }, /finest level/],
    [(e) => { delete e.hierarchy; }, /hierarchy/],
  ];
  for (const [damage, message] of cases) {
    const entry = structuredClone(doc.device_config.metrics.find((m) => m.name === "size_tree"));
    damage(entry);
    assert.throws(() => new DeviceConfig({ format: 1, metrics: [entry] }),
      (err) => err instanceof InvalidConfigError && message.test(err.message), String(message));
  }
});
