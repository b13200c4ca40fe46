#!/usr/bin/env node
// ocms-report: privatize one value per input line with the CSPRNG and write a capture or upload it.
//
//   node producer/js/bin/ocms-report.mjs --config DEVICE_CONFIG.json --metric NAME (--out CAPTURE | --collector URL) < values.jsonl
//
// Input: one JSON string per line (a category name, an integer's decimal digits, a string). Output: a capture
// (4-byte big-endian length + wire-v1 message, as `ocms simulate --out`) holding one report per input line,
// in input order; or the same reports uploaded to the collector (Idempotency-Key per upload, retries).
// Every line is checked before the first report is made: a bad line is one error line naming it, exit 2,
// and nothing is written or sent. With --ledger FILE --budget EPS each report is charged to a ledger
// (and the upload queue kept) in FILE; a report beyond the budget stops the run (exit 1).

import { readFileSync, renameSync, writeFileSync, unlinkSync } from "node:fs";
import { parseArgs } from "node:util";

const PROG = "ocms-report";
const USAGE = `usage: ${PROG} --config DEVICE_CONFIG.json --metric NAME (--out CAPTURE | --collector URL)
                   [--token TOKEN] [--ledger FILE --budget EPS [--period-seconds S] [--memoize]]
                   [--max-upload-reports N] [--timeout SECONDS] < values.jsonl`;

function fail(message, code = 2) {
  process.stderr.write(`${PROG}: error: ${message}\n`);
  process.exit(code);
}

