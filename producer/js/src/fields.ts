/**
 * The finite fields of the hash family h(x) = a0 + a1 x (cms_core/fields.py), bit for bit:
 *
 *   F(p), p < 2^32             Numbers (products split at 16 bits, so every step is exact below 2^53)
 *   F(p), 2^32 < p <= 2^64-59  the draw in 32-bit words, the arithmetic in BigInt
 *   GF(2^64), GF(2^128)        32-bit words; x^64 + x^4 + x^3 + x + 1 and x^128 + x^7 + x^2 + x + 1
 *
 * A field element of GF(2^l) is the integer whose bit i is the coefficient of x^i, written big-endian on
 * the wire. The hash residue is the field value's integer representation mod m. Every draw follows the
 * randomness contract (random.ts): a0 = below(order), then a1 = below(order).
 */

import { InvalidConfigError } from "./errors.js";
import { ByteStream, SmallBelow, bigBitLength } from "./random.js";

export const PRIME_64 = 2n ** 64n - 59n;
/** cms_core.fields.IRREDUCIBLE_POLYNOMIALS: the leading term included. */
export const IRREDUCIBLE_POLYNOMIALS: Readonly<Record<number, bigint>> = {
  64: (1n << 64n) | 0b11011n,
  128: (1n << 128n) | 0b10000111n,
};

/** A field element: a Number (small primes), a BigInt (large primes) or big-endian 32-bit words (GF(2^l)). */
export type Element = number | bigint | Uint32Array;

export interface Field {
  readonly kind: "prime" | "binary";
  readonly order: bigint;
  /** Bits of (order - 1), the degree for GF(2^l). */
  readonly bits: number;
  /** W: bytes of a0 and of a1 on the wire. */
  readonly coefficientBytes: number;
  /** cms_core's `field.descriptor()`, hashed into the parameter fingerprint. */
  readonly descriptor: Uint8Array;
  readonly label: string;
  /** The element of the integer x (0 <= x < order, checked by the caller). */
  element(x: bigint): Element;
  /** The element of a 16-byte big-endian fingerprint (GF(2^128) only). */
  elementOfBytes?(bytes: Uint8Array): Element;
  /** Draws a0 then a1 from `stream`, writes both at out[offset..], returns (a0 + a1 x) mod m. */
  drawHash(stream: ByteStream, x: Element, m: number, out: Uint8Array, offset: number): number;
  /** (a0 + a1 x) in the field, as an integer (tests, audits). */
  hashValue(a0: bigint, a1: bigint, x: bigint): bigint;
}

function writeUint(out: Uint8Array, offset: number, width: number, value: number): void {
  for (let i = offset + width - 1; i >= offset; i--) {
    out[i] = value % 256;
    value = Math.floor(value / 256);
  }
}

function writeU32(out: Uint8Array, offset: number, value: number): void {
  out[offset] = value >>> 24;
  out[offset + 1] = (value >>> 16) & 255;
  out[offset + 2] = (value >>> 8) & 255;
  out[offset + 3] = value & 255;
}

/** `x`'s low `out.length` limbs of `bits` bits, big-endian, written into `out`. */
function limbsInto<T extends Uint8Array | Uint32Array>(out: T, x: bigint, bits: bigint): T {
  const mask = (1n << bits) - 1n;
  for (let i = out.length - 1; i >= 0; i--) {
    out[i] = Number(x & mask);
    x >>= bits;
  }
  return out;
}

