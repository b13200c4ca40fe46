/**
 * The device configuration (`ocms registry device-config`, or `GET /v1/device-config` of the collector):
 * per metric its newest live version's fingerprint, epsilon, m, keep threshold T, field, value domain
 * and, for a discoverable metric, every level's parameters.
 *
 * Everything is validated before a report is made, so a damaged or tampered configuration is refused
 * with an InvalidConfigError naming the metric and the field, never used:
 *
 * - the keep threshold T (decimal digits) is the integer every client keeps with (never recomputed from
 *   this platform's exp); it is checked against T recomputed here exactly as cms_core does
 *   (floor(2^64 e_lo / (e_lo + m - 1)), e_lo = exp(eps) lowered by two ulps) and refused when the
 *   probability ratio T (m - 1) / (2^64 - T) it implies differs from the recomputed one by more than
 *   2^-49 relative (a few ulps of exp, which may differ by one ulp between libms), so a larger T
 *   cannot weaken privacy;
 * - the fingerprint is recomputed from epsilon, m, the field, d, the value domain, the mechanism and
 *   the binding (docs/wire-format.md, "The parameter fingerprint") and must be the one given;
 * - fields: prime orders must be primes in [3, 2^64 - 59]; GF(2^64) and GF(2^128) must carry
 *   cms_core's polynomials.
 */

import { ClientTooOldError, InvalidConfigError, InvalidValueError, UnknownMetricError } from "./errors.js";
import { VERSION } from "./version.js";
import { STRING_PREFIX_BITS, isWellFormed } from "./discovery.js";
import type { DiscoveryDomain } from "./discovery.js";
import { Element, Field, binaryField, concat, primeField, uintBytes } from "./fields.js";
import { blake2b, fromHex, hex, utf8 } from "./hash.js";
import { SmallBelow, bitLength } from "./random.js";
import { Longitudinal } from "./longitudinal.js";
import type { HybridMean, NumericLayout, NumericTree } from "./numeric.js";

/**
 * The readers of what the core entry point (core.ts, `ocms-client/core`) leaves out: numeric metrics (numeric.ts:
 * buckets, trees, the Hybrid mean) and discoverable ones (discovery.ts DiscoveryDomain). The full entry point's
 * DeviceConfig (index.ts) hands them to config.ts; the core one has none, so no module of the core imports their
 * code and its DeviceConfig leaves such metrics out (reporting one throws UnknownMetricError naming the full entry).
 */
export interface Extensions {
  readonly layout: typeof NumericLayout.fromConfig;
  readonly tree: typeof NumericTree.fromConfig;
  readonly mean: typeof HybridMean.fromConfig;
  readonly discovery: typeof DiscoveryDomain.fromConfig;
}

/** What a device config entry needs beyond the core: "numeric" (buckets, a tree, a Hybrid mean), "discoverable", or null. */
function extensionOf(entry: Json): string | null {
  if (entry.numeric !== undefined || entry.hierarchy !== undefined || entry.mean !== undefined || entry.mechanism === "hierarchy") {
    return "numeric";
  }
  return entry.discovery !== undefined ? "discoverable" : null;
}

export const DEVICE_CONFIG_FORMAT = 1;
const TWO64 = 1n << 64n;
/** Largest relative difference between the ratio a config's T implies and the one recomputed here. */
const RATIO_TOLERANCE_BITS = 49n;
const MAX_EPSILON = 100;

export type Mechanism = "ocms" | "direct";
export type Domain = "categories" | "integers" | "strings";
/** A value as a device receives it: a category name, an integer (decimal string, BigInt or safe Number), a string. */
export type ReportValue = string | bigint | number | Uint8Array;

/** exp(eps) lowered by two ulps, as an exact rational num / 2^shift (cms_core.privatize.keep_threshold). */
export function keepThresholdFor(epsilon: number, m: number): bigint {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, Math.exp(epsilon));
  const bits = view.getBigUint64(0);
  const exponent = Number((bits >> 52n) & 0x7ffn);
  const mantissa = (bits & ((1n << 52n) - 1n)) | (1n << 52n);
  // e = mantissa * 2^(exponent - 1075); e_lo = e * (2^52 - 2) / 2^52 = n * 2^(exponent - 1127)
  const n = mantissa * ((1n << 52n) - 2n);
  const shift = exponent - 1127;
  const other = BigInt(m - 1);
  let t: bigint;
  if (shift >= 0) {
    const eLo = n << BigInt(shift);
    t = (TWO64 * eLo) / (eLo + other);
  } else {
    t = (TWO64 * n) / (n + (other << BigInt(-shift)));
  }
  return t < TWO64 - 1n ? t : TWO64 - 1n;
}

