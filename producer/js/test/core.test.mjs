// The core entry point (`ocms-client/core`, src/core.ts): the full API less the numeric and discoverable metrics and
// the tools that read reports, for pages that report categories. Its bundle must stay below the 15 kB goal without
// @noble/hashes and hold none of numeric.ts, discovery.ts's DiscoveryDomain or the wire decoder (checked by strings
// that only those modules have, found in the full bundle as the control); its DeviceConfig leaves such metrics out
// and names the full entry point when one is reported; the full entry keeps its API (existing imports work).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { gzipSync } from "node:zlib";

import * as full from "../dist/index.js";
import * as core from "../dist/core.js";
import { VECTORS } from "./support.mjs";

const dist = (name) => readFileSync(new URL(`../dist/${name}`, import.meta.url));
const vectors = (name) => JSON.parse(readFileSync(`${VECTORS}/${name}.json`, "utf8"));
const GOAL = 15_000; // bytes min+gzip -9 without @noble/hashes (docs/device.md, benchmarks/bench_js_client.py)

/** Text only numeric.ts (buckets, trees, the Hybrid mean), discovery.ts's DiscoveryDomain and wire.ts's decoder hold. */
const LEFT_OUT = {
  "numeric.ts NumericLayout": "a numeric metric takes a number",
  "numeric.ts NumericTree": "below the ${", // the branching check's message, a template literal in the bundle
  "numeric.ts HybridMean": "duchi_low + grid * duchi_step",
  "numeric.ts HybridMean (carrier)": "the carrier is direct RR over grid + window + 2",
  "discovery.ts DiscoveryDomain": "ocms-prefix-v1",
  "wire.ts decodeMessage": "coefficient_out_of_field",
  "capture.ts readCapture": "torn length prefix",
};

test("the core bundle without @noble/hashes is below the 15 kB goal (min+gzip -9)", () => {
  for (const name of ["ocms-client.core.nohash.min.js"]) {
    const size = gzipSync(dist(name), { level: 9 }).length;
    assert.ok(size < GOAL, `${name}: ${size} bytes min+gzip, the goal is < ${GOAL}`);
  }
  // the full bundle is the larger one: the numeric code is what the core leaves out
  assert.ok(gzipSync(dist("ocms-client.nohash.min.js"), { level: 9 }).length
            > gzipSync(dist("ocms-client.core.nohash.min.js"), { level: 9 }).length + 2000);
});

test("the core bundles hold none of the numeric, discovery or decoding code; the full bundles do", () => {
  for (const name of ["ocms-client.core.min.js", "ocms-client.core.nohash.min.js"]) {
    const text = dist(name).toString("utf8");
    for (const [what, needle] of Object.entries(LEFT_OUT)) assert.ok(!text.includes(needle), `${name} holds ${what} (${JSON.stringify(needle)})`);
    assert.ok(text.includes("getRandomValues") && text.includes("ocms-value-v1"), `${name}: the reporting code is there`);
  }
  for (const name of ["ocms-client.min.js", "ocms-client.nohash.min.js"]) {
    const text = dist(name).toString("utf8");
    for (const [what, needle] of Object.entries(LEFT_OUT)) assert.ok(text.includes(needle), `${name} lacks ${what}`);
  }
});

test("the core modules never import numeric.js or capture.js (the module graph, not only the bundle)", () => {
  const seen = new Set();
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = dist(file).toString("utf8");
    for (const [, spec] of text.matchAll(/^\s*(?:import|export)\s[^;]*?from\s+"\.\/([^"]+)"/gms)) visit(spec);
  };
  visit("core.js");
  assert.ok(seen.has("config.js") && seen.has("client.js"));
  assert.ok(!seen.has("numeric.js"), [...seen].join(", "));
  assert.ok(!seen.has("capture.js"), [...seen].join(", "));
  // discovery.js is reached for isWellFormed only (strings); its DiscoveryDomain is left out of the bundle (above)
});

