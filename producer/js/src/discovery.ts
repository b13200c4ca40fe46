/**
 * Discovery prefixes (cms_core/discovery.py, docs/discovery.md): a discovery report describes the
 * value's prefix at one level drawn uniformly at random, independently of the value.
 *
 * Strings: the symbols are alphabet positions (by code point) or UTF-8 bytes; level L describes the
 * first min(L * step, max_length) symbols, and a value shorter than that has ended. The element is
 * H(parent) * 2^c + i in [0, 2^63): H the top 63 - c bits of blake2b(len(parent) as 4 bytes |
 * each symbol as 2 bytes, digest_size=8, person="ocms-prefix-v1"), i the last step's position among
 * the parent's children (tails of length 0, 1, ..., base A, first symbol most significant), c =
 * max(1, bitLength(branching - 1)). Integers: the top prefix_length bits.
 */

import { InvalidConfigError, InvalidValueError } from "./errors.js";
import { blake2b, utf8 } from "./hash.js";
import { bigBitLength } from "./random.js";

export const STRING_PREFIX_BITS = 63;
const MAX_LEVELS = 256;
const MAX_BRANCHING = 1 << 16;

export type Symbols = number[];

export class DiscoveryDomain {
  readonly levels: number;
  readonly alphabetSize: number;
  readonly childBits: number;
  private readonly index: Map<string, number> | null;

  private constructor(readonly kind: "strings" | "integers", readonly alphabet: string | null,
                      readonly maxLength: number, readonly step: number, readonly bits: number) {
    const length = kind === "strings" ? maxLength : bits;
    this.levels = Math.ceil(length / step);
    this.alphabetSize = alphabet === "utf8" ? 256 : alphabet === null ? 0 : Array.from(alphabet).length;
    this.index = alphabet === null || alphabet === "utf8" ? null
      : new Map(Array.from(alphabet).map((c, i) => [c, i] as [string, number]));
    this.childBits = kind === "strings" ? Math.max(1, bigBitLength(BigInt(this.branching(1) - 1))) : 0;
  }

  /** From the `discovery` entry of a device config; `where` names it in errors. */
  static fromConfig(entry: Record<string, unknown>, where: string): DiscoveryDomain {
    const positive = (key: string, max: number): number => {
      const v = entry[key];
      if (typeof v !== "number" || !Number.isInteger(v) || v < 1 || v > max) {
        throw new InvalidConfigError(`${where}.${key}: must be an integer in [1, ${max}], got ${JSON.stringify(v)}`);
      }
      return v;
    };
    let domain: DiscoveryDomain;
    if (entry.kind === "strings") {
      const alphabet = entry.alphabet;
      if (typeof alphabet !== "string" || alphabet.length === 0) {
        throw new InvalidConfigError(`${where}.alphabet: must be "utf8" or a non-empty string of characters`);
      }
      if (alphabet !== "utf8" && new Set(Array.from(alphabet)).size !== Array.from(alphabet).length) {
        throw new InvalidConfigError(`${where}.alphabet: lists a character more than once`);
      }
      const maxLength = positive("max_length", 4096);
      domain = new DiscoveryDomain("strings", alphabet, maxLength, positive("symbols_per_level", maxLength), 0);
    } else if (entry.kind === "integers") {
      const bits = positive("bits", 64);
      domain = new DiscoveryDomain("integers", null, 0, positive("bits_per_level", bits), bits);
    } else {
      throw new InvalidConfigError(`${where}.kind: expected "strings" or "integers", got ${JSON.stringify(entry.kind)}`);
    }
    if (domain.levels > MAX_LEVELS) throw new InvalidConfigError(`${where}: more than ${MAX_LEVELS} levels`);
    if (domain.branching(1) > MAX_BRANCHING) throw new InvalidConfigError(`${where}: more than ${MAX_BRANCHING} candidates per level`);
    return domain;
  }

  get length(): number {
    return this.kind === "strings" ? this.maxLength : this.bits;
  }

  prefixLength(level: number): number {
    return Math.min(level * this.step, this.length);
  }

  branching(level: number): number {
    const k = this.prefixLength(level) - (level > 1 ? this.prefixLength(level - 1) : 0);
    if (this.kind === "integers") return 2 ** k;
    let total = 0;
    for (let j = 0; j <= k; j++) total += this.alphabetSize ** j;
    return total;
  }

  /** A string value as symbols; refuses a character outside the alphabet (or text that is not UTF-8). */
  symbols(value: string | Uint8Array): Symbols {
    if (this.alphabet === "utf8") {
      if (value instanceof Uint8Array) return Array.from(value);
      if (!isWellFormed(value)) throw new InvalidValueError(`value ${JSON.stringify(value)}: not encodable as UTF-8 (a lone surrogate)`);
      return Array.from(utf8(value));
    }
    if (typeof value !== "string") throw new InvalidValueError("a string metric with an alphabet takes string values");
    const out: Symbols = [];
    for (const c of value) {
      const i = this.index!.get(c);
      if (i === undefined) throw new InvalidValueError(`value ${JSON.stringify(value)}: character ${JSON.stringify(c)} is not in the metric's alphabet`);
      out.push(i);
    }
    return out;
  }

  /** The integer element a level's parameters encode for a string value's symbols. */
  stringElement(symbols: Symbols, level: number): bigint {
    const length = this.prefixLength(level);
    const ended = symbols.length < length;
    const prefix = symbols.slice(0, length);
    const step = this.step;
    const parentLength = prefix.length || ended ? Math.floor((prefix.length - (ended ? 0 : 1)) / step) * step : 0;
    const parent = prefix.slice(0, parentLength);
    const tail = prefix.slice(parentLength);
    return (this.parentHash(parent) << BigInt(this.childBits)) + BigInt(this.stepIndex(tail));
  }

  /** The integer element of an integer value at a level: its top prefix_length bits. */
  integerElement(value: bigint, level: number): bigint {
    if (value < 0n || value >= 1n << BigInt(this.bits)) {
      throw new InvalidValueError(`value ${value}: an integer metric takes integers in [0, 2^${this.bits})`);
    }
    return value >> BigInt(this.bits - this.prefixLength(level));
  }

  private parentHash(parent: Symbols): bigint {
    const data = new Uint8Array(4 + 2 * parent.length);
    const n = parent.length;
    data[0] = n >>> 24; data[1] = (n >>> 16) & 255; data[2] = (n >>> 8) & 255; data[3] = n & 255;
    parent.forEach((s, i) => { data[4 + 2 * i] = s >>> 8; data[5 + 2 * i] = s & 255; });
    const digest = blake2b(data, 8, "ocms-prefix-v1");
    let h = 0n;
    for (const b of digest) h = (h << 8n) | BigInt(b);
    return h >> BigInt(64 - (STRING_PREFIX_BITS - this.childBits));
  }

  private stepIndex(tail: Symbols): number {
    const a = this.alphabetSize;
    let index = 0;
    for (let i = 0; i < tail.length; i++) index += a ** i;
    let rank = 0;
    for (const x of tail) rank = rank * a + x;
    return index + rank;
  }
}

/** String.prototype.isWellFormed where it exists (Node >= 20, current browsers), else the same check by hand. */
export function isWellFormed(text: string): boolean {
  const native = (text as unknown as { isWellFormed?: () => boolean }).isWellFormed;
  if (typeof native === "function") return native.call(text);
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?:^|[^\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(text);
}