function uintBytes(value: bigint, width: number): Uint8Array {
  return limbsInto(new Uint8Array(width), value, 8n);
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const ASCII = (text: string) => new TextEncoder().encode(text);

function primeDescriptor(p: bigint): Uint8Array {
  return concat(ASCII("prime:"), uintBytes(p, 8));
}

/** x mod m for a value given as 16-bit halves, most significant first (m <= 2^32: every step < 2^48). */
function residue16(halves: number[], m: number): number {
  let r = 0;
  for (const h of halves) r = (r * 65536 + h) % m;
  return r;
}

class SmallPrimeField implements Field {
  readonly kind = "prime";
  readonly order: bigint;
  readonly bits: number;
  readonly coefficientBytes: number;
  readonly descriptor: Uint8Array;
  readonly label: string;
  private readonly below: SmallBelow;
  /** p^2 + p < 2^53: a0 + a1 x is exact in one step. */
  private readonly direct: boolean;

  constructor(readonly p: number) {
    this.order = BigInt(p);
    this.below = new SmallBelow(p);
    this.bits = this.below.bits;
    this.coefficientBytes = this.below.width;
    this.descriptor = primeDescriptor(this.order);
    this.label = `F(${p})`;
    this.direct = p * p + p < 2 ** 53;
  }

  element(x: bigint): Element {
    return Number(x);
  }

  mulAdd(a0: number, a1: number, x: number): number {
    const p = this.p;
    if (this.direct) return (a0 + a1 * x) % p;
    const high = ((a1 * Math.floor(x / 65536)) % p) * 65536;
    return (high + a1 * (x % 65536) + a0) % p;
  }

  drawHash(stream: ByteStream, x: Element, m: number, out: Uint8Array, offset: number): number {
    const a0 = this.below.draw(stream);
    const a1 = this.below.draw(stream);
    const w = this.coefficientBytes;
    writeUint(out, offset, w, a0);
    writeUint(out, offset + w, w, a1);
    return this.mulAdd(a0, a1, x as number) % m;
  }

  hashValue(a0: bigint, a1: bigint, x: bigint): bigint {
    return (a0 + a1 * x) % this.order;
  }
}

class LargePrimeField implements Field {
  readonly kind = "prime";
  readonly bits: number;
  readonly coefficientBytes: number;
  readonly descriptor: Uint8Array;
  readonly label: string;
  private readonly hiWidth: number;
  private readonly hiModulus: number;
  private readonly pHi: number;
  private readonly pLo: number;

  constructor(readonly order: bigint) {
    this.bits = bigBitLength(order - 1n); // 33..64
    this.coefficientBytes = (this.bits + 7) >> 3;
    this.hiWidth = this.coefficientBytes - 4;
    this.hiModulus = 2 ** (this.bits - 32);
    this.pHi = Number(order >> 32n);
    this.pLo = Number(order & 0xffffffffn);
    this.descriptor = primeDescriptor(order);
    this.label = order === PRIME_64 ? "F(2^64 - 59)" : `F(${order})`;
  }

  element(x: bigint): Element {
    return x;
  }

  /** below(order) by the contract: ceil(k/8) bytes, low k bits, rejected at or above p; written at out[offset]. */
  private draw(stream: ByteStream, out: Uint8Array, offset: number): bigint {
    for (;;) {
      const hi = stream.uint(this.hiWidth) % this.hiModulus;
      const lo = stream.u32();
      if (hi < this.pHi || (hi === this.pHi && lo < this.pLo)) {
        writeUint(out, offset, this.hiWidth, hi);
        writeU32(out, offset + this.hiWidth, lo);
        return (BigInt(hi) << 32n) | BigInt(lo);
      }
    }
  }

  drawHash(stream: ByteStream, x: Element, m: number, out: Uint8Array, offset: number): number {
    const a0 = this.draw(stream, out, offset);
    const a1 = this.draw(stream, out, offset + this.coefficientBytes);
    return Number(((a0 + a1 * (x as bigint)) % this.order) % BigInt(m));
  }

  hashValue(a0: bigint, a1: bigint, x: bigint): bigint {
    return (a0 + a1 * x) % this.order;
  }
}

function binaryDescriptor(degree: number, polynomial: bigint): Uint8Array {
  return concat(ASCII("binary:"), uintBytes(BigInt(degree), 2), uintBytes(polynomial, 17));
}

function toWords(x: bigint, words: number): Uint32Array {
  return limbsInto(new Uint32Array(words), x, 32n);
}

function fromWords(words: ArrayLike<number>): bigint {
  let x = 0n;
  for (let i = 0; i < words.length; i++) x = (x << 32n) | BigInt(words[i]);
  return x;
}

/** GF(2^degree): what both binary fields share (their products are written out per word count, for speed). */
abstract class BinaryField {
  readonly kind = "binary";
  readonly order: bigint;
  readonly coefficientBytes: number;
  readonly descriptor: Uint8Array;
  readonly label: string;
  /** The polynomial's terms below x^degree (cms_core's fit one 32-bit word). */
  protected readonly low: number;

  constructor(readonly bits: number, polynomial: bigint) {
    this.order = 1n << BigInt(bits);
    this.coefficientBytes = bits / 8;
    this.descriptor = binaryDescriptor(bits, polynomial);
    this.label = `GF(2^${bits})`;
    this.low = Number(polynomial & 0xffffffffn);
  }
}

/** GF(2^64): two 32-bit words, Horner over the bits of x (x is fixed per value, a1 is fresh per report). */
class BinaryField64 extends BinaryField implements Field {
  constructor(polynomial: bigint) {
    super(64, polynomial);
  }

  element(x: bigint): Element {
    return toWords(x, 2);
  }

  /** a1 * x in the field, (hi, lo) words. */
  private mul(ah: number, al: number, x: Uint32Array): [number, number] {
    let rh = 0, rl = 0;
    const low = this.low;
    for (let w = 0; w < 2; w++) {
      const word = x[w];
      if (w === 0 && word === 0) continue;
      for (let bit = 31; bit >= 0; bit--) {
        const carry = rh >>> 31;
        rh = ((rh << 1) | (rl >>> 31)) >>> 0;
        rl = ((rl << 1) ^ (carry ? low : 0)) >>> 0;
        if ((word >>> bit) & 1) {
          rh = (rh ^ ah) >>> 0;
          rl = (rl ^ al) >>> 0;
        }
      }
    }
    return [rh, rl];
  }

  drawHash(stream: ByteStream, x: Element, m: number, out: Uint8Array, offset: number): number {
    const a0h = stream.u32(), a0l = stream.u32();
    const a1h = stream.u32(), a1l = stream.u32();
    writeU32(out, offset, a0h); writeU32(out, offset + 4, a0l);
    writeU32(out, offset + 8, a1h); writeU32(out, offset + 12, a1l);
    const [ph, pl] = this.mul(a1h, a1l, x as Uint32Array);
    const hh = (a0h ^ ph) >>> 0, hl = (a0l ^ pl) >>> 0;
    return residue16([hh >>> 16, hh & 0xffff, hl >>> 16, hl & 0xffff], m);
  }

  hashValue(a0: bigint, a1: bigint, x: bigint): bigint {
    const a = toWords(a1, 2);
    const [ph, pl] = this.mul(a[0], a[1], toWords(x, 2));
    return a0 ^ fromWords([ph, pl]);
  }
}

/** GF(2^128): four 32-bit words, most significant first; the string fingerprints' field. */
class BinaryField128 extends BinaryField implements Field {
  constructor(polynomial: bigint) {
    super(128, polynomial);
  }

  element(x: bigint): Element {
    return toWords(x, 4);
  }

  elementOfBytes(bytes: Uint8Array): Element {
    const out = new Uint32Array(4);
    for (let w = 0; w < 4; w++) {
      const i = 4 * w;
      out[w] = ((bytes[i] << 24) | (bytes[i + 1] << 16) | (bytes[i + 2] << 8) | bytes[i + 3]) >>> 0;
    }
    return out;
  }

  /** a1 * x in the field into `r` (4 words). */
  private mul(a: Uint32Array | number[], x: Uint32Array, r: Uint32Array): void {
    let r0 = 0, r1 = 0, r2 = 0, r3 = 0;
    const a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
    const low = this.low;
    let started = false;
    for (let w = 0; w < 4; w++) {
      const word = x[w];
      if (!started && word === 0) continue;
      started = true;
      for (let bit = 31; bit >= 0; bit--) {
        const carry = r0 >>> 31;
        r0 = ((r0 << 1) | (r1 >>> 31)) >>> 0;
        r1 = ((r1 << 1) | (r2 >>> 31)) >>> 0;
        r2 = ((r2 << 1) | (r3 >>> 31)) >>> 0;
        r3 = ((r3 << 1) ^ (carry ? low : 0)) >>> 0;
        if ((word >>> bit) & 1) {
          r0 ^= a0; r1 ^= a1; r2 ^= a2; r3 ^= a3;
        }
      }
    }
    r[0] = r0; r[1] = r1; r[2] = r2; r[3] = r3;
  }

  private readonly scratchA = new Uint32Array(4);
  private readonly scratchR = new Uint32Array(4);

  drawHash(stream: ByteStream, x: Element, m: number, out: Uint8Array, offset: number): number {
    const c0 = stream.u32(), c1 = stream.u32(), c2 = stream.u32(), c3 = stream.u32();
    const a = this.scratchA;
    a[0] = stream.u32(); a[1] = stream.u32(); a[2] = stream.u32(); a[3] = stream.u32();
    writeU32(out, offset, c0); writeU32(out, offset + 4, c1); writeU32(out, offset + 8, c2); writeU32(out, offset + 12, c3);
    for (let i = 0; i < 4; i++) writeU32(out, offset + 16 + 4 * i, a[i]);
    const r = this.scratchR;
    this.mul(a, x as Uint32Array, r);
    const h0 = (c0 ^ r[0]) >>> 0, h1 = (c1 ^ r[1]) >>> 0, h2 = (c2 ^ r[2]) >>> 0, h3 = (c3 ^ r[3]) >>> 0;
    a.fill(0);
    r.fill(0);
    return residue16([h0 >>> 16, h0 & 0xffff, h1 >>> 16, h1 & 0xffff, h2 >>> 16, h2 & 0xffff, h3 >>> 16, h3 & 0xffff], m);
  }

  hashValue(a0: bigint, a1: bigint, x: bigint): bigint {
    const r = new Uint32Array(4);
    this.mul(toWords(a1, 4), toWords(x, 4), r);
    return a0 ^ fromWords(r);
  }
}

// ------------------------------------------------------------------ primality (config validation)
function powMod(base: bigint, exp: bigint, mod: bigint): bigint {
  let result = 1n;
  base %= mod;
  while (exp > 0n) {
    if (exp & 1n) result = (result * base) % mod;
    base = (base * base) % mod;
    exp >>= 1n;
  }
  return result;
}

const MR_BASES = [2n, 3n, 5n, 7n, 11n, 13n, 17n, 19n, 23n, 29n, 31n, 37n, 41n];

/** Deterministic Miller-Rabin for n < 3.3e24 (cms_core.fields.is_prime). */
export function isPrime(n: bigint): boolean {
  if (n < 2n) return false;
  for (const b of MR_BASES) if (n % b === 0n) return n === b;
  let d = n - 1n, s = 0;
  while ((d & 1n) === 0n) {
    d >>= 1n;
    s++;
  }
  outer: for (const a of MR_BASES) {
    let x = powMod(a, d, n);
    if (x === 1n || x === n - 1n) continue;
    for (let i = 1; i < s; i++) {
      x = (x * x) % n;
      if (x === n - 1n) continue outer;
    }
    return false;
  }
  return true;
}

/** A prime field F(p), 3 <= p <= 2^64 - 59; `where` names the config entry in errors. */
export function primeField(p: bigint, where: string): Field {
  if (p < 3n || p > PRIME_64) throw new InvalidConfigError(`${where}: prime field order ${p} outside [3, 2^64 - 59]`);
  if (!isPrime(p)) throw new InvalidConfigError(`${where}: field order ${p} is not a prime`);
  return p < 2n ** 32n ? new SmallPrimeField(Number(p)) : new LargePrimeField(p);
}

/** GF(2^degree) with cms_core's irreducible polynomial (any other is refused: it would hash differently). */
export function binaryField(degree: number, polynomial: bigint, where: string): Field {
  const expected = IRREDUCIBLE_POLYNOMIALS[degree];
  if (expected === undefined) {
    throw new InvalidConfigError(`${where}: GF(2^${degree}) is not supported (degrees 64 and 128)`);
  }
  if (polynomial !== expected) {
    throw new InvalidConfigError(`${where}: polynomial ${polynomial} is not cms_core's GF(2^${degree}) polynomial ${expected}`);
  }
  return degree === 64 ? new BinaryField64(polynomial) : new BinaryField128(polynomial);
}

export { uintBytes, concat, toWords, fromWords, writeUint, writeU32 };
