/**
 * ocms-client/core: the device client for pages that report categories (and integers and strings without
 * discovery) only (docs/device.md, "The core entry point"). Its API is the full entry point's (index.ts) less
 * NumericLayout and the tools that read reports rather than make them (decodeMessage, encodeRecords, frameOf,
 * peekHeader, captureRecord, readCapture); its DeviceConfig leaves a config's numeric and discoverable metrics out
 * (reporting one throws UnknownMetricError), so neither its modules nor its bundle (dist/ocms-client.core.min.js)
 * hold numeric.ts, discovery.ts's DiscoveryDomain or the wire decoder.
 *
 *   import { OcmsClient } from "ocms-client/core";
 *   const client = await OcmsClient.create({ collector: "https://collect.example.com", budget: 8 });
 *   await client.report("flight_dest", "ATL");
 */

export { OcmsClient, privatize, valueKey } from "./client.js";
export type { ClientOptions, ReportResult } from "./client.js";
export { DeviceConfig, MetricVersion, ReportParams, integerValue } from "./config.js";
export type { Domain, Mechanism, ReportValue } from "./config.js";
export type { PrivateReport } from "./privatize.js";
export { PrivacyLedger, Rational } from "./ledger.js";
export type { Charge, LedgerOptions } from "./ledger.js";
export { Uploader, uploadBody } from "./uploader.js";
export type { UploaderOptions } from "./uploader.js";
export { LocalStorage, MemoryStorage } from "./storage.js";
export type { Storage } from "./storage.js";
export { HEADER_SIZE, KIND_FRAME, KIND_REPORT } from "./wire.js";
export { hex, fromHex } from "./hash.js";
export { VERSION } from "./version.js";
export {
  ClientTooOldError, DeliveryError, InvalidConfigError, InvalidParameterError, InvalidValueError, NoRandomnessError, OCMSError,
  PrivacyBudgetError, QueueFullError, StorageError, UnknownMetricError, WireFormatError,
} from "./errors.js";
