/**
 * Per-client overrides of the randomness, set only by the internal test entry point (testing.ts).
 * Neither this module nor testing.ts is in package.json "exports", and nothing public returns this map:
 * a client made through the public API always draws from crypto.getRandomValues with the config's T.
 */

import type { ByteStream } from "./random.js";

export interface TestOverride {
  stream?: ByteStream;
  keepThresholds?: ReadonlyMap<string, bigint>;
}

export const testOverrides = new WeakMap<object, TestOverride>();