/** Refuses a T whose probability ratio differs from exp(eps)'s by more than the tolerance (module doc). */
export function checkKeepThreshold(threshold: bigint, epsilon: number, m: number, where: string): void {
  const expected = keepThresholdFor(epsilon, m);
  const diff = threshold > expected ? threshold - expected : expected - threshold;
  // relative ratio difference = |dT| 2^64 / (T (2^64 - T)); 2 more for the floor of either side
  const allowed = (expected * (TWO64 - expected)) >> (64n + RATIO_TOLERANCE_BITS);
  if (diff > allowed + 2n) {
    throw new InvalidConfigError(`${where}: keep_threshold ${threshold} does not match epsilon ${epsilon} and m ${m} `
      + `(expected ${expected} within ${allowed + 2n}); the configuration is damaged or tampered with, refused `
      + "(a larger threshold would weaken privacy)");
  }
}

/** The 8-byte parameter fingerprint (cms_core OCMSParams.fingerprint; docs/wire-format.md). */
export function parameterFingerprint(epsilon: number, m: number, field: Field, dictionarySize: bigint,
                                     valueDomain: "integer" | "string", mechanism: Mechanism,
                                     binding: string | null): Uint8Array {
  const head = new DataView(new ArrayBuffer(13));
  head.setUint8(0, 1);
  head.setFloat64(1, epsilon);
  head.setUint32(9, m);
  const parts = [new Uint8Array(head.buffer), field.descriptor, uintBytes(dictionarySize, 17), utf8(valueDomain)];
  if (mechanism !== "ocms") parts.push(utf8("mechanism" + mechanism));
  if (binding !== null) {
    const label = utf8(binding);
    parts.push(utf8("binding"), uintBytes(BigInt(label.length), 2), label);
  }
  return blake2b(concat(...parts), 8, "ocms-params");
}

/** One parameter set a report is made with: a metric version's, or one discovery level's. */
export class ReportParams {
  readonly zBytes: number;
  readonly recordBytes: number;
  readonly thresholdHi: number;
  readonly thresholdLo: number;
  readonly other: SmallBelow;
  readonly fingerprintHex: string;
  readonly header: Uint8Array;

  constructor(readonly fingerprint: Uint8Array, readonly epsilon: number, readonly m: number,
              readonly keepThreshold: bigint, readonly field: Field, readonly mechanism: Mechanism,
              readonly dictionarySize: bigint, readonly label: string) {
    this.zBytes = (bitLength(m - 1) + 7) >> 3;
    this.recordBytes = mechanism === "direct" ? this.zBytes : 2 * field.coefficientBytes + this.zBytes;
    this.thresholdHi = Number(keepThreshold >> 32n);
    this.thresholdLo = Number(keepThreshold & 0xffffffffn);
    this.other = new SmallBelow(m - 1);
    this.fingerprintHex = hex(fingerprint);
    this.header = new Uint8Array(16);
    this.header.set([0x4f, 0x43, 1, 1]);
    this.header.set(fingerprint, 4);
    this.header[15] = 1;
  }

  get isDirect(): boolean {
    return this.mechanism === "direct";
  }

  /** The same parameters keeping with another threshold (the internal test entry's leaky device only). */
  withKeepThreshold(threshold: bigint): ReportParams {
    return new ReportParams(this.fingerprint, this.epsilon, this.m, threshold, this.field, this.mechanism,
                            this.dictionarySize, this.label);
  }
}

// ------------------------------------------------------------------ reading the JSON
type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function decimal(v: unknown, where: string, min = 0n): bigint {
  if (typeof v === "number" && Number.isSafeInteger(v)) v = String(v);
  if (typeof v !== "string" || !/^[0-9]{1,40}$/.test(v)) {
    throw new InvalidConfigError(`${where}: expected decimal digits in a JSON string, got ${JSON.stringify(v)}`);
  }
  const out = BigInt(v);
  if (out < min) throw new InvalidConfigError(`${where}: must be >= ${min}, got ${out}`);
  return out;
}

