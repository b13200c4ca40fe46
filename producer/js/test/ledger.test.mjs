// The ledger: exact accounting, refusal beyond the budget, periods, memoization, durable file storage
// shared by processes.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, statSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";

import { DeviceConfig, MemoryStorage, OcmsClient, PrivacyBudgetError, PrivacyLedger, Rational, hex } from "../dist/index.js";
import { FileStorage } from "../dist/node.js";
import { VECTORS } from "./support.mjs";

const config = new DeviceConfig(JSON.parse(readFileSync(`${VECTORS}/privatize_v1.json`, "utf8")).device_config);

function tempDir(t) {
  const dir = mkdtempSync(path.join(tmpdir(), "ocms-js-ledger-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test("epsilons add up exactly: ten charges of 0.1 reach a budget of 1.0, the eleventh is refused", async () => {
  const ledger = new PrivacyLedger(new MemoryStorage(), { budget: 1.0 });
  for (let i = 0; i < 10; i++) await ledger.charge("m", 0.1);
  assert.equal((await ledger.spentExact("m")).toString(), "1/1");
  await assert.rejects(ledger.charge("m", 0.1), (err) => err instanceof PrivacyBudgetError
    && /privacy budget exhausted for metric "m" in period \d+ \[.*Z \.\. .*Z\): spent 1, requested 0.1, budget 1 \(remaining 0\)/.test(err.message));
  assert.equal(await ledger.charges("m"), 10);
  assert.equal(await ledger.spent("other"), 0, "metrics are accounted apart");
});

test("rationals of the shortest decimal spelling", () => {
  assert.equal(Rational.fromNumber(0.1, "x").toString(), "1/10");
  assert.equal(Rational.fromNumber(1e-7, "x").toString(), "1/10000000");
  assert.equal(Rational.fromNumber(2.5e21, "x").toString(), "2500000000000000000000/1");
  assert.throws(() => Rational.fromNumber(NaN, "budget"), /budget NaN: must be a finite number > 0/);
});

test("a new period starts a fresh budget; the period length is fixed for a stored ledger", async () => {
  let now = 1_000_000_000_000;
  const storage = new MemoryStorage();
  const ledger = new PrivacyLedger(storage, { budget: 2, periodSeconds: 3600, clock: () => now });
  await ledger.charge("m", 2);
  await assert.rejects(ledger.charge("m", 1), PrivacyBudgetError);
  now += 3600 * 1000;
  await ledger.charge("m", 2);
  await assert.rejects(new PrivacyLedger(storage, { budget: 2, periodSeconds: 60 }).charge("m", 1), /created with periodSeconds 3600/);
});

test("memoization: a repeated value in a period re-sends the same bytes and charges nothing", async () => {
  const client = new OcmsClient(config, { budget: 4, memoize: true, storage: new MemoryStorage() });
  const first = await client.report("cat_small", "home");
  const again = await client.report("cat_small", "home");
  const other = await client.report("cat_small", "maps");
  assert.equal(first.memoized, false);
  assert.equal(again.memoized, true);
  assert.equal(hex(again.message), hex(first.message));
  assert.equal(again.epsilonCharged, 0);
  assert.equal(other.memoized, false);
  assert.equal(await client.ledger.spent("cat_small"), 4);
  // discovery: the repeat keeps the first report's level
  const d1 = await client.report("words_disc", "zebra");
  const d2 = await client.report("words_disc", "zebra");
  assert.equal(d2.memoized, true);
  assert.equal(d2.level, d1.level);
  assert.equal(hex(d2.message), hex(d1.message));
});

test("file storage: mode 0600, survives a new client, refuses over budget across instances", async (t) => {
  const file = path.join(tempDir(t), "state.json");
  const a = new OcmsClient(config, { budget: 5, storage: new FileStorage(file) });
  await a.report("cat_small", "home");
  await a.report("cat_small", "home");
  assert.equal(statSync(file).mode & 0o777, 0o600);
  const b = new OcmsClient(config, { budget: 5, storage: new FileStorage(file) });
  await assert.rejects(b.report("cat_small", "search"), PrivacyBudgetError);
  assert.equal(await b.ledger.spent("cat_small"), 4);
  assert.ok(!existsSync(file + ".lock"), "the lock is released");
  const text = readFileSync(file, "utf8");
  assert.ok(!text.includes("home"), "the value never appears in the ledger");
});

test("file storage: a damaged file is not overwritten", async (t) => {
  const file = path.join(tempDir(t), "state.json");
  writeFileSync(file, "not json");
  const ledger = new PrivacyLedger(new FileStorage(file), { budget: 1 });
  await assert.rejects(ledger.charge("m", 0.5), /not an ocms-client state file/);
  assert.equal(readFileSync(file, "utf8"), "not json");
});

test("file storage: processes sharing the file never both spend the last of the budget", async (t) => {
  const file = path.join(tempDir(t), "state.json");
  const script = `
    import { PrivacyLedger } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
    import { FileStorage } from ${JSON.stringify(new URL("../dist/node.js", import.meta.url).href)};
    const ledger = new PrivacyLedger(new FileStorage(${JSON.stringify(file)}), { budget: 30 });
    let ok = 0;
    for (let i = 0; i < 40; i++) { try { await ledger.charge("m", 1); ok++; } catch (e) { if (e.name !== "PrivacyBudgetError") throw e; } }
    console.log(ok);`;
  const run = () => new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", script]);
    let out = "", err = "";
    child.stdout.on("data", (d) => { out += d; });
    child.stderr.on("data", (d) => { err += d; });
    child.on("exit", (code) => (code === 0 ? resolve(Number(out)) : reject(new Error(err))));
  });
  const granted = await Promise.all([run(), run(), run()]);
  assert.equal(granted.reduce((a, b) => a + b, 0), 30, `granted ${granted}`);
  assert.equal(await new PrivacyLedger(new FileStorage(file), { budget: 30 }).spent("m"), 30);
});
