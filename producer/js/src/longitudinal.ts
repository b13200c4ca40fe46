/**
 * Longitudinal reports (issue 38; cms_core/longitudinal.py module doc, docs/device.md "Longitudinal reports"):
 * memoized two-round randomized response, byte for byte as the Python and C clients
 * (tests/vectors/longitudinal_v1.json).
 *
 *   PRF(label)   the bytes BLAKE2b-512(key = device secret, label || i), i = 0, 1, ... (4 bytes big-endian)
 *   hash         a0 = below(order), a1 = below(order) from PRF("ocms-longitudinal-v1/hash" || F): fixed for
 *                the life of (device, metric version); direct RR: the identity, y = x
 *   memoized     randomized response over [g] of y at eps_inf (threshold T1) from
 *                PRF("ocms-longitudinal-v1/memo" || F || y as 4 bytes): derived again each time, never stored
 *   report       from the CSPRNG: keep the memoized y1 when bits64() < T2, else other = below(g - 1),
 *                z = other < y1 ? other : other + 1
 *
 * F is the metric version's 8-byte parameter fingerprint. The device config gives T1 and T2
 * (`longitudinal.memo_threshold`, `report_threshold`); T1 is checked as every keep threshold is, and T2 by the
 * probability ratio of one report it implies with T1, which must not exceed e^eps_1 (a larger T2 would weaken
 * privacy; a much smaller one would bias the estimates): a damaged configuration is refused.
 */

import type { EncodedValue, MetricVersion, ReportParams } from "./config.js";
import { InvalidConfigError, InvalidParameterError } from "./errors.js";
import { concat } from "./fields.js";
import { blake2b, fromHex, hex, utf8 } from "./hash.js";
import type { PrivacyLedger } from "./ledger.js";
import { ByteStream, keepDraw } from "./random.js";
import type { Storage } from "./storage.js";
import { HEADER_SIZE } from "./wire.js";

const TWO64 = 1n << 64n;
export const HASH_LABEL = utf8("ocms-longitudinal-v1/hash");
export const MEMO_LABEL = utf8("ocms-longitudinal-v1/memo");
export const SEEN_LABEL = utf8("ocms-longitudinal-v1/seen");
/** Relative tolerance of the check of T2 against e^eps_1 (double arithmetic on 64-bit thresholds). */
const RATIO_TOLERANCE = 1e-9;

