/**
 * Upload to an `ocms collector` (docs/collector.md) through a bounded, persistent offline queue.
 *
 * - Reports wait in the queue (the storage's document `ocms-queue:<collector URL>`, so they survive a
 *   reload or a restart) grouped into uploads of one parameter set (the collector refuses mixed ones), at
 *   most `maxUploadReports` each; an upload leaves once full or `maxLatencyMs` after its first report.
 * - Each upload gets a random Idempotency-Key (24 bytes from the CSPRNG, base64url) when it is created; it
 *   is sealed (no report joins it) before its first attempt, and every retry, in this page or after a
 *   reload, sends the same key with the same body, so the collector counts it once (within its window).
 * - 408, 429, 5xx and network errors are retried after the answer's Retry-After (seconds or a date),
 *   else exponential backoff from `baseBackoffMs`, at most `maxBackoffMs`, with jitter; other 4xx are
 *   permanent: the upload is dropped and `onError` gets a DeliveryError (its reports stay charged).
 * - At most `maxQueuedReports` wait; `hasRoom()` is checked before a report is charged (QueueFullError).
 * - On page hide (`pagehide`, `visibilitychange` to hidden) what is queued leaves at once with
 *   `fetch(..., {keepalive: true})`, which carries the Authorization and Idempotency-Key headers.
 *   navigator.sendBeacon is not used: it cannot set headers, so the collector could neither authenticate
 *   it (tokens) nor recognise its retry (Idempotency-Key) and a beacon that arrived would be counted again
 *   when the queue re-sends it. An upload stays queued until a 202 is seen, so one whose keepalive answer
 *   was lost with the page is re-sent with its key on the next load.
 */

import { DeliveryError, InvalidParameterError, QueueFullError, StorageError } from "./errors.js";
import { fromHex, hex } from "./hash.js";
import { Storage } from "./storage.js";
import { HEADER_SIZE, KIND_FRAME } from "./wire.js";

const FORMAT = 1;
const RETRIABLE = new Set([408, 429, 500, 502, 503, 504]);
/** Browsers cap the bodies of keepalive requests in flight at 64 KiB per page. */
const KEEPALIVE_BYTES = 60_000;

export interface UploaderOptions {
  /** The collector's base URL (http:// or https://). */
  collector: string;
  /** The application's bearer token, when the collector requires one. */
  token?: string;
  storage: Storage;
  /** Reports per upload (default 100; the collector accepts up to its --max-upload-reports, 1,000 by default). */
  maxUploadReports?: number;
  /** Reports the queue holds at most (default 10,000). */
  maxQueuedReports?: number;
  /** How long the first report of an upload waits for others (default 1,000 ms). */
  maxLatencyMs?: number;
  baseBackoffMs?: number;
  maxBackoffMs?: number;
  /** Per-request timeout (default 90,000 ms: above a shuffling collector's default wait for its batch, 60 s,
   *  plus 2 x 5 s for Kafka's acknowledgement; docs/collector.md, "Shuffling"). */
  timeoutMs?: number;
  /** Permanent failures (the upload is dropped). */
  onError?: (error: DeliveryError) => void;
  /** Each accepted upload. */
  onDelivered?: (upload: { key: string; reports: number; attempts: number; replayed: boolean }) => void;
  /** Listen to pagehide / visibilitychange / online (default: when `window` exists). */
  pageEvents?: boolean;
  /** The fetch to use (default globalThis.fetch). */
  fetch?: typeof fetch;
}

interface QueuedUpload {
  key: string;
  fp: string;
  msgs: string[];
  sealed: boolean;
  attempts: number;
  created: number;
  not_before: number;
}

interface QueueDoc {
  format: number;
  uploads: QueuedUpload[];
}

function positive(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new InvalidParameterError(`${name} ${v}: must be a finite number >= 0`);
  return v;
}

