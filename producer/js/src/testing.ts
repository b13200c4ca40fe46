/**
 * Internal test entry point: NOT part of the package's API (package.json "exports" leaves it out, so
 * `import "ocms-client/testing"` fails with ERR_PACKAGE_PATH_NOT_EXPORTED, and the browser bundles are built
 * from index.ts and core.ts, which never import it). The tests reach it by its file path to
 *
 * - replay tests/vectors/privatize_v1.json from the recorded random bytes (RecordedStream, privatizeWith);
 * - build the leaky device of the privacy audit's negative control (a client keeping with the threshold of
 *   another epsilon while its config claims the real one).
 *
 * A report made with anything but the CSPRNG is not private: never use this module in an application.
 */

import { testOverrides } from "./internal.js";
import type { OcmsClient } from "./client.js";
import type { ByteStream } from "./random.js";

export { CryptoStream, RecordedStream, SmallBelow, drawBelowBig, drawBits64, keepDraw, ByteStream } from "./random.js";
export { privatizeWith, privatizeEncoded, reportOf, randomizedResponse } from "./privatize.js";
export { checkKeepThreshold, keepThresholdFor, parameterFingerprint, ReportParams } from "./config.js";
export { primeField, binaryField, isPrime } from "./fields.js";
export { PrfStream, longitudinalReport, seenKey } from "./longitudinal.js";

/** Make `client` draw from `stream` and/or keep with other thresholds (by parameter fingerprint). */
export function overrideRandomness(client: OcmsClient, override: { stream?: ByteStream; keepThresholds?: ReadonlyMap<string, bigint> }): void {
  testOverrides.set(client, override);
}
