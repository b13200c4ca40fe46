// Device-config validation: a damaged or tampered configuration is refused (never used), naming the metric
// and the field; integers never go through lossy Numbers.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { DeviceConfig, InvalidConfigError, InvalidValueError, UnknownMetricError, integerValue } from "../dist/index.js";
import { keepThresholdFor } from "../dist/testing.js";
import { VECTORS } from "./support.mjs";

const base = JSON.parse(readFileSync(`${VECTORS}/privatize_v1.json`, "utf8")).device_config;

function tampered(name, edit) {
  const doc = structuredClone(base);
  edit(doc.metrics.find((m) => m.name === name));
  return doc;
}

function refused(doc, pattern) {
  assert.throws(() => new DeviceConfig(doc), (err) => err instanceof InvalidConfigError && pattern.test(err.message),
                `expected InvalidConfigError matching ${pattern}`);
}

test("every keep threshold of the vectors' config is the one recomputed here, to the integer", () => {
  for (const m of base.metrics) {
    assert.equal(keepThresholdFor(m.epsilon, m.m), BigInt(m.keep_threshold), m.name);
    for (const level of m.discovery?.levels ?? []) assert.equal(keepThresholdFor(m.epsilon, level.m), BigInt(level.keep_threshold));
  }
});

test("a keep threshold raised or lowered beyond a few ulps of exp is refused; within them it is accepted", () => {
  for (const name of ["cat_small", "cat_direct", "words"]) {
    const t = BigInt(base.metrics.find((m) => m.name === name).keep_threshold);
    const up = tampered(name, (m) => { m.keep_threshold = String(t + t / 2n ** 40n); });
    refused(up, new RegExp(`metric "${name}".keep_threshold: keep_threshold \\d+ does not match epsilon`));
    refused(tampered(name, (m) => { m.keep_threshold = String(t - t / 2n ** 40n); }), /does not match epsilon/);
    refused(tampered(name, (m) => { m.keep_threshold = "18446744073709551615"; }), /does not match epsilon/);
    new DeviceConfig(tampered(name, (m) => { m.keep_threshold = String(t + 2n); }));
  }
  // the leaky threshold of the audit's negative control (1.25 epsilon) is far outside the tolerance
  const leaky = keepThresholdFor(2.5, 4);
  refused(tampered("cat_small", (m) => { m.keep_threshold = String(leaky); }), /tampered/);
});

test("a level's keep threshold is checked too", () => {
  refused(tampered("words_disc", (m) => { m.discovery.levels[2].keep_threshold = "18000000000000000000"; }),
          /discovery.levels\[2\].keep_threshold/);
});

test("a fingerprint that is not its parameters' is refused (epsilon, m, field, categories, mechanism)", () => {
  refused(tampered("cat_small", (m) => { m.fingerprint = "0000000000000000"; }), /not the fingerprint of its parameters/);
  refused(tampered("cat_small", (m) => { m.categories = m.categories.slice(0, -1); }), /fingerprint/); // d = their number
  // The names themselves are not in the fingerprint (cms_core's design): a renamed category passes.
  new DeviceConfig(tampered("cat_small", (m) => { m.categories = [...m.categories.slice(0, -1), "other"]; }));
  refused(tampered("int_gf64", (m) => { m.epsilon = 3.0000001; }), /keep_threshold|fingerprint/);
  refused(tampered("cat_direct", (m) => { delete m.mechanism; }), /fingerprint|fit/);
  refused(tampered("words_disc", (m) => { m.discovery.levels[0].fingerprint = m.discovery.levels[1].fingerprint; }), /levels\[0\].fingerprint/);
});

