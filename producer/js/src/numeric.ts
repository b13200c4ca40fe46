// A numeric metric's buckets (issue 40; cms_core/numeric.py BucketLayout.bucket, docs/device.md "Numeric metrics"):
// the device config's "numeric" entry gives lower, upper and the bounds (numbers, never recomputed from a scale).
// A number is clipped into [lower, upper] and reported as the index of the first bound >= it (a value equal to a
// bound is in the bucket that bound closes; the last bucket holds the values above every bound), an integer
// metric over the len(bounds) + 1 bucket indices: the report and the wire shape are every integer metric's.
// Shared vectors: tests/vectors/numeric_v1.json.
import { InvalidConfigError, InvalidValueError } from "./errors.js";
import { ByteStream, SmallBelow, drawBits64 } from "./random.js";

export class NumericLayout {
  readonly lower: number;
  readonly upper: number;
  readonly bounds: readonly number[];

  private constructor(lower: number, upper: number, bounds: number[]) {
    this.lower = lower;
    this.upper = upper;
    this.bounds = Object.freeze(bounds);
  }

  /** The layout of a device config entry, checked: bounds strictly increasing, strictly inside (lower, upper). */
  static fromConfig(entry: unknown, where: string, buckets: bigint): NumericLayout {
    if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
      throw new InvalidConfigError(`${where}: expected {"lower", "upper", "bounds"}`);
    }
    const { lower, upper, bounds } = entry as { lower: unknown; upper: unknown; bounds: unknown };
    const finite = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);
    if (!finite(lower) || !finite(upper) || !(lower < upper)) {
      throw new InvalidConfigError(`${where}: lower and upper must be finite numbers, lower < upper`);
    }
    if (!Array.isArray(bounds) || bounds.length === 0 || !bounds.every(finite)) {
      throw new InvalidConfigError(`${where}.bounds: expected a non-empty list of finite numbers`);
    }
    for (let i = 0; i < bounds.length; i++) {
      const previous = i === 0 ? lower : bounds[i - 1];
      if (!(previous < bounds[i])) throw new InvalidConfigError(`${where}.bounds: must increase strictly inside (lower, upper)`);
    }
    if (!(bounds[bounds.length - 1] < upper)) throw new InvalidConfigError(`${where}.bounds: must lie below upper`);
    if (BigInt(bounds.length + 1) !== buckets) {
      throw new InvalidConfigError(`${where}: ${bounds.length + 1} buckets, but dictionary_size is ${buckets}`);
    }
    return new NumericLayout(lower, upper, [...bounds]);
  }

  /** The bucket index of a number (clipped; +-Infinity too); NaN or a non-number is an InvalidValueError. */
  bucket(value: unknown): number {
    if (typeof value !== "number" || Number.isNaN(value)) {
      throw new InvalidValueError(`value ${String(value)}: a numeric metric takes a number (not NaN)`);
    }
    const x = Math.min(Math.max(value, this.lower), this.upper);
    let lo = 0;
    let hi = this.bounds.length; // the first index with bounds[i] >= x, or len(bounds): the last bucket
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.bounds[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** What a tree level's parameters are built from (config.ts buildParams checks them and their fingerprint). */
export interface TreeLevelSpec {
  readonly fingerprint: unknown;
  readonly m: unknown;
  readonly keep_threshold: unknown;
  readonly field: unknown;
  readonly dictionarySize: bigint;
  readonly mechanism: "ocms" | "direct";
  readonly binding: string;
}

const MIN_BRANCHING = 2;
const MAX_BRANCHING = 16;

/**
 * A numeric metric reported as a hierarchical histogram (issue 40; cms_core/hierarchy.py, docs/device.md "Numeric
 * metrics"): the device config's "hierarchy" entry gives the branching B and one entry per level l = 1..h (h the
 * smallest with B^h >= buckets), each with its own parameters (binding NAME@VERSION/level<l>) and its span
 * B^(h - l), the buckets under one node. A report draws its level first, below(h) + 1, then reports its bucket's
 * node bucket // span with that level's parameters. Shared vectors: tests/vectors/numeric_hierarchy_v1.json.
 */
export class NumericTree<P> {
  readonly levels: readonly P[];
  readonly spans: readonly number[];

  private constructor(levels: P[], spans: number[]) {
    this.levels = Object.freeze(levels);
    this.spans = Object.freeze(spans);
  }

  static fromConfig<P>(entry: unknown, where: string, buckets: number, binding: string,
                       build: (at: string, spec: TreeLevelSpec) => P): NumericTree<P> {
    if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
      throw new InvalidConfigError(`${where}: expected {"buckets", "branching", "levels"}`);
    }
    const { buckets: given, branching, levels } = entry as { buckets: unknown; branching: unknown; levels: unknown };
    if (given !== buckets) throw new InvalidConfigError(`${where}.buckets: expected ${buckets}, got ${JSON.stringify(given)}`);
    if (typeof branching !== "number" || !Number.isInteger(branching) || branching < MIN_BRANCHING
        || branching > MAX_BRANCHING || branching >= buckets) {
      throw new InvalidConfigError(`${where}.branching: expected an integer in [${MIN_BRANCHING}, ${MAX_BRANCHING}] `
        + `below the ${buckets} buckets, got ${JSON.stringify(branching)}`);
    }
    let height = 1;
    while (branching ** height < buckets) height++;
    if (!Array.isArray(levels) || levels.length !== height) {
      throw new InvalidConfigError(`${where}.levels: expected ${height} levels (branching ${branching}, ${buckets} buckets)`);
    }
    const spans: number[] = [];
    const params = levels.map((level: unknown, i: number) => {
      const at = `${where}.levels[${i}]`;
      const row = level as Record<string, unknown>;
      if (typeof level !== "object" || level === null || row.level !== i + 1) {
        throw new InvalidConfigError(`${at}: expected {"level": ${i + 1}, ...}`);
      }
      const span = branching ** (height - i - 1);
      if (row.span !== span) throw new InvalidConfigError(`${at}.span: expected ${span}, got ${JSON.stringify(row.span)}`);
      const nodes = BigInt(Math.ceil(buckets / span));
      if (row.dictionary_size !== String(nodes)) {
        throw new InvalidConfigError(`${at}.dictionary_size: expected "${nodes}", got ${JSON.stringify(row.dictionary_size)}`);
      }
      const mechanism = row.mechanism === undefined ? "ocms" : row.mechanism;
      if (mechanism !== "ocms" && mechanism !== "direct") {
        throw new InvalidConfigError(`${at}.mechanism: expected "ocms" or "direct", got ${JSON.stringify(mechanism)}`);
      }
      spans.push(span);
      return build(at, { fingerprint: row.fingerprint, m: row.m, keep_threshold: row.keep_threshold, field: row.field,
                         dictionarySize: nodes, mechanism, binding: `${binding}/level${i + 1}` });
    });
    return new NumericTree(params, spans);
  }

  /** The node of `level` (1..h) holding `bucket`. */
  node(bucket: bigint, level: number): bigint {
    return bucket / BigInt(this.spans[level - 1]);
  }
}

/** What a Hybrid mean's carrier parameters are built from (config.ts buildParams checks them and their fingerprint). */
export interface MeanCarrierSpec {
  readonly fingerprint: unknown;
  readonly m: unknown;
  readonly keep_threshold: unknown;
  readonly field: unknown;
  readonly dictionarySize: bigint;
  readonly mechanism: "direct";
  readonly binding: string;
}

const TWO64 = 1n << 64n;
const MAX_GRID = 2 ** 20;
const MAX_PARTS = 2 ** 16;

function threshold64(v: unknown, where: string): bigint {
  if (typeof v !== "string" || !/^[0-9]{1,20}$/.test(v) || BigInt(v) >= TWO64) {
    throw new InvalidConfigError(`${where}: expected a decimal string below 2^64, got ${JSON.stringify(v)}`);
  }
  return BigInt(v);
}

function count(v: unknown, where: string, min: number, max: number): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
    throw new InvalidConfigError(`${where}: expected an integer in [${min}, ${max}], got ${JSON.stringify(v)}`);
  }
  return v;
}

