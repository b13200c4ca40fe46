// N reports of one value from the JS client, as one wire frame (tests/producer/test_js_client.py, the
// black-box privacy audit and benchmarks/bench_js_client.py):
//   node reports.mjs CONFIG.json METRIC VALUE N OUT [LEAKY_T]
// Without LEAKY_T every report comes from the public API (privatize: crypto.getRandomValues, the config's T).
// With it, from the same CSPRNG keeping with LEAKY_T (the leaky device of the negative control).
import { readFileSync, writeFileSync } from "node:fs";

import { DeviceConfig, frameOf, privatize } from "../../dist/index.js";
import { CryptoStream, privatizeWith } from "../../dist/testing.js";

const [configPath, metric, value, count, out, leaky] = process.argv.slice(2);
const config = new DeviceConfig(readFileSync(configPath, "utf8"));
const version = config.metric(metric);
const n = Number(count);
const messages = new Array(n);
if (leaky) {
  const stream = new CryptoStream();
  const thresholds = new Map([[version.params.fingerprintHex, BigInt(leaky)]]);
  for (let i = 0; i < n; i++) messages[i] = privatizeWith(stream, version, value, thresholds).message;
} else {
  for (let i = 0; i < n; i++) messages[i] = privatize(config, metric, value).message;
}
writeFileSync(out, frameOf(version.params, messages));