function fieldOf(v: unknown, where: string): Field {
  if (!isObject(v)) throw new InvalidConfigError(`${where}: expected {"kind": "prime"|"binary", ...}`);
  if (v.kind === "prime") return primeField(decimal(v.order, `${where}.order`), `${where}.order`);
  if (v.kind === "binary") {
    if (typeof v.degree !== "number") throw new InvalidConfigError(`${where}.degree: expected 64 or 128`);
    return binaryField(v.degree, decimal(v.polynomial, `${where}.polynomial`), where);
  }
  throw new InvalidConfigError(`${where}.kind: expected "prime" or "binary", got ${JSON.stringify(v.kind)}`);
}

function hashRange(v: unknown, where: string): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 2 || v > 2 ** 32 - 1) {
    throw new InvalidConfigError(`${where}: m must be an integer in [2, 2^32 - 1], got ${JSON.stringify(v)}`);
  }
  return v;
}

function buildParams(where: string, spec: { fingerprint: unknown; epsilon: number; m: unknown; keep_threshold: unknown;
                     field: unknown; dictionarySize: bigint; valueDomain: "integer" | "string"; mechanism: Mechanism;
                     binding: string }): ReportParams {
  const m = hashRange(spec.m, `${where}.m`);
  const field = fieldOf(spec.field, `${where}.field`);
  const threshold = decimal(spec.keep_threshold, `${where}.keep_threshold`);
  if (threshold >= TWO64) throw new InvalidConfigError(`${where}.keep_threshold: must be below 2^64`);
  checkKeepThreshold(threshold, spec.epsilon, m, `${where}.keep_threshold`);
  if (spec.mechanism === "ocms" && spec.dictionarySize > field.order) {
    throw new InvalidConfigError(`${where}: the dictionary (${spec.dictionarySize}) does not fit the field ${field.label}`);
  }
  if (spec.mechanism === "direct" && BigInt(m) !== spec.dictionarySize) {
    throw new InvalidConfigError(`${where}: direct randomized response needs m = d (m ${m}, d ${spec.dictionarySize})`);
  }
  if (typeof spec.fingerprint !== "string" || !/^[0-9a-f]{16}$/.test(spec.fingerprint)) {
    throw new InvalidConfigError(`${where}.fingerprint: expected 16 lowercase hex digits, got ${JSON.stringify(spec.fingerprint)}`);
  }
  const fingerprint = parameterFingerprint(spec.epsilon, m, field, spec.dictionarySize, spec.valueDomain,
                                           spec.mechanism, spec.binding);
  if (hex(fingerprint) !== spec.fingerprint) {
    throw new InvalidConfigError(`${where}.fingerprint: ${spec.fingerprint} is not the fingerprint of its parameters `
      + `(${hex(fingerprint)} for ${spec.binding}); the configuration is damaged, or from an incompatible registry`);
  }
  return new ReportParams(fromHex(spec.fingerprint), spec.epsilon, m, threshold, field, spec.mechanism,
                          spec.dictionarySize, spec.binding);
}

/** A value as its field element (`element`) and, for memoization, the integer or fingerprint it stands for. */
export interface EncodedValue {
  readonly element: Element;
  /** The value's integer (categories: its index; integers: itself); strings: null, see `fingerprint`. */
  readonly integer: bigint | null;
  /** Strings: the 16-byte value fingerprint (big-endian; the element's integer). */
  readonly fingerprint?: Uint8Array;
  /** A numeric metric: the number itself (a Hybrid mean's report takes it, numeric.ts HybridMean). */
  readonly number?: number;
  /** Discovery: the string's symbols or the integer, to cut into a level's prefix. */
  readonly symbols?: number[];
}

