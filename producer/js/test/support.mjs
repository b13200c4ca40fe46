// Shared by the node tests: where the cross-language vectors live, and small helpers.
import { fileURLToPath } from "node:url";
import path from "node:path";

import { keepThresholdFor } from "../dist/testing.js";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
export const VECTORS = process.env.OCMS_VECTORS_DIR ?? path.join(ROOT, "tests/vectors");

/** cms_core.privatize.keep_threshold recomputed here (exp(eps) two ulps down, floored); equal to Python's
 *  whenever this platform's exp agrees with libm's, which the config check does not rely on. */
export function keepThresholdOf(epsilon, m) {
  return keepThresholdFor(epsilon, m);
}
