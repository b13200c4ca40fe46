/**
 * The device client: validate -> privatize (CSPRNG) -> charge the ledger (or reuse the memoized report)
 * -> queue for upload, in that order, as producer/reporter.py's DeviceReporter:
 *
 * 1. the metric is looked up (UnknownMetricError) and the value encoded (InvalidValueError): nothing
 *    drawn, nothing charged;
 * 2. the queue must have room (QueueFullError): nothing charged;
 * 3. the report is made from crypto.getRandomValues (a discovery report draws its level first);
 * 4. the ledger charges the metric's epsilon to the metric's name in this period, durably, or with
 *    memoization returns this period's report of the same value for free (PrivacyBudgetError over budget:
 *    nothing is sent);
 * 5. the message joins the persistent offline queue, which uploads it (uploader.ts).
 *
 * Nothing identifying is sent: no device key, no value, no cookie (credentials "omit"), no referrer;
 * uploads carry the application token (if any) and a random Idempotency-Key per upload.
 */

import { DeviceConfig, MetricVersion, ReportValue } from "./config.js";
import { InvalidParameterError } from "./errors.js";
import { uintBytes, concat } from "./fields.js";
import { PrivacyLedger } from "./ledger.js";
import { chargeLifetime, deviceSecret, longitudinalReport } from "./longitudinal.js";
import { PrivateReport, privatizeEncoded } from "./privatize.js";
import { ByteStream, CryptoStream } from "./random.js";
import { LocalStorage, MemoryStorage, ProcessLocks, Storage } from "./storage.js";
import { Uploader, UploaderOptions } from "./uploader.js";
import { hex } from "./hash.js";
import { testOverrides } from "./internal.js";

let sharedStream: CryptoStream | null = null;

/** The platform CSPRNG stream of the public API (created on first use). */
function cryptoStream(): ByteStream {
  return (sharedStream ??= new CryptoStream());
}

/**
 * One report of `value` for `metric` of a parsed device config, from the platform CSPRNG: no ledger, no
 * upload (the caller accounts and sends). Throws UnknownMetricError / InvalidValueError before drawing.
 */
export function privatize(config: DeviceConfig, metric: string, value: ReportValue): PrivateReport {
  const version = config.metric(metric);
  return privatizeEncoded(cryptoStream(), version, version.encode(value));
}

/** The memoization key of a value (producer.reporter.value_key): fingerprint | element, W bytes big-endian. */
export function valueKey(version: MetricVersion, value: ReportValue): Uint8Array {
  const encoded = version.encode(value);
  if (version.discovery !== null) {
    const last = version.levels[version.levels.length - 1];
    return concat(last.fingerprint, uintBytes(version.levelElement(encoded, version.levels.length), last.field.coefficientBytes));
  }
  const element = encoded.fingerprint ?? uintBytes(encoded.integer!, version.params.field.coefficientBytes);
  return concat(version.params.fingerprint, element);
}

export interface ClientOptions {
  /** The device config: a parsed DeviceConfig, its JSON document or text. One of config / configUrl. */
  config?: DeviceConfig | object | string;
  /** Where to GET the device config (default: `${collector}/v1/device-config`). */
  configUrl?: string;
  /** The collector's base URL; without it reports are only returned (and charged), never uploaded. */
  collector?: string;
  token?: string;
  /** Privacy budget per metric per period (required: a client never reports without a ledger). */
  budget: number;
  periodSeconds?: number;
  /** Re-send this period's report of a repeated value for free (default false; see docs/device.md). */
  memoize?: boolean;
  /** Where the ledger and the queue live: default localStorage in a browser, memory elsewhere. */
  storage?: Storage;
  /** Upload options (uploader.ts): maxUploadReports, maxQueuedReports, maxLatencyMs, backoff, callbacks. */
  upload?: Omit<UploaderOptions, "collector" | "token" | "storage">;
  /** Milliseconds since the epoch (tests). */
  clock?: () => number;
}

export interface ReportResult extends PrivateReport {
  /** True when this is the memoized report of an earlier identical value (nothing charged). */
  readonly memoized: boolean;
  readonly epsilonCharged: number;
  /** Spent on the metric in this period, after this report. */
  readonly spent: number;
}

function defaultStorage(): Storage {
  return typeof (globalThis as { localStorage?: unknown }).localStorage !== "undefined" ? new LocalStorage() : new MemoryStorage();
}