export class MetricVersion {
  readonly name: string;
  readonly version: number;
  readonly epsilon: number;
  readonly domain: Domain;
  readonly params: ReportParams;
  readonly categories: readonly string[] | null;
  readonly discovery: DiscoveryDomain | null;
  readonly levels: readonly ReportParams[];
  /** below(levels) of the discovery or tree level draw. */
  readonly levelDraw: SmallBelow | null;
  /** Memoized two-round reports (issue 38, longitudinal.ts), or null for one-shot reports. */
  readonly longitudinal: Longitudinal | null;
  /** A numeric metric's buckets (issue 40, numeric.ts): a number is reported as its bucket's index; else null. */
  readonly numeric: NumericLayout | null;
  /** A numeric metric reported as a hierarchical histogram (numeric.ts NumericTree): its levels; else null. */
  readonly tree: NumericTree<ReportParams> | null;
  /** A numeric metric's mean by the Hybrid mechanism (numeric.ts HybridMean): its part and carrier; else null. */
  readonly mean: HybridMean<ReportParams> | null;
  /** The oldest client release that may report the metric (`min_client_version`), or null: any. */
  readonly minClientVersion: string | null;
  private readonly categoryIndex: Map<string, number> | null;

  /** `extensions`: how numeric and discoverable entries are read (DeviceConfig's); without them such a metric is refused. */
  constructor(entry: unknown, index: number, extensions: Extensions | null = null) {
    let where = `metrics[${index}]`;
    if (!isObject(entry)) throw new InvalidConfigError(`${where}: expected an object`);
    if (typeof entry.name !== "string" || entry.name === "") throw new InvalidConfigError(`${where}.name: expected a non-empty string`);
    this.name = entry.name;
    where = `metric ${JSON.stringify(this.name)}`;
    if (typeof entry.version !== "number" || !Number.isInteger(entry.version) || entry.version < 1) {
      throw new InvalidConfigError(`${where}.version: expected an integer >= 1, got ${JSON.stringify(entry.version)}`);
    }
    this.version = entry.version;
    if (typeof entry.epsilon !== "number" || !Number.isFinite(entry.epsilon) || entry.epsilon <= 0 || entry.epsilon > MAX_EPSILON) {
      throw new InvalidConfigError(`${where}.epsilon: expected a number in (0, ${MAX_EPSILON}], got ${JSON.stringify(entry.epsilon)}`);
    }
    this.epsilon = entry.epsilon;
    if (entry.min_client_version !== undefined && releaseTuple(entry.min_client_version) === null) {
      throw new InvalidConfigError(`${where}.min_client_version: expected a release "X.Y.Z", got ${JSON.stringify(entry.min_client_version)}`);
    }
    this.minClientVersion = (entry.min_client_version as string | undefined) ?? null;
    const mechanism = entry.mechanism === undefined ? "ocms" : entry.mechanism;
    if (mechanism !== "ocms" && mechanism !== "direct" && mechanism !== "hierarchy") {
      throw new InvalidConfigError(`${where}.mechanism: expected "ocms", "direct" or "hierarchy", got ${JSON.stringify(mechanism)}`);
    }
    if ((mechanism === "hierarchy") !== (entry.hierarchy !== undefined) || (mechanism === "hierarchy" && entry.numeric === undefined)) {
      throw new InvalidConfigError(`${where}.hierarchy: a hierarchical histogram is a numeric metric's, with mechanism "hierarchy"`);
    }
    if (entry.domain !== "categories" && entry.domain !== "integers" && entry.domain !== "strings") {
      throw new InvalidConfigError(`${where}.domain: expected "categories", "integers" or "strings", got ${JSON.stringify(entry.domain)}`);
    }
    this.domain = entry.domain;
    let dictionarySize: bigint;
    this.categories = null;
    this.categoryIndex = null;
    if (this.domain === "categories") {
      const names = entry.categories;
      if (!Array.isArray(names) || names.length === 0 || !names.every((n) => typeof n === "string")) {
        throw new InvalidConfigError(`${where}.categories: expected a non-empty list of strings`);
      }
      this.categories = Object.freeze([...names] as string[]);
      this.categoryIndex = new Map(this.categories.map((n, i) => [n, i] as [string, number]));
      if (this.categoryIndex.size !== names.length) throw new InvalidConfigError(`${where}.categories: a name is listed twice`);
      dictionarySize = BigInt(names.length);
    } else if (this.domain === "integers") {
      dictionarySize = decimal(entry.dictionary_size, `${where}.dictionary_size`, 1n);
    } else {
      dictionarySize = 1n << 128n;
    }
    const binding = `${this.name}@${this.version}`;
    const extended = extensionOf(entry);
    if (extensions === null && extended !== null) {
      throw new InvalidConfigError(`${where}: a ${extended} metric, which ocms-client/core does not read (import "ocms-client")`);
    }
    this.tree = mechanism !== "hierarchy" ? null : extensions!.tree(entry.hierarchy, `${where}.hierarchy`,
      Number(dictionarySize), binding,
      (at, spec) => buildParams(at, { ...spec, epsilon: this.epsilon, valueDomain: "integer" }));
    if (this.tree !== null && entry.fingerprint !== this.tree.levels[this.tree.levels.length - 1].fingerprintHex) {
      throw new InvalidConfigError(`${where}.fingerprint: a hierarchical histogram's is its finest level's`);
    }
    this.params = this.tree !== null ? this.tree.levels[this.tree.levels.length - 1] : buildParams(where, {
      fingerprint: entry.fingerprint, epsilon: this.epsilon, m: entry.m, keep_threshold: entry.keep_threshold,
      field: entry.field, dictionarySize, valueDomain: this.domain === "strings" ? "string" : "integer",
      mechanism: mechanism as Mechanism, binding,
    });
    if (this.domain === "strings" && (this.params.field.bits !== 128 || this.params.field.kind !== "binary")) {
      throw new InvalidConfigError(`${where}.field: a string metric hashes 128-bit fingerprints in GF(2^128)`);
    }
    this.numeric = null;
    if (entry.numeric !== undefined) {
      if (this.domain !== "integers" || entry.discovery !== undefined) {
        throw new InvalidConfigError(`${where}.numeric: a numeric metric is an integer metric over its bucket indices`);
      }
      this.numeric = extensions!.layout(entry.numeric, `${where}.numeric`, dictionarySize);
    }
    if (entry.mean !== undefined && this.numeric === null) {
      throw new InvalidConfigError(`${where}.mean: a Hybrid mean is a numeric metric's`);
    }
    this.mean = entry.mean === undefined ? null : extensions!.mean(entry.mean, `${where}.mean`, this.numeric!,
      binding, (at, spec) => buildParams(at, { ...spec, epsilon: this.epsilon, valueDomain: "integer" }));
    this.discovery = null;
    this.levels = [];
    this.levelDraw = this.tree === null ? null : new SmallBelow(this.tree.levels.length);
    this.longitudinal = entry.longitudinal === undefined ? null
      : new Longitudinal(entry.longitudinal, this.params, `${where}.longitudinal`, checkKeepThreshold);
    if (this.longitudinal !== null && entry.discovery !== undefined) {
      throw new InvalidConfigError(`${where}: a discoverable metric is reported one-shot, not longitudinal`);
    }
    if (entry.discovery !== undefined) {
      if (!isObject(entry.discovery) || this.domain === "categories") {
        throw new InvalidConfigError(`${where}.discovery: only string and integer metrics are discoverable`);
      }
      const domain = extensions!.discovery(entry.discovery, `${where}.discovery`);
      if ((domain.kind === "strings") !== (this.domain === "strings")) {
        throw new InvalidConfigError(`${where}.discovery.kind: ${domain.kind} for a ${this.domain} metric`);
      }
      if (domain.kind === "integers" && dictionarySize > 1n << BigInt(domain.bits)) {
        throw new InvalidConfigError(`${where}.discovery.bits: ${domain.bits} bits do not cover the dictionary`);
      }
      const levels = entry.discovery.levels;
      if (!Array.isArray(levels) || levels.length !== domain.levels) {
        throw new InvalidConfigError(`${where}.discovery.levels: expected ${domain.levels} levels`);
      }
      this.levels = levels.map((level: unknown, i: number) => {
        const at = `${where}.discovery.levels[${i}]`;
        if (!isObject(level) || level.level !== i + 1) throw new InvalidConfigError(`${at}: expected {"level": ${i + 1}, ...}`);
        const size = domain.kind === "strings" ? 1n << BigInt(STRING_PREFIX_BITS) : 1n << BigInt(domain.prefixLength(i + 1));
        const given = decimal(level.dictionary_size, `${at}.dictionary_size`);
        if (given !== size) throw new InvalidConfigError(`${at}.dictionary_size: expected ${size}, got ${given}`);
        return buildParams(at, {
          fingerprint: level.fingerprint, epsilon: this.epsilon, m: level.m, keep_threshold: level.keep_threshold,
          field: level.field, dictionarySize: size, valueDomain: "integer", mechanism: "ocms",
          binding: `${binding}/level${i + 1}`,
        });
      });
      this.discovery = domain;
      this.levelDraw = new SmallBelow(domain.levels);
    }
  }

