/**
 * ocms-client: the device side of ocms-pipeline for browsers and Node (docs/device.md, "JavaScript client").
 *
 *   const client = await OcmsClient.create({ collector: "https://collect.example.com", budget: 8 });
 *   await client.report("flight_dest", "ATL");     // validated, privatized (CSPRNG), charged, queued, uploaded
 *
 * The core entry point (core.ts, `ocms-client/core`) plus numeric metrics (numeric.ts: buckets, trees, the Hybrid
 * mean) and discoverable ones (discovery.ts), which this DeviceConfig and OcmsClient read, and the tools that read
 * reports (wire.ts, capture.ts). Pages that report neither kind of metric can import `ocms-client/core`, whose
 * bundle is smaller.
 */

import { OcmsClient as CoreClient } from "./client.js";
import { DeviceConfig as CoreConfig, Extensions } from "./config.js";
import { DiscoveryDomain } from "./discovery.js";
import { HybridMean, NumericLayout, NumericTree } from "./numeric.js";

export * from "./core.js";
export { NumericLayout };
export { decodeMessage, encodeRecords, frameOf, peekHeader } from "./wire.js";
export type { Record3, Header } from "./wire.js";
export { captureRecord, readCapture } from "./capture.js";

/** What the core leaves out: numeric metrics (buckets, trees, the Hybrid mean) and discoverable ones. */
const EXTENSIONS: Extensions = { layout: NumericLayout.fromConfig, tree: NumericTree.fromConfig, mean: HybridMean.fromConfig,
                                 discovery: DiscoveryDomain.fromConfig };

/** A parsed, validated device configuration, numeric and discoverable metrics included (config.ts DeviceConfig). */
export class DeviceConfig extends CoreConfig {
  constructor(doc: unknown) {
    super(doc, EXTENSIONS);
  }
}

/** The device client (client.ts OcmsClient) whose `create` reads numeric and discoverable metrics too. */
export class OcmsClient extends CoreClient {
  protected static override parseConfig(doc: unknown): DeviceConfig {
    return new DeviceConfig(doc);
  }
}