function idempotencyKey(): string {
  const bytes = new Uint8Array(24);
  globalThis.crypto.getRandomValues(bytes);
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The upload body: the single report itself, or a frame of the records of several (one fingerprint). */
export function uploadBody(messages: readonly Uint8Array[]): Uint8Array {
  if (messages.length === 1) return messages[0];
  const size = messages[0].length - HEADER_SIZE;
  const out = new Uint8Array(HEADER_SIZE + messages.length * size);
  out.set(messages[0].subarray(0, 12));
  out[3] = KIND_FRAME;
  new DataView(out.buffer).setUint32(12, messages.length);
  messages.forEach((m, i) => out.set(m.subarray(HEADER_SIZE), HEADER_SIZE + i * size));
  return out;
}

function retryAfterMs(header: string | null): number | null {
  if (header === null) return null;
  const seconds = Number(header);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(header);
  return Number.isFinite(date) ? Math.max(0, date - Date.now()) : null;
}

export class Uploader {
  readonly url: string;
  readonly key: string;
  readonly maxUploadReports: number;
  readonly maxQueuedReports: number;
  private readonly maxLatencyMs: number;
  private readonly baseBackoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly timeoutMs: number;
  private readonly fetchImpl: typeof fetch;
  private running: Promise<void> | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private idleWaiters: (() => void)[] = [];
  private closed = false;
  private readonly detach: (() => void)[] = [];
  /** Counters: uploads accepted, attempts made, retries. */
  readonly stats = { uploads: 0, attempts: 0, retries: 0, replayed: 0, dropped: 0 };

  constructor(private readonly options: UploaderOptions) {
    const base = String(options.collector ?? "");
    if (!/^https?:\/\/[^/]/.test(base)) throw new InvalidParameterError(`collector ${JSON.stringify(base)}: must be the http:// or https:// URL of an ocms collector`);
    this.url = base.replace(/\/+$/, "") + "/v1/reports";
    this.key = `ocms-queue:${base.replace(/\/+$/, "")}`;
    this.maxUploadReports = positive("maxUploadReports", options.maxUploadReports, 100);
    if (!Number.isInteger(this.maxUploadReports) || this.maxUploadReports < 1) throw new InvalidParameterError("maxUploadReports: must be an integer >= 1");
    this.maxQueuedReports = positive("maxQueuedReports", options.maxQueuedReports, 10_000);
    this.maxLatencyMs = positive("maxLatencyMs", options.maxLatencyMs, 1000);
    this.baseBackoffMs = positive("baseBackoffMs", options.baseBackoffMs, 500);
    this.maxBackoffMs = positive("maxBackoffMs", options.maxBackoffMs, 60_000);
    this.timeoutMs = positive("timeoutMs", options.timeoutMs, 90_000);
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new InvalidParameterError("fetch is not available: pass options.fetch");
    this.fetchImpl = f.bind(globalThis);
    const w = globalThis as unknown as { addEventListener?: typeof addEventListener; removeEventListener?: typeof removeEventListener; document?: Document };
    if ((options.pageEvents ?? typeof window !== "undefined") && typeof w.addEventListener === "function") {
      const hide = () => this.sendOnHide();
      const visibility = () => { if (w.document?.visibilityState === "hidden") this.sendOnHide(); };
      const online = () => this.kick(true);
      w.addEventListener("pagehide", hide);
      w.addEventListener("visibilitychange", visibility);
      w.addEventListener("online", online);
      this.detach.push(() => { w.removeEventListener!("pagehide", hide); w.removeEventListener!("visibilitychange", visibility); w.removeEventListener!("online", online); });
    }
  }

  private load(): QueueDoc {
    const text = this.options.storage.read(this.key);
    if (text === null) return { format: FORMAT, uploads: [] };
    try {
      const doc = JSON.parse(text) as QueueDoc;
      if (doc.format === FORMAT && Array.isArray(doc.uploads)) return doc;
    } catch { /* fall through */ }
    throw new StorageError(`the offline queue in ${this.options.storage.where} (${this.key}) is damaged; remove it to start afresh`);
  }

  private save(doc: QueueDoc): void {
    this.options.storage.write(this.key, JSON.stringify(doc));
  }

  private withQueue<T>(fn: (doc: QueueDoc) => T): Promise<T> {
    return this.options.storage.withLock(this.key, () => {
      const doc = this.load();
      const out = fn(doc);
      this.save(doc);
      return out;
    });
  }

  /** Reports waiting (queued or in flight). */
  async queued(): Promise<number> {
    return this.options.storage.withLock(this.key, () => this.load().uploads.reduce((n, u) => n + u.msgs.length, 0));
  }

  /** Throws QueueFullError when no report fits (checked before a report is charged). */
  async ensureRoom(): Promise<void> {
    const n = await this.queued();
    if (n >= this.maxQueuedReports) {
      throw new QueueFullError(`the offline queue holds ${n} reports (maxQueuedReports ${this.maxQueuedReports}): `
        + "nothing was charged; report again once the collector is reachable");
    }
  }

  /** Queue one single-report message (its fingerprint decides the upload it joins). */
  async enqueue(fingerprint: string, message: Uint8Array): Promise<void> {
    if (this.closed) throw new DeliveryError("the uploader is closed", null, null, 1);
    const full = await this.withQueue((doc) => {
      let upload = doc.uploads.findLast((u) => !u.sealed && u.fp === fingerprint && u.msgs.length < this.maxUploadReports);
      if (upload === undefined) {
        upload = { key: idempotencyKey(), fp: fingerprint, msgs: [], sealed: false, attempts: 0, created: Date.now(), not_before: 0 };
        doc.uploads.push(upload);
      }
      upload.msgs.push(hex(message));
      return upload.msgs.length >= this.maxUploadReports;
    });
    this.kick(full);
  }

  /** Start sending (now, or at the next upload's time). */
  kick(now = true): void {
    if (this.closed) return;
    if (this.running) return;
    if (!now) {
      this.schedule(this.maxLatencyMs);
      return;
    }
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.running = this.loop().finally(() => { this.running = null; });
  }

  private schedule(ms: number): void {
    if (this.timer !== null || this.closed) return;
    this.timer = setTimeout(() => { this.timer = null; this.kick(true); }, Math.max(0, ms));
    // In Node a pending retry does not keep the process alive, unless flush() waits for it.
    if (this.idleWaiters.length === 0) (this.timer as { unref?: () => void }).unref?.();
  }

  /** Resolves when the queue is empty (every upload answered 202 or dropped). */
  async flush(): Promise<void> {
    if ((await this.queued()) === 0) return;
    const idle = new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    // flush does not wait for maxLatencyMs: unsealed uploads leave now
    await this.withQueue((doc) => doc.uploads.forEach((u) => { u.not_before = Math.min(u.not_before, Date.now()); u.created = 0; }));
    if (this.timer !== null) { clearTimeout(this.timer); this.timer = null; }
    this.kick(true);
    await idle;
  }

  private async loop(): Promise<void> {
    for (;;) {
      if (this.closed) return;
      const now = Date.now();
      const pick = await this.withQueue((doc) => {
        let wait = Infinity;
        for (const u of doc.uploads) {
          const due = Math.max(u.not_before, u.sealed || u.msgs.length >= this.maxUploadReports ? 0 : u.created + this.maxLatencyMs);
          if (due <= now) {
            u.sealed = true;
            return { upload: { ...u, msgs: [...u.msgs] }, wait: 0, empty: false };
          }
          wait = Math.min(wait, due - now);
        }
        return { upload: null, wait, empty: doc.uploads.length === 0 };
      });
      if (pick.upload === null) {
        if (pick.empty) {
          const waiters = this.idleWaiters;
          this.idleWaiters = [];
          waiters.forEach((w) => w());
        } else {
          this.schedule(pick.wait);
        }
        return;
      }
      await this.attempt(pick.upload, false);
    }
  }

  private async attempt(upload: QueuedUpload, keepalive: boolean): Promise<void> {
    const body = uploadBody(upload.msgs.map(fromHex));
    const headers: Record<string, string> = { "Content-Type": "application/vnd.ocms.wire-v1", "Idempotency-Key": upload.key };
    if (this.options.token) headers.Authorization = `Bearer ${this.options.token}`;
    let status: number | null = null;
    let detail = "";
    let retryAfter: number | null = null;
    let replayed = false;
    this.stats.attempts++;
    const controller = typeof AbortController === "function" && !keepalive ? new AbortController() : null;
    const timeout = controller ? setTimeout(() => controller.abort(), this.timeoutMs) : null;
    try {
      const response = await this.fetchImpl(this.url, {
        method: "POST", body: body as BodyInit, headers, keepalive, signal: controller?.signal,
        credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer",
      } as RequestInit);
      status = response.status;
      retryAfter = retryAfterMs(response.headers.get("Retry-After"));
      replayed = response.headers.get("Idempotent-Replayed") === "true";
      detail = status === 202 ? "" : (await response.text()).slice(0, 300);
    } catch (err) {
      detail = `${(err as Error).name}: ${(err as Error).message}`;
    } finally {
      if (timeout !== null) clearTimeout(timeout);
    }
    if (status === 202) {
      const removed = await this.withQueue((doc) => {
        const before = doc.uploads.length;
        doc.uploads = doc.uploads.filter((u) => u.key !== upload.key);
        return before !== doc.uploads.length;
      });
      if (removed) {
        this.stats.uploads++;
        if (replayed) this.stats.replayed++;
        this.options.onDelivered?.({ key: upload.key, reports: upload.msgs.length, attempts: upload.attempts + 1, replayed });
      }
      return;
    }
    if (keepalive) return; // the page is going away: the queue keeps it for the next load
    const retriable = status === null || RETRIABLE.has(status);
    if (!retriable) {
      await this.withQueue((doc) => { doc.uploads = doc.uploads.filter((u) => u.key !== upload.key); });
      this.stats.dropped++;
      let reason: string | null = null;
      try { reason = JSON.parse(detail).reason ?? null; } catch { /* not JSON */ }
      this.options.onError?.(new DeliveryError(`upload of ${upload.msgs.length} reports to ${this.url} refused (HTTP ${status}): ${detail}`,
                                               status, reason, upload.msgs.length));
      return;
    }
    this.stats.retries++;
    const attempts = upload.attempts + 1;
    const backoff = Math.min(this.maxBackoffMs, this.baseBackoffMs * 2 ** Math.min(attempts - 1, 30));
    // Retry-After is honoured (up to maxBackoffMs); jitter keeps a fleet told "2 s" from returning in one wave
    const wait = retryAfter !== null ? Math.min(this.maxBackoffMs, retryAfter * (1 + 0.25 * Math.random()))
      : backoff * (0.5 + 0.5 * Math.random());
    await this.withQueue((doc) => {
      const u = doc.uploads.find((x) => x.key === upload.key);
      if (u) {
        u.attempts = attempts;
        u.not_before = Date.now() + wait;
      }
    });
  }

  /** Page hide: every queued upload (up to the keepalive budget) leaves now with fetch keepalive. */
  sendOnHide(): void {
    if (this.closed) return;
    let doc: QueueDoc;
    try {
      doc = this.load();
    } catch {
      return;
    }
    let budget = KEEPALIVE_BYTES;
    const leaving: QueuedUpload[] = [];
    for (const u of doc.uploads) {
      const bytes = u.msgs.reduce((n, m) => n + m.length / 2, 0);
      if (bytes > budget) break;
      budget -= bytes;
      u.sealed = true;
      leaving.push({ ...u, msgs: [...u.msgs] });
    }
    if (leaving.length === 0) return;
    try {
      this.save(doc); // sealed before they leave: no report joins an upload whose body is on the wire
    } catch {
      return;
    }
    for (const u of leaving) void this.attempt(u, true);
  }

  /** Stop sending (queued uploads stay in the storage for the next start). */
  close(): void {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.detach.forEach((d) => d());
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    waiters.forEach((w) => w());
  }
}