  get label(): string {
    return `${this.name}@${this.version}`;
  }

  /** Validates and encodes a value (nothing drawn): InvalidValueError naming the metric when it is not in the dictionary. */
  encode(value: ReportValue): EncodedValue {
    try {
      return this.encodeUnchecked(value);
    } catch (err) {
      if (err instanceof InvalidValueError) {
        throw new InvalidValueError(`metric ${JSON.stringify(this.name)} version ${this.version}: ${err.message}`);
      }
      throw err;
    }
  }

  private encodeUnchecked(value: ReportValue): EncodedValue {
    const field = this.params.field;
    if (this.domain === "categories") {
      const i = typeof value === "string" ? this.categoryIndex!.get(value) : undefined;
      if (i === undefined) throw new InvalidValueError(`${show(value)} is not a category`);
      return { element: this.params.isDirect ? i : field.element(BigInt(i)), integer: BigInt(i) };
    }
    if (this.domain === "integers") {
      const x = this.numeric !== null ? BigInt(this.numeric.bucket(value)) : integerValue(value);
      if (x >= this.params.dictionarySize) {
        throw new InvalidValueError(`value ${x}: outside the dictionary [0, ${this.params.dictionarySize})`);
      }
      if (this.discovery) this.discovery.integerElement(x, 1);
      return { element: this.params.isDirect ? Number(x) : field.element(x), integer: x,
               ...(this.numeric !== null ? { number: value as number } : {}) };
    }
    let bytes: Uint8Array;
    let symbols: number[] | undefined;
    if (typeof value === "string") {
      if (!isWellFormed(value)) throw new InvalidValueError(`value ${show(value)}: not encodable as UTF-8 (a lone surrogate)`);
      bytes = utf8(value);
    } else if (value instanceof Uint8Array) {
      bytes = value;
    } else {
      throw new InvalidValueError(`value ${show(value)}: the string domain takes strings`);
    }
    if (this.discovery) symbols = this.discovery.symbols(value as string | Uint8Array);
    const fingerprint = blake2b(bytes, 16, "ocms-value-v1");
    return { element: field.elementOfBytes!(fingerprint), integer: null, fingerprint, symbols };
  }