async function main() {
  let args;
  try {
    ({ values: args } = parseArgs({
      options: {
        config: { type: "string" }, metric: { type: "string" }, out: { type: "string" }, collector: { type: "string" },
        token: { type: "string" }, ledger: { type: "string" }, budget: { type: "string" },
        "period-seconds": { type: "string" }, memoize: { type: "boolean" }, "max-upload-reports": { type: "string" },
        timeout: { type: "string" }, help: { type: "boolean", short: "h" },
      },
      strict: true, allowPositionals: false,
    }));
  } catch (err) {
    fail(`${err.message}\n${USAGE}`);
  }
  if (args.help) {
    process.stdout.write(USAGE + "\n");
    return 0;
  }
  if (!args.config) fail(`--config is required\n${USAGE}`);
  if (!args.metric) fail(`--metric is required\n${USAGE}`);
  if (Boolean(args.out) === Boolean(args.collector)) fail(`give exactly one of --out CAPTURE and --collector URL\n${USAGE}`);
  if (args.ledger && args.budget === undefined) fail("--ledger needs --budget EPS (the most epsilon per metric per period)");
  if (!args.ledger && (args.budget !== undefined || args.memoize || args["period-seconds"] !== undefined)) {
    fail("--budget, --period-seconds and --memoize need --ledger FILE");
  }
  const number = (flag, text, integer) => {
    const v = Number(text);
    if (text === undefined) return undefined;
    if (!Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v))) fail(`${flag} ${text}: must be a ${integer ? "positive integer" : "number > 0"}`);
    return v;
  };
  const budget = number("--budget", args.budget, false);
  const periodSeconds = number("--period-seconds", args["period-seconds"], true);
  const maxUploadReports = number("--max-upload-reports", args["max-upload-reports"], true) ?? 1000;
  const timeoutS = number("--timeout", args.timeout, false) ?? 90; // above a shuffling collector's default wait, 60 + 2 x 5 s
  if (args.collector && !/^https?:\/\/[^/]/.test(args.collector)) fail(`--collector ${args.collector}: must be an http:// or https:// URL`);

  const lib = await import("../dist/index.js").catch((err) => fail(`the package is not built (run npm ci in producer/js): ${err.message}`, 1));
  let config;
  try {
    config = new lib.DeviceConfig(readFileSync(args.config, "utf8"));
  } catch (err) {
    fail(`--config ${args.config}: ${err.code === "ENOENT" ? "no such file" : err.message}`);
  }
  let version;
  try {
    version = config.metric(args.metric);
  } catch (err) {
    fail(`--metric ${args.metric}: ${err.message}`);
  }

  // Check every line before the first report is made: a bad input writes and sends nothing.
  const text = readFileSync(0, "utf8");
  const lines = text.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const values = lines.map((line, i) => {
    const where = `line ${i + 1}`;
    let value;
    try {
      value = JSON.parse(line);
    } catch {
      fail(`${where}: not JSON: ${JSON.stringify(line.length > 60 ? line.slice(0, 57) + "..." : line)} (one JSON string per line)`);
    }
    if (typeof value !== "string") {
      fail(`${where}: ${JSON.stringify(value)?.slice(0, 60)} is not a JSON string (values travel as strings; integers as decimal digits, "42")`);
    }
    if (version.numeric !== null) {
      // A numeric metric (issue 40) takes a decimal number in the string ("12.5", "1e3", "-Infinity"), as ocms-report-c.
      const number = /^[+-]?(Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)$/.test(value) ? Number(value) : NaN;
      if (Number.isNaN(number)) fail(`${where}: ${JSON.stringify(value).slice(0, 60)} is not a number (metric ${JSON.stringify(version.name)} takes a decimal number)`);
      value = number;
    }
    try {
      version.encode(value);
    } catch (err) {
      fail(`${where}: ${err.message}`);
    }
    return value;
  });

  let ledger = null;
  let storage = new lib.MemoryStorage();
  if (args.ledger) {
    const { FileStorage } = await import("../dist/node.js");
    try {
      storage = new FileStorage(args.ledger);
      ledger = new lib.PrivacyLedger(storage, { budget, periodSeconds });
    } catch (err) {
      fail(`--ledger ${args.ledger}: ${err.message}`);
    }
  }
  const errors = [];
  const uploader = args.collector ? new lib.Uploader({ collector: args.collector, token: args.token, storage, maxUploadReports,
                                                      maxLatencyMs: 50, maxQueuedReports: Math.max(10_000, values.length),
                                                      onError: (err) => errors.push(err), pageEvents: false }) : null;
  const messages = [];
  for (let i = 0; i < values.length; i++) {
    let report = lib.privatize(config, args.metric, values[i]);
    let message = report.message;
    if (ledger) {
      try {
        const key = args.memoize ? lib.valueKey(version, values[i]) : null;
        message = (await ledger.chargeOrReuse(version.name, version.epsilon, key, message)).report;
      } catch (err) {
        if (!(err instanceof lib.PrivacyBudgetError)) throw err;
        process.stderr.write(`${PROG}: error: line ${i + 1}: ${err.message}; ${i} reports made\n`);
        if (uploader) await uploader.flush();
        writeCapture(messages);
        return 1;
      }
    }
    messages.push(message);
    if (uploader) await uploader.enqueue(lib.hex(message.subarray(4, 12)), message);
  }
  writeCapture(messages);
  if (uploader) {
    const timer = setTimeout(async () => {
      const left = await uploader.queued();
      process.stderr.write(`${PROG}: error: ${left} reports not delivered within ${timeoutS} s (collector ${args.collector} unreachable?)`
        + (args.ledger ? `; they stay queued in ${args.ledger}` : "") + "\n");
      process.exit(1);
    }, timeoutS * 1000);
    await uploader.flush();
    clearTimeout(timer);
    uploader.close();
    for (const err of errors) process.stderr.write(`${PROG}: error: ${err.message}\n`);
    if (errors.length) return 1;
    const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
    process.stderr.write(`${PROG}: uploaded ${plural(messages.length, "report")} of ${version.label} to ${args.collector} `
      + `(${plural(uploader.stats.uploads, "upload")}, ${plural(uploader.stats.retries, "retry", "retries")})\n`);
  }
  return 0;

  function writeCapture(msgs) {
    if (!args.out) return;
    const records = msgs.map((m) => lib.captureRecord(m));
    const tmp = `${args.out}.tmp-${process.pid}`;
    try {
      writeFileSync(tmp, Buffer.concat(records));
      renameSync(tmp, args.out);
    } catch (err) {
      try { unlinkSync(tmp); } catch { /* not written */ }
      fail(`--out ${args.out}: ${err.message}`, 1);
    }
  }
}

main().then((code) => process.exit(code), (err) => {
  process.stderr.write(`${PROG}: error: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});