test("the core API is the full one less NumericLayout and the report-reading tools; shared classes are the same", async () => {
  const leftOut = ["NumericLayout", "decodeMessage", "encodeRecords", "frameOf", "peekHeader", "captureRecord", "readCapture"];
  assert.deepEqual(Object.keys(core).sort(), Object.keys(full).filter((n) => !leftOut.includes(n)).sort());
  for (const name of ["privatize", "valueKey", "PrivacyLedger", "Uploader", "MemoryStorage", "UnknownMetricError", "hex"]) {
    assert.equal(core[name], full[name], name);
  }
  // the full entry's DeviceConfig and OcmsClient extend the core's: a full config is a core DeviceConfig
  assert.ok(new full.DeviceConfig(vectors("privatize_v1").device_config) instanceof core.DeviceConfig);
  assert.equal((await import("ocms-client/core")).OcmsClient, core.OcmsClient);
  assert.equal((await import("ocms-client")).OcmsClient, full.OcmsClient);
});

test("core: categories, integers and strings report; numeric and discoverable metrics are left out, named on use", async () => {
  const doc = vectors("privatize_v1").device_config;
  const mixed = { ...doc, metrics: [...doc.metrics, ...vectors("numeric_mean_v1").device_config.metrics,
                                    ...vectors("numeric_hierarchy_v1").device_config.metrics] };
  const config = new core.DeviceConfig(mixed);
  assert.deepEqual([...config.metrics.keys()], ["cat_small", "cat_direct", "int_prime64", "int_gf64", "words"]);
  const client = await core.OcmsClient.create({ config: mixed, budget: 1000 });
  for (const [metric, value] of [["cat_small", "home"], ["cat_direct", "red"], ["int_prime64", "7"], ["int_gf64", "1"], ["words", "x"]]) {
    const r = await client.report(metric, value);
    assert.equal(r.fingerprint, doc.metrics.find((m) => m.name === metric).fingerprint);
    assert.equal(core.privatize(config, metric, value).message.length, r.message.length);
  }
  for (const [metric, kind] of [["latency_split", "numeric"], ["payload_tree_mean", "numeric"], ["size_tree", "numeric"],
                                ["words_disc", "discoverable"], ["build_disc", "discoverable"]]) {
    for (const attempt of [() => client.report(metric, 5), async () => core.privatize(config, metric, 5)]) {
      await assert.rejects(attempt, (err) => err instanceof core.UnknownMetricError
        && err.message.includes(`metric "${metric}" is ${kind}`) && err.message.includes('import "ocms-client"'), metric);
    }
  }
  assert.equal(await client.ledger.spent("latency_split"), 0);
  assert.throws(() => new core.DeviceConfig({ ...mixed, metrics: [...mixed.metrics, mixed.metrics.at(-1)] }), /listed twice/);
  // the left-out entries are not read: a damaged one does not stop the core from reporting the others
  const damaged = structuredClone(mixed);
  damaged.metrics.find((m) => m.name === "latency_split").mean.fingerprint = "0000000000000000";
  assert.throws(() => new full.DeviceConfig(damaged), full.InvalidConfigError);
  assert.equal(new core.DeviceConfig(damaged).metric("cat_small").name, "cat_small");
});

test("full: the same config reports every metric through the unchanged API (create, privatize, decodeMessage)", async () => {
  const doc = vectors("privatize_v1").device_config;
  const mixed = { ...doc, metrics: [...doc.metrics, ...vectors("numeric_mean_v1").device_config.metrics] };
  const client = await full.OcmsClient.create({ config: mixed, budget: 1000 });
  assert.ok(client.config instanceof full.DeviceConfig);
  for (const [metric, value] of [["cat_small", "home"], ["words_disc", "ab"], ["build_disc", "300"], ["latency_split", 42]]) {
    const r = await client.report(metric, value);
    const params = client.config.byFingerprint.get(r.fingerprint).params;
    assert.equal(full.decodeMessage(r.message, () => params).records.length, 1, metric);
  }
  // a core DeviceConfig handed to the full client works for what it holds; a full one handed to the core client
  // reports every metric (the numeric code comes with the config's objects, not with the core's modules)
  const coreConfig = new full.OcmsClient(new core.DeviceConfig(mixed), { budget: 10 });
  assert.equal((await coreConfig.report("cat_small", "home")).metric, "cat_small");
  await assert.rejects(coreConfig.report("latency_split", 42), core.UnknownMetricError);
  const fullConfig = new core.OcmsClient(new full.DeviceConfig(mixed), { budget: 10 });
  assert.equal((await fullConfig.report("latency_split", 42)).metric, "latency_split");
  assert.equal(core.privatize(new full.DeviceConfig(mixed), "words_disc", "ab").metric, "words_disc");
});