/**
 * A numeric metric's mean by Wang et al.'s Hybrid mechanism (issue 40; cms_core/hybrid.py, docs/device.md "Numeric
 * means"): the device config's "mean" entry gives the parts, the grid, the window and the integer thresholds, and
 * the carrier parameters (direct RR over the grid + window + 2 report values, binding NAME@VERSION/mean) its reports
 * are framed with. A report draws its part first, below(parts); part 0 is a Hybrid report of the number (`draw`),
 * any other the histogram's. Shared vectors: tests/vectors/numeric_mean_v1.json.
 */
export class HybridMean<P> {
  private readonly partDraw: SmallBelow;
  private readonly gridDraw: SmallBelow;
  private readonly windowDraw: SmallBelow;

  private constructor(readonly params: P, readonly parts: number, readonly lower: number, readonly upper: number,
                      readonly grid: number, readonly window: number, readonly pmShare: bigint,
                      readonly pmKeep: bigint, readonly duchiLow: bigint, readonly duchiStep: bigint) {
    this.partDraw = new SmallBelow(parts);
    this.gridDraw = new SmallBelow(grid);
    this.windowDraw = new SmallBelow(window);
  }

  static fromConfig<P>(entry: unknown, where: string, layout: NumericLayout, binding: string,
                       build: (at: string, spec: MeanCarrierSpec) => P): HybridMean<P> {
    if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
      throw new InvalidConfigError(`${where}: expected {"fingerprint", "parts", "grid", "window", ...}`);
    }
    const row = entry as Record<string, unknown>;
    if (row.lower !== layout.lower || row.upper !== layout.upper) {
      throw new InvalidConfigError(`${where}: lower and upper must be the numeric entry's (${layout.lower}, ${layout.upper})`);
    }
    const parts = count(row.parts, `${where}.parts`, 1, MAX_PARTS);
    const grid = count(row.grid, `${where}.grid`, 2, MAX_GRID);
    if (grid % 2 !== 0) throw new InvalidConfigError(`${where}.grid: must be even, got ${grid}`);
    const window = count(row.window, `${where}.window`, 1, grid);
    const m = grid + window + 2;
    if (row.m !== m || row.dictionary_size !== String(m) || row.mechanism !== "direct") {
      throw new InvalidConfigError(`${where}: the carrier is direct RR over grid + window + 2 = ${m} report values`);
    }
    const duchiLow = threshold64(row.duchi_low, `${where}.duchi_low`);
    const duchiStep = threshold64(row.duchi_step, `${where}.duchi_step`);
    if (duchiLow + BigInt(grid) * duchiStep >= TWO64) {
      throw new InvalidConfigError(`${where}: duchi_low + grid * duchi_step must be below 2^64`);
    }
    const params = build(where, { fingerprint: row.fingerprint, m: row.m, keep_threshold: row.keep_threshold,
                                  field: row.field, dictionarySize: BigInt(m), mechanism: "direct",
                                  binding: `${binding}/mean` });
    return new HybridMean(params, parts, layout.lower, layout.upper, grid, window,
                          threshold64(row.pm_share, `${where}.pm_share`), threshold64(row.pm_keep, `${where}.pm_keep`),
                          duchiLow, duchiStep);
  }

  /** The part (below(parts)), then for part 0 the Hybrid report z of `value` (a number; NaN refused before);
   *  null for any other part: the caller reports the histogram, drawing on from the same stream. */
  draw(stream: ByteStream, value: number): number | null {
    if (this.partDraw.draw(stream) !== 0) return null;
    const x = Math.min(Math.max(value, this.lower), this.upper);
    const s = (x - this.lower) / (this.upper - this.lower) * this.grid;
    let j = Math.min(Math.floor(s), this.grid);
    if (drawBits64(stream) < BigInt(Math.floor((s - j) * 2 ** 64))) j += 1; // exact: an integer-valued double
    if (drawBits64(stream) < this.pmShare) {
      if (drawBits64(stream) < this.pmKeep) return j + this.windowDraw.draw(stream);
      const other = this.gridDraw.draw(stream);
      return other < j ? other : other + this.window;
    }
    return this.grid + this.window + (drawBits64(stream) < this.duchiLow + BigInt(j) * this.duchiStep ? 1 : 0);
  }
}
