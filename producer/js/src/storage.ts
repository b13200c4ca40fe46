/**
 * Where the ledger and the offline queue keep their state: one JSON document per key, read and
 * written inside a lock, so that a charge is a read-check-write that two tabs (or two processes)
 * never interleave.
 *
 * - MemoryStorage: a Map, for tests and short-lived Node processes (nothing survives the process).
 * - LocalStorage (browsers): window.localStorage, synchronous and durable once setItem returns;
 *   the lock is the Web Locks API (navigator.locks) when present, so tabs of one origin serialize.
 * - FileStorage (Node, storage/file.ts): one JSON file per key, written to a temporary file, fsynced
 *   and renamed over the old one (mode 0600); the lock is an O_EXCL lock file, so processes serialize.
 */

import { StorageError } from "./errors.js";

export interface Storage {
  /** The stored document, or null. */
  read(key: string): string | null;
  /** Replace the document (durable when it returns). */
  write(key: string, value: string): void;
  /** Run `fn` holding the lock of `key` (other holders wait). */
  withLock<T>(key: string, fn: () => Promise<T> | T): Promise<T>;
  /** A short description for error messages ("localStorage", "file /var/...", "memory"). */
  readonly where: string;
}

/** In-process lock: a promise chain per key. */
export class ProcessLocks {
  private readonly tails = new Map<string, Promise<unknown>>();

  async run<T>(key: string, fn: () => Promise<T> | T): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => { release = resolve; });
    const tail = previous.then(() => mine);
    this.tails.set(key, tail);
    try {
      await previous;
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}

export class MemoryStorage implements Storage {
  readonly where = "memory";
  private readonly docs = new Map<string, string>();
  private readonly locks = new ProcessLocks();

  read(key: string): string | null {
    return this.docs.get(key) ?? null;
  }

  write(key: string, value: string): void {
    this.docs.set(key, value);
  }

  withLock<T>(key: string, fn: () => Promise<T> | T): Promise<T> {
    return this.locks.run(key, fn);
  }
}

interface WebLocks {
  request<T>(name: string, callback: () => Promise<T> | T): Promise<T>;
}

interface WebStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

/** window.localStorage with navigator.locks (one origin's tabs serialize their charges). */
export class LocalStorage implements Storage {
  readonly where = "localStorage";
  private readonly store: WebStorage;
  private readonly webLocks: WebLocks | null;
  private readonly locks = new ProcessLocks();

  constructor(store?: WebStorage) {
    const g = globalThis as { localStorage?: WebStorage; navigator?: { locks?: WebLocks } };
    const chosen = store ?? g.localStorage;
    if (!chosen) throw new StorageError("localStorage is not available here (use MemoryStorage, or FileStorage in Node)");
    this.store = chosen;
    this.webLocks = g.navigator?.locks ?? null;
  }

  read(key: string): string | null {
    return this.store.getItem(key);
  }

  write(key: string, value: string): void {
    try {
      this.store.setItem(key, value);
    } catch (err) {
      throw new StorageError(`localStorage refused to store ${key} (${value.length} characters): ${(err as Error).message}`);
    }
  }

  withLock<T>(key: string, fn: () => Promise<T> | T): Promise<T> {
    // Within a tab the promise chain orders callers; across tabs the Web Lock does.
    return this.locks.run(key, () => (this.webLocks ? this.webLocks.request(key, fn) : fn()));
  }
}
