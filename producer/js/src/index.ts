/**
 * ocms-client: the device side of ocms-pipeline for browsers and Node (docs/device.md, "JavaScript client").
 *
 *   const client = await OcmsClient.create({ collector: "https://collect.example.com", budget: 8 });
 *   await client.report("flight_dest", "ATL");     // validated, privatized (CSPRNG), charged, queued, uploaded
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
export { decodeMessage, encodeRecords, frameOf, peekHeader, HEADER_SIZE, KIND_FRAME, KIND_REPORT } from "./wire.js";
export type { Record3, Header } from "./wire.js";
export { captureRecord, readCapture } from "./capture.js";
export { hex, fromHex } from "./hash.js";
export { VERSION } from "./version.js";
export { NumericLayout } from "./numeric.js";
export {
  ClientTooOldError, DeliveryError, InvalidConfigError, InvalidParameterError, InvalidValueError, NoRandomnessError, OCMSError,
  PrivacyBudgetError, QueueFullError, StorageError, UnknownMetricError, WireFormatError,
} from "./errors.js";
