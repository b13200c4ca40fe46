// The public surface: the test-only randomness hook is not reachable from it, reports come from the
// platform CSPRNG, and nothing but crypto.getRandomValues is ever used.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import * as api from "../dist/index.js";
import { VECTORS } from "./support.mjs";

const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const config = new api.DeviceConfig(JSON.parse(readFileSync(`${VECTORS}/privatize_v1.json`, "utf8")).device_config);

test("package.json exports the API, its core, the Node storage and the bundles, not the test entry point", async () => {
  assert.deepEqual(Object.keys(pkg.exports).sort(), [".", "./bundle", "./core", "./core/bundle", "./node", "./package.json"]);
  for (const hidden of ["ocms-client/testing", "ocms-client/dist/testing.js", "ocms-client/dist/internal.js", "ocms-client/dist/privatize.js"]) {
    await assert.rejects(import(hidden), (err) => err.code === "ERR_PACKAGE_PATH_NOT_EXPORTED", hidden);
  }
  const self = await import("ocms-client");
  assert.equal(self.OcmsClient, api.OcmsClient);
});

test("the public API offers no way to choose the randomness or the keep threshold", () => {
  const names = Object.keys(api);
  for (const banned of ["RecordedStream", "privatizeWith", "overrideRandomness", "testOverrides", "ByteStream", "CryptoStream", "keepThresholdFor"]) {
    assert.ok(!names.includes(banned), banned);
  }
  // extra arguments are ignored: privatize always draws from the CSPRNG
  const zeros = () => new Uint8Array(64);
  const a = api.privatize(config, "words", "the", zeros);
  const b = api.privatize(config, "words", "the", zeros);
  assert.notEqual(api.hex(a.message), api.hex(b.message));
});

test("the browser bundles (full and core) hold none of the test entry point's names", () => {
  for (const file of ["ocms-client.min.js", "ocms-client.core.min.js"]) {
    const bundle = readFileSync(new URL(`../dist/${file}`, import.meta.url), "utf8");
    for (const name of ["overrideRandomness", "RecordedStream", "drew past the", "recorded bytes"]) assert.ok(!bundle.includes(name), `${file}: ${name}`);
    assert.ok(bundle.includes("getRandomValues"), file);
    assert.ok(!/Math\.random\(\)[^;]*(keep|thresh)/.test(bundle), file);
  }
});

test("without crypto.getRandomValues the client refuses to report (never Math.random)", () => {
  const script = `delete globalThis.crypto;
    const api = await import(${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)});
    const config = new api.DeviceConfig(JSON.parse(${JSON.stringify(readFileSync(`${VECTORS}/privatize_v1.json`, "utf8"))}).device_config);
    try { api.privatize(config, "cat_small", "home"); console.log("reported"); } catch (e) { console.log(e.name + ": " + e.message); }`;
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.match(out, /^NoRandomnessError: no CSPRNG: crypto.getRandomValues is not available/);
});

test("Math.random is never called while reporting", () => {
  const script = `Math.random = () => { throw new Error("Math.random called"); };
    const api = await import(${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)});
    const config = new api.DeviceConfig(JSON.parse(${JSON.stringify(readFileSync(`${VECTORS}/privatize_v1.json`, "utf8"))}).device_config);
    const client = new api.OcmsClient(config, { budget: 1000, memoize: true });
    for (const [m, v] of [["cat_small", "home"], ["cat_direct", "red"], ["int_prime64", "7"], ["int_gf64", "1"], ["words", "x"],
                          ["words_disc", "ab"], ["utf8_disc", "东"], ["build_disc", "300"]]) await client.report(m, v);
    console.log("ok");`;
  const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(run.stderr, "");
  assert.equal(run.stdout.trim(), "ok");
});

test("reports of one value differ (fresh coefficients) and decode under their metric", () => {
  const lookup = (fp) => config.byFingerprint.get(fp)?.params;
  for (const name of config.metrics.keys()) {
    const value = { cat_small: "home", cat_direct: "red", int_prime64: "5", int_gf64: "5", words: "w", words_disc: "ab", utf8_disc: "ab", build_disc: "5" }[name];
    const seen = new Set();
    for (let i = 0; i < 20; i++) {
      const r = api.privatize(config, name, value);
      assert.equal(r.message.length, 16 + lookup(r.fingerprint).recordBytes);
      api.decodeMessage(r.message, lookup);
      seen.add(api.hex(r.message));
    }
    assert.ok(seen.size > (name === "cat_direct" ? 1 : 10), name);
  }
});
