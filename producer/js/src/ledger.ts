/**
 * The privacy-budget ledger (producer/ledger.py): epsilon spent per metric per period, refusing a
 * report that would exceed the budget before anything is sent; optional memoization.
 *
 * - Periods are the aligned windows floor(now / periodSeconds) of the device clock (UTC epoch).
 * - Exact: epsilons are rationals of their shortest decimal spelling (String(0.1) = "0.1" = 1/10), so ten
 *   charges of 0.1 reach a budget of 1.0 exactly; the charge reaching the budget is allowed, the next refused.
 * - Durable and serialized: a charge is one read-check-write of the stored document under the storage's
 *   lock (storage.ts), committed before the report is queued. A crash can lose a charged report, never a charge.
 * - Memoization (opt-in): the first report of a value in a period is remembered under a keyed BLAKE2b-256
 *   digest (person "ocms-memo-v1", a random 32-byte key created with the ledger) of the value key
 *   (fingerprint | the value's element, as producer.reporter.value_key); a repeat re-sends those bytes free.
 *
 * Stored document (JSON under the key `ocms-ledger`): {"format": 1, "period_seconds", "memo_key" (hex),
 * "spend": {metric: {period: [spent "num/den", charges]}}, "memo": {metric: {period: {digest: message hex}}}};
 * periods older than `keepPeriods` are dropped on each charge. Never the value in the clear.
 */

import { InvalidParameterError, PrivacyBudgetError, StorageError } from "./errors.js";
import { blake2b, fromHex, hex } from "./hash.js";
import { Storage } from "./storage.js";

export const LEDGER_KEY = "ocms-ledger";
const FORMAT = 1;

/** An exact non-negative rational. */
export class Rational {
  constructor(readonly num: bigint, readonly den: bigint) {}

  static parse(text: string): Rational {
    const [n, d] = text.split("/");
    return Rational.of(BigInt(n), BigInt(d ?? "1"));
  }

  static of(num: bigint, den: bigint): Rational {
    const g = gcd(num < 0n ? -num : num, den);
    return new Rational(num / (g || 1n), den / (g || 1n));
  }

  /** A number by its shortest decimal spelling (JS String(x), like Python's repr). */
  static fromNumber(x: number, name: string): Rational {
    if (typeof x !== "number" || !Number.isFinite(x) || x <= 0) {
      throw new InvalidParameterError(`${name} ${x}: must be a finite number > 0`);
    }
    const m = /^(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$/.exec(String(x));
    if (!m) throw new InvalidParameterError(`${name} ${x}: not a decimal number`);
    const digits = BigInt(m[1] + (m[2] ?? ""));
    const exponent = Number(m[3] ?? 0) - (m[2] ?? "").length;
    return exponent >= 0 ? Rational.of(digits * 10n ** BigInt(exponent), 1n) : Rational.of(digits, 10n ** BigInt(-exponent));
  }

  add(o: Rational): Rational {
    return Rational.of(this.num * o.den + o.num * this.den, this.den * o.den);
  }

  sub(o: Rational): Rational {
    return Rational.of(this.num * o.den - o.num * this.den, this.den * o.den);
  }

  compare(o: Rational): number {
    const l = this.num * o.den, r = o.num * this.den;
    return l < r ? -1 : l > r ? 1 : 0;
  }

  toNumber(): number {
    return Number(this.num) / Number(this.den);
  }

  toString(): string {
    return `${this.num}/${this.den}`;
  }

  /** Shortest readable spelling: the decimal when it is exact, else "num/den (~x)". */
  show(): string {
    const f = this.toNumber();
    return Rational.fromNumberOrNull(f)?.compare(this) === 0 || (f === 0 && this.num === 0n) ? String(f) : `${this} (~${f.toPrecision(6)})`;
  }

  private static fromNumberOrNull(x: number): Rational | null {
    try {
      return Rational.fromNumber(x, "x");
    } catch {
      return null;
    }
  }
}

function gcd(a: bigint, b: bigint): bigint {
  while (b) [a, b] = [b, a % b];
  return a;
}

interface LedgerDoc {
  format: number;
  period_seconds: number;
  memo_key: string;
  spend: Record<string, Record<string, [string, number]>>;
  memo: Record<string, Record<string, Record<string, string>>>;
}

export interface Charge {
  /** The message to send: the new report, or the memoized one. */
  readonly report: Uint8Array;
  readonly memoized: boolean;
  readonly period: number;
  /** Spent on the metric in this period after the charge. */
  readonly spent: number;
}

export interface LedgerOptions {
  /** The most epsilon one metric may spend in one period (> 0). */
  budget: number;
  /** Period length in seconds (default 86400); fixed for the life of the stored ledger. */
  periodSeconds?: number;
  /** Periods kept on file, the current one included (default 8). */
  keepPeriods?: number;
  /** Returns the time in milliseconds since the epoch (tests inject one). */
  clock?: () => number;
}

export class PrivacyLedger {
  readonly budget: number;
  readonly periodSeconds: number;
  private readonly budgetExact: Rational;
  private readonly keepPeriods: number;
  private readonly clock: () => number;

  constructor(readonly storage: Storage, options: LedgerOptions) {
    this.budgetExact = Rational.fromNumber(options.budget, "budget");
    this.budget = options.budget;
    const period = options.periodSeconds ?? 86400;
    if (!Number.isInteger(period) || period < 1) throw new InvalidParameterError(`periodSeconds ${period}: must be an integer >= 1`);
    this.periodSeconds = period;
    const keep = options.keepPeriods ?? 8;
    if (!Number.isInteger(keep) || keep < 1) throw new InvalidParameterError(`keepPeriods ${keep}: must be an integer >= 1`);
    this.keepPeriods = keep;
    this.clock = options.clock ?? Date.now;
  }