  /** The integer a discovery level's parameters encode for an encoded value. */
  levelElement(encoded: EncodedValue, level: number): bigint {
    const domain = this.discovery!;
    return domain.kind === "strings" ? domain.stringElement(encoded.symbols!, level) : domain.integerElement(encoded.integer!, level);
  }
}

function show(value: unknown): string {
  if (typeof value === "bigint") return `${value}n`;
  if (value instanceof Uint8Array) return `<${value.length} bytes>`;
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? text.slice(0, 40) + "..." + text.slice(-10) : text;
}

/** An integer value: decimal digits (the JSON rule), a BigInt, or a Number only when it is a safe integer. */
export function integerValue(value: ReportValue): bigint {
  if (typeof value === "bigint") {
    if (value < 0n) throw new InvalidValueError(`value ${value}: not a non-negative integer`);
    return value;
  }
  if (typeof value === "number") {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new InvalidValueError(`value ${value}: a Number is exact only up to 2^53; give integers as decimal strings or BigInt`);
    }
    return BigInt(value);
  }
  if (typeof value !== "string") throw new InvalidValueError(`value ${show(value)}: the integer domain takes decimal digits`);
  if (!/^[0-9]+$/.test(value)) throw new InvalidValueError(`value ${show(value)}: not a non-negative decimal integer`);
  if (value.length > 40) throw new InvalidValueError(`value ${value.slice(0, 20)}...(${value.length} digits): outside every integer dictionary`);
  return BigInt(value);
}

