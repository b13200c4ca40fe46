// A numeric metric's buckets (issue 40; cms_core/numeric.py BucketLayout.bucket, docs/device.md "Numeric metrics"):
// the device config's "numeric" entry gives lower, upper and the bounds (numbers, never recomputed from a scale).
// A number is clipped into [lower, upper] and reported as the index of the first bound >= it (a value equal to a
// bound is in the bucket that bound closes; the last bucket holds the values above every bound), an integer
// metric over the len(bounds) + 1 bucket indices: the report and the wire shape are every integer metric's.
// Shared vectors: tests/vectors/numeric_v1.json.
import { InvalidConfigError, InvalidValueError } from "./errors.js";

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
