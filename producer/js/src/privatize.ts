/**
 * The device path (cms_core.privatize.privatize): one epsilon-LDP report of a value, as a wire-v1
 * single-report message, every draw in the order of the randomness contract:
 *
 *   a Hybrid mean only: part = below(parts); part 0 is a Hybrid report (numeric.ts HybridMean), framed with its
 *                   carrier's fingerprint; any other part goes on below with the histogram's report
 *   discovery, tree only: level = below(levels) + 1 (a tree: then the bucket's node at that level is the value)
 *   OCMS+RR only:   a0 = below(order), a1 = below(order), y = (a0 + a1 x) mod m   (direct RR: y = x)
 *   keep:           bits64() < T  -> z = y
 *   otherwise:      other = below(m - 1), z = other < y ? other : other + 1
 *
 * The value is validated before the first draw. The public API always draws from the platform CSPRNG
 * (random.ts CryptoStream); `privatizeWith` takes any stream and lives in this internal module, which
 * package.json does not export: only the test entry point (testing.ts) hands it a recorded stream.
 */

import { EncodedValue, MetricVersion, ReportParams, ReportValue } from "./config.js";
import { ByteStream, keepDraw } from "./random.js";
import { HEADER_SIZE } from "./wire.js";

export interface PrivateReport {
  /** The metric's name and version. */
  readonly metric: string;
  readonly version: number;
  /** The discovery or tree level (1..levels) the report describes, or null for a plain metric. */
  readonly level: number | null;
  /** The parameter set's fingerprint (hex): the metric version's, or the level's. */
  readonly fingerprint: string;
  /** The wire-v1 single-report message (16-byte header + one record). */
  readonly message: Uint8Array;
}

/** z from y by randomized response over [m] (the keep draw, then `other` only when not kept). */
export function randomizedResponse(stream: ByteStream, params: ReportParams, y: number): number {
  if (keepDraw(stream, params.thresholdHi, params.thresholdLo)) return y;
  const other = params.other.draw(stream);
  return other < y ? other : other + 1;
}

function writeZ(out: Uint8Array, offset: number, width: number, z: number): void {
  for (let i = offset + width - 1; i >= offset; i--) {
    out[i] = z & 255;
    z = z >>> 8;
  }
}

/** One report of an already encoded value with `params` (the metric version's or a level's). */
export function reportOf(stream: ByteStream, params: ReportParams, element: EncodedValue["element"]): Uint8Array {
  const out = new Uint8Array(HEADER_SIZE + params.recordBytes);
  out.set(params.header);
  let y: number;
  let zAt = HEADER_SIZE;
  if (params.isDirect) {
    y = element as number;
  } else {
    y = params.field.drawHash(stream, element, params.m, out, HEADER_SIZE);
    zAt += 2 * params.field.coefficientBytes;
  }
  writeZ(out, zAt, params.zBytes, randomizedResponse(stream, params, y));
  return out;
}

/**
 * Validates `value`, then makes its report from `stream`. `keepThresholds` (test entry only) replaces
 * the thresholds of the parameter sets it names by fingerprint: the leaky device of the audit's negative control.
 */
export function privatizeWith(stream: ByteStream, version: MetricVersion, value: ReportValue,
                              keepThresholds?: ReadonlyMap<string, bigint>): PrivateReport {
  const encoded = version.encode(value);
  return privatizeEncoded(stream, version, encoded, keepThresholds);
}

export function privatizeEncoded(stream: ByteStream, version: MetricVersion, encoded: EncodedValue,
                                 keepThresholds?: ReadonlyMap<string, bigint>): PrivateReport {
  let params = version.params;
  let level: number | null = null;
  let element = encoded.element;
  const z = version.mean === null ? null : version.mean.draw(stream, encoded.number!); // issue 40: the part first
  if (z !== null) {
    const carrier = version.mean!.params;
    const message = new Uint8Array(HEADER_SIZE + carrier.recordBytes);
    message.set(carrier.header);
    writeZ(message, HEADER_SIZE, carrier.zBytes, z);
    return { metric: version.name, version: version.version, level: null, fingerprint: carrier.fingerprintHex, message };
  }
  if (version.discovery !== null) {
    level = version.levelDraw!.draw(stream) + 1;
    params = version.levels[level - 1];
    element = params.field.element(version.levelElement(encoded, level));
  } else if (version.tree !== null) { // issue 40: the level first, then its node of the bucket (numeric.ts)
    level = version.levelDraw!.draw(stream) + 1;
    params = version.tree.levels[level - 1];
    const node = version.tree.node(encoded.integer!, level);
    element = params.isDirect ? Number(node) : params.field.element(node);
  }
  if (keepThresholds !== undefined) {
    const threshold = keepThresholds.get(params.fingerprintHex);
    if (threshold !== undefined) params = params.withKeepThreshold(threshold);
  }
  return { metric: version.name, version: version.version, level, fingerprint: params.fingerprintHex,
           message: reportOf(stream, params, element) };
}