  currentPeriod(): number {
    return Math.floor(this.clock() / 1000 / this.periodSeconds);
  }

  private periodText(period: number): string {
    const start = new Date(period * this.periodSeconds * 1000).toISOString();
    const end = new Date((period + 1) * this.periodSeconds * 1000).toISOString();
    return `${period} [${start} .. ${end})`;
  }

  private load(): LedgerDoc {
    const text = this.storage.read(LEDGER_KEY);
    if (text === null) {
      const key = new Uint8Array(32);
      globalThis.crypto.getRandomValues(key);
      return { format: FORMAT, period_seconds: this.periodSeconds, memo_key: hex(key), spend: {}, memo: {} };
    }
    let doc: LedgerDoc;
    try {
      doc = JSON.parse(text);
    } catch {
      throw new StorageError(`the ledger in ${this.storage.where} is not JSON: refusing to start a fresh one over it`);
    }
    if (doc.format !== FORMAT) throw new StorageError(`the ledger in ${this.storage.where} has format ${doc.format}, not ${FORMAT}`);
    if (doc.period_seconds !== this.periodSeconds) {
      // Re-aligning periods would let spend recorded in one layout escape the other.
      throw new InvalidParameterError(`periodSeconds ${this.periodSeconds}: the ledger in ${this.storage.where} was created with periodSeconds ${doc.period_seconds}`);
    }
    return doc;
  }

  private save(doc: LedgerDoc, period: number): void {
    const oldest = period - this.keepPeriods + 1;
    for (const table of [doc.spend, doc.memo] as Record<string, Record<string, unknown>>[]) {
      for (const metric of Object.keys(table)) {
        for (const p of Object.keys(table[metric])) if (Number(p) < oldest) delete table[metric][p];
        if (Object.keys(table[metric]).length === 0) delete table[metric];
      }
    }
    this.storage.write(LEDGER_KEY, JSON.stringify(doc));
  }

  private digest(doc: LedgerDoc, valueKey: Uint8Array): string {
    return hex(blake2b(valueKey, 32, "ocms-memo-v1", fromHex(doc.memo_key)));
  }

  /**
   * Atomically: the memoized report for `valueKey` (free), or charge `epsilon` and (with a key) remember
   * `report`. PrivacyBudgetError when the charge would exceed the budget: nothing is recorded.
   */
  chargeOrReuse(metric: string, epsilon: number, valueKey: Uint8Array | null, report: Uint8Array | (() => Uint8Array)): Promise<Charge> {
    if (typeof metric !== "string" || metric === "") throw new InvalidParameterError("metric: must be a non-empty string");
    const exact = Rational.fromNumber(epsilon, "epsilon");
    return this.storage.withLock(LEDGER_KEY, () => {
      const doc = this.load();
      const period = this.currentPeriod();
      const digest = valueKey !== null ? this.digest(doc, valueKey) : null;
      if (digest !== null) {
        const earlier = doc.memo[metric]?.[period]?.[digest];
        if (earlier !== undefined) {
          return { report: fromHex(earlier), memoized: true, period, spent: this.spentIn(doc, metric, period).toNumber() };
        }
      }
      const spent = this.spentIn(doc, metric, period);
      const total = spent.add(exact);
      if (total.compare(this.budgetExact) > 0) {
        throw new PrivacyBudgetError(
          `privacy budget exhausted for metric ${JSON.stringify(metric)} in period ${this.periodText(period)}: `
          + `spent ${spent.show()}, requested ${epsilon}, budget ${this.budget} (remaining ${this.budgetExact.sub(spent).show()})`,
          metric, period, spent.toNumber(), epsilon, this.budget);
      }
      const message = typeof report === "function" ? report() : report;
      const charges = doc.spend[metric]?.[period]?.[1] ?? 0;
      (doc.spend[metric] ??= {})[period] = [total.toString(), charges + 1];
      if (digest !== null) ((doc.memo[metric] ??= {})[period] ??= {})[digest] = hex(message);
      this.save(doc, period);
      return { report: message, memoized: false, period, spent: total.toNumber() };
    });
  }

  /** Spend `epsilon` on `metric` in the current period, or throw PrivacyBudgetError. */
  async charge(metric: string, epsilon: number): Promise<void> {
    await this.chargeOrReuse(metric, epsilon, null, new Uint8Array(0));
  }

  private spentIn(doc: LedgerDoc, metric: string, period: number): Rational {
    const row = doc.spend[metric]?.[period];
    return row ? Rational.parse(row[0]) : new Rational(0n, 1n);
  }

  /** Epsilon spent on `metric` in the current period (exact rational via spentExact). */
  async spent(metric: string): Promise<number> {
    return (await this.spentExact(metric)).toNumber();
  }

  async spentExact(metric: string): Promise<Rational> {
    return this.storage.withLock(LEDGER_KEY, () => this.spentIn(this.load(), metric, this.currentPeriod()));
  }

  /** Epsilon `metric` may still spend in the current period. */
  async remaining(metric: string): Promise<number> {
    return this.budgetExact.sub(await this.spentExact(metric)).toNumber();
  }

  /** Charged (non-memoized) reports of `metric` in the current period. */
  async charges(metric: string): Promise<number> {
    return this.storage.withLock(LEDGER_KEY, () => this.load().spend[metric]?.[this.currentPeriod()]?.[1] ?? 0);
  }
}