export class OcmsClient {
  readonly ledger: PrivacyLedger;
  readonly uploader: Uploader | null;
  readonly memoize: boolean;
  private readonly order = new ProcessLocks();
  private readonly storage: Storage;

  constructor(readonly config: DeviceConfig, options: ClientOptions) {
    if (!(config instanceof DeviceConfig)) throw new InvalidParameterError("config: a DeviceConfig (use OcmsClient.create to parse one)");
    const storage = options.storage ?? defaultStorage();
    this.storage = storage;
    this.ledger = new PrivacyLedger(storage, { budget: options.budget, periodSeconds: options.periodSeconds, clock: options.clock });
    this.memoize = Boolean(options.memoize);
    this.uploader = options.collector ? new Uploader({ ...options.upload, collector: options.collector, token: options.token, storage }) : null;
    this.uploader?.kick(true); // what an earlier page or run left in the queue leaves now
  }

  /** A device config document parsed: here without numeric and discoverable metrics (`ocms-client/core`); the full
   *  entry point's OcmsClient (index.ts) reads them too. */
  protected static parseConfig(doc: unknown): DeviceConfig {
    return new DeviceConfig(doc);
  }

  /** Parse (or fetch) the device config, then build the client. */
  static async create(options: ClientOptions): Promise<OcmsClient> {
    let config = options.config;
    if (config === undefined) {
      const url = options.configUrl ?? (options.collector ? options.collector.replace(/\/+$/, "") + "/v1/device-config" : undefined);
      if (url === undefined) throw new InvalidParameterError("give config, configUrl or collector");
      const headers: Record<string, string> = options.token ? { Authorization: `Bearer ${options.token}` } : {};
      const response = await fetch(url, { headers, credentials: "omit", cache: "no-cache" });
      if (!response.ok) throw new InvalidParameterError(`GET ${url}: HTTP ${response.status}`);
      config = await response.json();
    }
    return new this(config instanceof DeviceConfig ? config : this.parseConfig(config), options);
  }

  /** One report of `value` for `metric`: validated, privatized, charged, queued (module doc for the order). */
  report(metric: string, value: ReportValue): Promise<ReportResult> {
    // Reports of one client are made one at a time: the queue-room check, the charge and the enqueue of
    // one report never interleave with another's.
    return this.order.run("report", async () => {
      const version = this.config.metric(metric);
      const encoded = version.encode(value);
      const key = this.memoize ? valueKey(version, value) : null;
      await this.uploader?.ensureRoom();
      const override = testOverrides.get(this); // set only by the internal test entry point
      if (version.longitudinal !== null) { // issue 38: eps_inf once per hashed value, nothing for repeats
        const secret = await deviceSecret(this.storage);
        const made = longitudinalReport(override?.stream ?? cryptoStream(), secret, version, encoded);
        const lifetime = await chargeLifetime(this.storage, this.ledger, version, secret, made.hashed);
        await this.uploader?.enqueue(version.params.fingerprintHex, made.message);
        return { metric: version.name, version: version.version, level: null, fingerprint: version.params.fingerprintHex,
                 message: made.message, memoized: lifetime.charged === 0, epsilonCharged: lifetime.charged,
                 spent: lifetime.spent };
      }
      const fresh = privatizeEncoded(override?.stream ?? cryptoStream(), version, encoded, override?.keepThresholds);
      const charge = await this.ledger.chargeOrReuse(version.name, version.epsilon, key, fresh.message);
      let result: PrivateReport = fresh;
      if (charge.memoized) {
        const fp = hex(charge.report.subarray(4, 12));
        const level = version.levels.findIndex((p) => p.fingerprintHex === fp);
        result = { ...fresh, message: charge.report, fingerprint: fp, level: level >= 0 ? level + 1 : null };
      }
      await this.uploader?.enqueue(result.fingerprint, result.message);
      return { ...result, memoized: charge.memoized, epsilonCharged: charge.memoized ? 0 : version.epsilon, spent: charge.spent };
    });
  }

  /** Resolves when every queued report has been accepted (202) or dropped. */
  async flush(): Promise<void> {
    await this.uploader?.flush();
  }

  /** Stop uploading; queued reports stay in the storage for the next client. */
  close(): void {
    this.uploader?.close();
  }
}
