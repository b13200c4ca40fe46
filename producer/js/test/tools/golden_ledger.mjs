// The JS ledger's golden sample (tests/golden/formats.py; docs/compatibility.md):
//   node test/tools/golden_ledger.mjs write       prints the stored document after two charges on "golden" (1, 0.5)
//   node test/tools/golden_ledger.mjs read FILE   prints {"spent", "charges"} of "golden" read from a stored document
// at a fixed clock, so that a document written by one release is read by a later release's ledger.
import { readFileSync } from "node:fs";

import { MemoryStorage, PrivacyLedger } from "../../dist/index.js";

const KEY = "ocms-ledger";
const CLOCK_MS = 1_700_000_000_000;
const [mode, file] = process.argv.slice(2);
const storage = new MemoryStorage();
if (mode === "read") storage.write(KEY, readFileSync(file, "utf8"));
const ledger = new PrivacyLedger(storage, { budget: 4, clock: () => CLOCK_MS });
if (mode === "write") {
  await ledger.charge("golden", 1);
  await ledger.charge("golden", 0.5);
  process.stdout.write(storage.read(KEY) + "\n");
} else if (mode === "read") {
  const spent = await ledger.spentExact("golden");
  console.log(JSON.stringify({ spent: spent.toString(), charges: await ledger.charges("golden") }));
} else {
  console.error("usage: golden_ledger.mjs write | read FILE");
  process.exit(2);
}
