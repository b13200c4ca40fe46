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