test("fields: a non-prime order, an unknown polynomial, an unsupported degree", () => {
  refused(tampered("cat_small", (m) => { m.field.order = "27"; }), /field.order: field order 27 is not a prime/);
  refused(tampered("int_gf64", (m) => { m.field.polynomial = "18446744073709551617"; }), /is not cms_core's GF\(2\^64\) polynomial/);
  refused(tampered("words", (m) => { m.field.degree = 32; }), /GF\(2\^32\) is not supported/);
  refused(tampered("cat_small", (m) => { m.field.order = 29; m.m = 2.5; }), /m must be an integer/);
});

test("malformed documents name what to fix", () => {
  refused("{", /not JSON/);
  refused({ format: 2, metrics: [] }, /format 2: this client reads format 1/);
  refused({ format: 1 }, /"metrics" must be a list/);
  refused({ format: 1, metrics: [base.metrics[0], base.metrics[0]] }, /listed twice/);
  refused(tampered("cat_small", (m) => { m.epsilon = -1; }), /epsilon: expected a number in \(0, 100\]/);
  refused(tampered("int_prime64", (m) => { m.dictionary_size = 4611686018427387904; }), /decimal digits in a JSON string/);
});

test("an unknown metric names the ones the config holds", () => {
  const config = new DeviceConfig(base);
  assert.throws(() => config.metric("nope"), (err) => err instanceof UnknownMetricError && /holds cat_small, cat_direct/.test(err.message));
});

test("integers: decimal strings and BigInt exactly, Numbers only when safe", () => {
  assert.equal(integerValue("18446744073709551615"), 2n ** 64n - 1n);
  assert.equal(integerValue(2n ** 64n - 1n), 2n ** 64n - 1n);
  assert.equal(integerValue(9007199254740991), 9007199254740991n);
  assert.throws(() => integerValue(9007199254740993), /exact only up to 2\^53/);
  assert.throws(() => integerValue(1.5), InvalidValueError);
  assert.throws(() => integerValue("0x10"), /not a non-negative decimal integer/);
  const version = new DeviceConfig(base).metric("int_gf64");
  assert.equal(version.encode("18446744073709551615").integer, 2n ** 64n - 1n);
  assert.throws(() => version.encode(2n ** 64n), /metric "int_gf64" version 1: value 18446744073709551616: outside the dictionary/);
});

test("strings: lone surrogates are refused (they have no UTF-8), bytes are accepted", () => {
  const config = new DeviceConfig(base);
  assert.throws(() => config.metric("words").encode("a\uD800b"), /lone surrogate/);
  const bytes = config.metric("words").encode(new TextEncoder().encode("café")).fingerprint;
  assert.deepEqual(bytes, config.metric("words").encode("café").fingerprint);
  assert.equal(bytes.length, 16);
  assert.throws(() => config.metric("words").encode(42), /the string domain takes strings/);
});

test("a metric needing a newer client release is refused naming it; one this client is new enough for is not", async () => {
  const { ClientTooOldError, OcmsClient, VERSION } = await import("../dist/index.js");
  const [major, minor] = VERSION.split(".").map(Number);
  const next = `${major}.${minor + 1}.0`;
  const config = new DeviceConfig(tampered("cat_small", (m) => { m.min_client_version = next; }));
  assert.throws(() => config.metric("cat_small"), (err) => err instanceof ClientTooOldError && err.message ===
    `metric "cat_small" needs an ocms client of release ${next} or later; this client is ${VERSION}: upgrade it to ${next} or later`);
  const client = new OcmsClient(config, { budget: 100 });
  await assert.rejects(client.report("cat_small", base.metrics.find((m) => m.name === "cat_small").categories[0]),
                       ClientTooOldError);
  assert.equal(await client.ledger.spent("cat_small"), 0); // nothing charged
  for (const enough of [VERSION, "0.1.0"]) {
    new DeviceConfig(tampered("cat_small", (m) => { m.min_client_version = enough; })).metric("cat_small");
  }
  for (const bad of ["0.3", 3, "v0.3.0", "0.03.0", "0.3.0-rc1"]) {
    refused(tampered("cat_small", (m) => { m.min_client_version = bad; }), /metric "cat_small".min_client_version: expected a release "X.Y.Z"/);
  }
});
