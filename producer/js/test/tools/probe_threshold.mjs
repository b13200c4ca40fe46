// The keep threshold a client really uses, found from its behaviour (tests/producer/test_js_client.py):
//   node probe_threshold.mjs CONFIG.json METRIC VALUE [LEAKY_T]
// VALUE must encode to the element 0 (the first category, "0"). Each probe reports VALUE through
// OcmsClient.report with a recorded stream: a0 = a1 = 0 (so y = 0), the keep draw c, then other = 0; the
// report keeps (z = 0) exactly when c < T. A binary search over c in [0, 2^64] finds T. LEAKY_T makes the
// client keep with that threshold instead (the negative control), through the test entry point's override.
import { readFileSync } from "node:fs";

import { DeviceConfig, MemoryStorage, OcmsClient, decodeMessage } from "../../dist/index.js";
import { RecordedStream, overrideRandomness } from "../../dist/testing.js";

const [configPath, metric, value, leaky] = process.argv.slice(2);
const config = new DeviceConfig(readFileSync(configPath, "utf8"));
const version = config.metric(metric);
const params = version.params;
const client = new OcmsClient(config, { budget: 1e9, storage: new MemoryStorage() });
const thresholds = leaky ? new Map([[params.fingerprintHex, BigInt(leaky)]]) : undefined;
const w = params.isDirect ? 0 : params.field.coefficientBytes;

async function kept(c) {
  const bytes = new Uint8Array(2 * w + 8 + 8);
  new DataView(bytes.buffer).setBigUint64(2 * w, c);
  overrideRandomness(client, { stream: new RecordedStream(bytes), keepThresholds: thresholds });
  const report = await client.report(metric, value);
  const [record] = decodeMessage(report.message, (fp) => (fp === params.fingerprintHex ? params : undefined)).records;
  if (record.a0 !== (params.isDirect ? 0n : 0n) || (!params.isDirect && record.a1 !== 0n)) throw new Error("probe layout");
  return record.z === 0;
}

let lo = 0n, hi = 1n << 64n; // invariant: kept(lo - 1) or lo = 0; !kept(hi) or hi = 2^64
if (!(await kept(0n))) throw new Error("a keep draw of 0 was not kept");
while (hi - lo > 1n) {
  const mid = (lo + hi) / 2n;
  if (await kept(mid)) lo = mid; else hi = mid;
}
console.log(String(hi)); // the smallest draw that is not kept = T