function u32be(n: number): Uint8Array {
  return Uint8Array.of((n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255);
}

/** The keyed-BLAKE2b byte stream of a device secret and a label (never the CSPRNG: derived, reproducible). */
export class PrfStream extends ByteStream {
  private counter = 0;

  constructor(private readonly secret: Uint8Array, private readonly label: Uint8Array) {
    super();
    checkSecret(secret);
  }

  protected refill(): void {
    this.pool = blake2b(concat(this.label, u32be(this.counter++)), 64, "", this.secret);
    this.pos = 0;
  }
}

export function checkSecret(secret: Uint8Array): void {
  if (!(secret instanceof Uint8Array) || secret.length < 16 || secret.length > 64) {
    throw new InvalidParameterError("device secret: 16 to 64 random bytes");
  }
}

function threshold(v: unknown, where: string): bigint {
  if (typeof v !== "string" || !/^[0-9]{1,20}$/.test(v)) throw new InvalidConfigError(`${where}: expected decimal digits`);
  const t = BigInt(v);
  if (t >= TWO64) throw new InvalidConfigError(`${where}: must be below 2^64`);
  return t;
}

/** A metric version's longitudinal mode, from its device-config entry (`longitudinal`). */
export class Longitudinal {
  readonly lifetimeEpsilon: number;
  readonly memoThreshold: bigint;
  readonly reportThreshold: bigint;
  private readonly memoHi: number;
  private readonly memoLo: number;
  private readonly reportHi: number;
  private readonly reportLo: number;

  constructor(entry: unknown, params: ReportParams, where: string,
              checkKeep: (t: bigint, epsilon: number, m: number, where: string) => void) {
    if (typeof entry !== "object" || entry === null) throw new InvalidConfigError(`${where}: expected an object`);
    const e = entry as Record<string, unknown>;
    const life = e.lifetime_epsilon;
    if (typeof life !== "number" || !Number.isFinite(life) || !(life > params.epsilon) || life > 100) {
      throw new InvalidConfigError(`${where}.lifetime_epsilon: expected a number above epsilon ${params.epsilon} `
        + `and at most 100, got ${JSON.stringify(life)}`);
    }
    this.lifetimeEpsilon = life;
    this.memoThreshold = threshold(e.memo_threshold, `${where}.memo_threshold`);
    checkKeep(this.memoThreshold, life, params.m, `${where}.memo_threshold`);
    this.reportThreshold = threshold(e.report_threshold, `${where}.report_threshold`);
    const ratio = reportRatio(this.memoThreshold, this.reportThreshold, params.m);
    const target = Math.exp(params.epsilon);
    if (!(ratio <= target * (1 + RATIO_TOLERANCE)) || !(ratio >= target * (1 - RATIO_TOLERANCE))) {
      throw new InvalidConfigError(`${where}.report_threshold: with memo_threshold it gives one report a probability `
        + `ratio of ${ratio}, not e^epsilon = ${target}; the configuration is damaged or tampered with, refused`);
    }
    this.memoHi = Number(this.memoThreshold >> 32n);
    this.memoLo = Number(this.memoThreshold & 0xffffffffn);
    this.reportHi = Number(this.reportThreshold >> 32n);
    this.reportLo = Number(this.reportThreshold & 0xffffffffn);
  }

  /** The memoized response to hashed value y (derived from the secret). */
  memoized(secret: Uint8Array, params: ReportParams, y: number): number {
    const stream = new PrfStream(secret, concat(MEMO_LABEL, params.fingerprint, u32be(y)));
    if (keepDraw(stream, this.memoHi, this.memoLo)) return y;
    const other = params.other.draw(stream);
    return other < y ? other : other + 1;
  }

  /** The second round of y1 from `stream` (the CSPRNG). */
  secondRound(stream: ByteStream, params: ReportParams, y1: number): number {
    if (keepDraw(stream, this.reportHi, this.reportLo)) return y1;
    const other = params.other.draw(stream);
    return other < y1 ? other : other + 1;
  }
}

/** p* / q* of one report from the integer thresholds (doubles: within ~1e-15 of the exact ratio). */
function reportRatio(t1: bigint, t2: bigint, g: number): number {
  const p1 = Number(t1) / 2 ** 64;
  const p2 = Number(t2) / 2 ** 64;
  const q2 = (1 - p2) / (g - 1);
  const keep = p1 * p2 + (1 - p1) * q2;
  return keep / ((1 - keep) / (g - 1));
}

export interface LongitudinalReport {
  readonly message: Uint8Array;
  /** y: the hashed value, what the ledger charges eps_inf once for (never sent). */
  readonly hashed: number;
}

function writeZ(out: Uint8Array, offset: number, width: number, z: number): void {
  for (let i = offset + width - 1; i >= offset; i--) {
    out[i] = z & 255;
    z = z >>> 8;
  }
}

/** One longitudinal report of an encoded value: hash and memoized response from `secret`, second round from `stream`. */
export function longitudinalReport(stream: ByteStream, secret: Uint8Array, version: MetricVersion,
                                   encoded: EncodedValue): LongitudinalReport {
  const memo = version.longitudinal;
  if (memo === null) throw new InvalidParameterError(`metric ${version.label} is not longitudinal`);
  const params = version.params;
  checkSecret(secret);
  const out = new Uint8Array(HEADER_SIZE + params.recordBytes);
  out.set(params.header);
  let y: number;
  let zAt = HEADER_SIZE;
  if (params.isDirect) {
    y = encoded.element as number;
  } else {
    y = params.field.drawHash(new PrfStream(secret, concat(HASH_LABEL, params.fingerprint)), encoded.element, params.m,
                              out, HEADER_SIZE);
    zAt += 2 * params.field.coefficientBytes;
  }
  const y1 = memo.memoized(secret, params, y);
  writeZ(out, zAt, params.zBytes, memo.secondRound(stream, params, y1));
  return { message: out, hashed: y };
}

/** What the ledger remembers (as a keyed digest) to charge eps_inf once per hashed value of a version. */
export function seenKey(version: MetricVersion, y: number): Uint8Array {
  return concat(SEEN_LABEL, version.params.fingerprint, u32be(y));
}

/** The storage key of the device secret and of the digests of hashed values already charged. */
export const SECRET_KEY = "ocms-longitudinal-secret";
export const SEEN_KEY = "ocms-longitudinal-seen";

/** The device secret kept in the client's storage (32 bytes from the CSPRNG, created on first use). */
export function deviceSecret(storage: Storage): Promise<Uint8Array> {
  return storage.withLock(SECRET_KEY, () => {
    const stored = storage.read(SECRET_KEY);
    if (stored !== null) return fromHex(stored);
    const secret = new Uint8Array(32);
    globalThis.crypto.getRandomValues(secret);
    storage.write(SECRET_KEY, hex(secret));
    return secret;
  });
}

/** Digest of a seen key under the secret: the storage never holds a value or a hashed value in the clear. */
export function seenDigest(secret: Uint8Array, key: Uint8Array): string {
  return hex(blake2b(key, 16, "ocms-seen-v1", secret));
}

export interface LifetimeCharge {
  /** eps_inf for the first report of a hashed value of this version, 0 for later ones. */
  readonly charged: number;
  readonly spent: number;
}

/**
 * Charge eps_inf to the metric in this period for the first report of hashed value `y` of this version, nothing
 * for later ones (PrivacyBudgetError over budget: nothing recorded, nothing sent). A crash between the charge
 * and the note of `y` charges again next time: over-counting, never under.
 */
export function chargeLifetime(storage: Storage, ledger: PrivacyLedger, version: MetricVersion, secret: Uint8Array,
                               y: number): Promise<LifetimeCharge> {
  const memo = version.longitudinal!;
  return storage.withLock(SEEN_KEY, async () => {
    const seen: string[] = JSON.parse(storage.read(SEEN_KEY) ?? "[]");
    const digest = seenDigest(secret, seenKey(version, y));
    if (seen.includes(digest)) return { charged: 0, spent: await ledger.spent(version.name) };
    const charge = await ledger.chargeOrReuse(version.name, memo.lifetimeEpsilon, null, new Uint8Array(0));
    seen.push(digest);
    storage.write(SEEN_KEY, JSON.stringify(seen));
    return { charged: memo.lifetimeEpsilon, spent: charge.spent };
  });
}