/**
 * A parsed, validated device configuration. `extensions` read numeric and discoverable metrics (the full entry
 * point's DeviceConfig passes them, index.ts); without them (`ocms-client/core`) such metrics are left out, unread
 * and never used, and `metric(name)` of one throws UnknownMetricError naming the full entry point.
 */
export class DeviceConfig {
  readonly metrics: ReadonlyMap<string, MetricVersion>;
  readonly byFingerprint: ReadonlyMap<string, { version: MetricVersion; level: number | null; params: ReportParams }>;
  /** The metrics left out (no extensions): name -> "numeric" or "discoverable". */
  private readonly leftOut = new Map<string, string>();

  constructor(doc: unknown, extensions: Extensions | null = null) {
    if (typeof doc === "string") {
      try {
        doc = JSON.parse(doc);
      } catch (err) {
        throw new InvalidConfigError(`the device config is not JSON: ${(err as Error).message}`);
      }
    }
    if (!isObject(doc)) throw new InvalidConfigError("the device config must be a JSON object {\"format\": 1, \"metrics\": [...]}");
    if (doc.format !== DEVICE_CONFIG_FORMAT) {
      throw new InvalidConfigError(`device config format ${JSON.stringify(doc.format)}: this client reads format ${DEVICE_CONFIG_FORMAT}`);
    }
    if (!Array.isArray(doc.metrics)) throw new InvalidConfigError("device config: \"metrics\" must be a list");
    const metrics = new Map<string, MetricVersion>();
    const prints = new Map<string, { version: MetricVersion; level: number | null; params: ReportParams }>();
    doc.metrics.forEach((entry: unknown, i: number) => {
      const extended = isObject(entry) && extensions === null ? extensionOf(entry) : null;
      if (extended !== null && typeof (entry as Json).name === "string" && (entry as Json).name !== "") {
        const name = (entry as Json).name as string;
        if (metrics.has(name) || this.leftOut.has(name)) throw new InvalidConfigError(`metric ${JSON.stringify(name)} is listed twice`);
        this.leftOut.set(name, extended);
        return;
      }
      const version = new MetricVersion(entry, i, extensions);
      if (metrics.has(version.name) || this.leftOut.has(version.name)) throw new InvalidConfigError(`metric ${JSON.stringify(version.name)} is listed twice`);
      metrics.set(version.name, version);
      prints.set(version.params.fingerprintHex, { version, level: null, params: version.params });
      version.levels.forEach((params, l) => prints.set(params.fingerprintHex, { version, level: l + 1, params }));
      version.tree?.levels.forEach((params, l) => prints.set(params.fingerprintHex, { version, level: l + 1, params }));
      if (version.mean !== null) prints.set(version.mean.params.fingerprintHex, { version, level: null, params: version.mean.params });
    });
    this.metrics = metrics;
    this.byFingerprint = prints;
  }

  metric(name: string): MetricVersion {
    const found = this.metrics.get(name);
    if (found === undefined && this.leftOut.has(name)) {
      throw new UnknownMetricError(`metric ${JSON.stringify(name)} is ${this.leftOut.get(name)}: this client was imported from `
        + `"ocms-client/core", which leaves numeric and discoverable metrics out; import "ocms-client" to report it`);
    }
    if (found === undefined) {
      const known = [...this.metrics.keys()].join(", ") || "none";
      throw new UnknownMetricError(`unknown metric ${JSON.stringify(name)}: this device config holds ${known}`);
    }
    const needed = found.minClientVersion;
    if (needed !== null && compareReleases(VERSION, needed) < 0) {
      throw new ClientTooOldError(`metric ${JSON.stringify(name)} needs an ocms client of release ${needed} or later; `
        + `this client is ${VERSION}: upgrade it to ${needed} or later`);
    }
    return found;
  }
}

/** [major, minor, patch] of a release "X.Y.Z" (semantic versioning, no pre-release), or null. */
export function releaseTuple(v: unknown): [number, number, number] | null {
  if (typeof v !== "string" || !/^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$/.test(v)) return null;
  const [major, minor, patch] = v.split(".").map(Number);
  return [major, minor, patch];
}

/** <0, 0, >0 as release a is older than, the same as, newer than release b (both valid). */
export function compareReleases(a: string, b: string): number {
  const x = releaseTuple(a)!, y = releaseTuple(b)!;
  return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
}
