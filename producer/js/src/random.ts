/**
 * The randomness contract (cms_core/privatize.py module doc; docs/device.md "Randomness contract"):
 * a device reads its CSPRNG as one stream of bytes, and every draw takes a fixed number of them.
 *
 *   bits64()    the next 8 bytes, big-endian: uniform on [0, 2^64)
 *   below(n)    n = 1: no byte, 0; else k = bitLength(n - 1), each try the next ceil(k / 8) bytes,
 *               big-endian, low k bits kept, accepted when below n (rejection: no modulo bias)
 *
 * On a device the stream is `crypto.getRandomValues` (browsers and Node), read through a pool of
 * POOL_BYTES bytes so that one report costs no native call; every byte is zeroed once consumed (the
 * keep draw of a past report, read from memory, would tell whether its z is the true hash).
 * A recorded stream (the cross-language vectors) is reachable only through the package's internal
 * test entry point, never from the public API.
 */

import { NoRandomnessError } from "./errors.js";

const POOL_BYTES = 4096;
const TWO32 = 4294967296;

export abstract class ByteStream {
  protected pool: Uint8Array = new Uint8Array(0);
  protected pos = 0;

  /** Make at least one more byte available in `pool` from `pos` on (the bytes before `pos` are spent). */
  protected abstract refill(): void;

  /** The next byte. */
  byte(): number {
    if (this.pos >= this.pool.length) this.refill();
    const b = this.pool[this.pos];
    this.pool[this.pos++] = 0;
    return b;
  }

  /** The next `width` (<= 6) bytes big-endian, as an exact Number. */
  uint(width: number): number {
    const pool = this.pool;
    let pos = this.pos;
    if (pos + width <= pool.length) {
      let v = 0;
      for (let i = 0; i < width; i++) {
        v = v * 256 + pool[pos];
        pool[pos++] = 0;
      }
      this.pos = pos;
      return v;
    }
    let v = 0;
    for (let i = 0; i < width; i++) v = v * 256 + this.byte();
    return v;
  }

  /** The next 4 bytes big-endian (an unsigned 32-bit word). */
  u32(): number {
    const pool = this.pool;
    const pos = this.pos;
    if (pos + 4 <= pool.length) {
      const v = ((pool[pos] << 24) | (pool[pos + 1] << 16) | (pool[pos + 2] << 8) | pool[pos + 3]) >>> 0;
      pool[pos] = 0; pool[pos + 1] = 0; pool[pos + 2] = 0; pool[pos + 3] = 0;
      this.pos = pos + 4;
      return v;
    }
    return this.uint(4);
  }
}

/** The platform CSPRNG: `crypto.getRandomValues`, never anything else. */
export class CryptoStream extends ByteStream {
  private readonly getRandomValues: (array: Uint8Array) => Uint8Array;

  constructor() {
    super();
    const crypto = (globalThis as { crypto?: { getRandomValues?: (a: Uint8Array) => Uint8Array } }).crypto;
    if (!crypto || typeof crypto.getRandomValues !== "function") {
      throw new NoRandomnessError("no CSPRNG: crypto.getRandomValues is not available on this platform "
        + "(needs a browser, Node >= 19, or a secure context); this client never uses Math.random");
    }
    this.getRandomValues = crypto.getRandomValues.bind(crypto);
  }

  protected refill(): void {
    if (this.pool.length !== POOL_BYTES) this.pool = new Uint8Array(POOL_BYTES);
    this.getRandomValues(this.pool);
    this.pos = 0;
  }
}

/** A recorded byte stream (test vectors only): drawing past its end is an error, and `used` counts what was read. */
export class RecordedStream extends ByteStream {
  constructor(bytes: Uint8Array) {
    super();
    this.pool = Uint8Array.from(bytes);
  }

  get used(): number {
    return this.pos;
  }

  get remaining(): number {
    return this.pool.length - this.pos;
  }

  protected refill(): void {
    throw new RangeError(`drew past the ${this.pool.length} recorded bytes`);
  }
}

/** Bit length of a non-negative Number below 2^53. */
export function bitLength(n: number): number {
  let bits = 0;
  while (n >= TWO32) {
    n = Math.floor(n / TWO32);
    bits += 32;
  }
  return bits + (n === 0 ? 0 : 32 - Math.clz32(n));
}

export function bigBitLength(n: bigint): number {
  return n === 0n ? 0 : n.toString(2).length;
}

/** below(n) for n <= 2^48 (a Number): precomputed width and mask of one try. */
export class SmallBelow {
  readonly width: number;
  readonly bits: number;
  private readonly modulus: number;

  constructor(readonly n: number) {
    if (!Number.isInteger(n) || n < 1 || n > 2 ** 48) throw new RangeError(`below(n): n must be an integer in [1, 2^48], got ${n}`);
    this.bits = n === 1 ? 0 : bitLength(n - 1);
    this.width = (this.bits + 7) >> 3;
    this.modulus = 2 ** this.bits;
  }

  draw(stream: ByteStream): number {
    const n = this.n;
    if (n === 1) return 0;
    const width = this.width;
    if (this.bits <= 31) {
      const mask = this.modulus - 1;
      for (;;) {
        const candidate = stream.uint(width) & mask;
        if (candidate < n) return candidate;
      }
    }
    for (;;) {
      const candidate = stream.uint(width) % this.modulus;
      if (candidate < n) return candidate;
    }
  }
}

/** below(n) for any n >= 1 as a BigInt (the generic path; fields use word-level fast paths). */
export function drawBelowBig(stream: ByteStream, n: bigint): bigint {
  if (n < 1n) throw new RangeError(`below(n): n must be >= 1, got ${n}`);
  if (n === 1n) return 0n;
  const bits = bigBitLength(n - 1n);
  const width = (bits + 7) >> 3;
  const mask = (1n << BigInt(bits)) - 1n;
  for (;;) {
    let candidate = 0n;
    for (let i = 0; i < width; i++) candidate = (candidate << 8n) | BigInt(stream.byte());
    candidate &= mask;
    if (candidate < n) return candidate;
  }
}

/** The keep decision bits64() < T, with T split into its high and low 32-bit words (no BigInt per report). */
export function keepDraw(stream: ByteStream, thresholdHi: number, thresholdLo: number): boolean {
  const hi = stream.u32();
  const lo = stream.u32();
  return hi < thresholdHi || (hi === thresholdHi && lo < thresholdLo);
}

/** bits64() as a BigInt (tests and the generic path). */
export function drawBits64(stream: ByteStream): bigint {
  const hi = stream.u32();
  const lo = stream.u32();
  return (BigInt(hi) << 32n) | BigInt(lo);
}
