/**
 * Node-only storage (`import { FileStorage } from "ocms-client/node"`): the ledger and the offline
 * queue in one JSON file, as durable as producer/ledger.py's SQLite file:
 *
 * - every write goes to `FILE.tmp-PID`, is fsynced, renamed over FILE, and the directory fsynced;
 * - the file is created with mode 0600 (it holds the spend, the memo key and memoized reports);
 * - `withLock` holds `FILE.lock`, created with O_EXCL (a stale lock of a dead process is taken over),
 *   so processes sharing the file serialize their charges and never both spend the last of a budget.
 */

import * as fs from "node:fs";
import * as path from "node:path";

import { StorageError } from "./errors.js";
import { ProcessLocks, Storage } from "./storage.js";

const LOCK_TIMEOUT_MS = 10_000;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

function sleepSync(ms: number): void {
  Atomics.wait(sleeper, 0, 0, ms);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

export class FileStorage implements Storage {
  readonly where: string;
  private readonly lockPath: string;
  private readonly locks = new ProcessLocks();
  private held = 0;

  constructor(readonly file: string) {
    this.file = path.resolve(file);
    this.where = `file ${this.file}`;
    this.lockPath = this.file + ".lock";
    const dir = path.dirname(this.file);
    if (!fs.existsSync(dir)) throw new StorageError(`${this.where}: the directory ${dir} does not exist`);
  }

  private readAll(): Record<string, string> {
    let text: string;
    try {
      text = fs.readFileSync(this.file, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return {};
      throw new StorageError(`${this.where}: cannot read: ${(err as Error).message}`);
    }
    try {
      const doc = JSON.parse(text);
      if (typeof doc !== "object" || doc === null || Array.isArray(doc)) throw new Error("not a JSON object");
      return doc;
    } catch (err) {
      throw new StorageError(`${this.where}: not an ocms-client state file (${(err as Error).message}); refusing to overwrite it`);
    }
  }

  read(key: string): string | null {
    const value = this.readAll()[key];
    return typeof value === "string" ? value : null;
  }

  write(key: string, value: string): void {
    const doc = this.readAll();
    doc[key] = value;
    const tmp = `${this.file}.tmp-${process.pid}`;
    try {
      const fd = fs.openSync(tmp, "w", 0o600);
      try {
        fs.writeSync(fd, JSON.stringify(doc));
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      fs.renameSync(tmp, this.file);
      const dir = fs.openSync(path.dirname(this.file), "r");
      try {
        fs.fsyncSync(dir);
      } finally {
        fs.closeSync(dir);
      }
    } catch (err) {
      try { fs.unlinkSync(tmp); } catch { /* already gone */ }
      throw new StorageError(`${this.where}: cannot write: ${(err as Error).message}`);
    }
  }

  withLock<T>(_key: string, fn: () => Promise<T> | T): Promise<T> {
    // One lock for the whole file (every key lives in it); re-entrant within this process.
    return this.locks.run("file", async () => {
      this.acquire();
      try {
        return await fn();
      } finally {
        this.release();
      }
    });
  }

  private acquire(): void {
    if (this.held++ > 0) return;
    const deadline = Date.now() + LOCK_TIMEOUT_MS;
    for (;;) {
      try {
        const fd = fs.openSync(this.lockPath, "wx", 0o600);
        fs.writeSync(fd, String(process.pid));
        fs.closeSync(fd);
        return;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") {
          this.held--;
          throw new StorageError(`${this.where}: cannot create the lock ${this.lockPath}: ${(err as Error).message}`);
        }
      }
      let owner = NaN;
      try {
        owner = Number(fs.readFileSync(this.lockPath, "utf8"));
      } catch { /* released meanwhile */ }
      if (Number.isInteger(owner) && owner > 0 && !alive(owner)) {
        try { fs.unlinkSync(this.lockPath); } catch { /* someone else took it over */ }
        continue;
      }
      if (Date.now() > deadline) {
        this.held--;
        throw new StorageError(`${this.where}: the lock ${this.lockPath} is held by process ${owner} for more than ${LOCK_TIMEOUT_MS / 1000} s`);
      }
      sleepSync(5);
    }
  }

  private release(): void {
    if (--this.held > 0) return;
    try {
      fs.unlinkSync(this.lockPath);
    } catch { /* nothing to release */ }
  }
}

export { MemoryStorage } from "./storage.js";
