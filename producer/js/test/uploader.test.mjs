// The upload queue against a scripted fetch: Idempotency-Key reused by retries, Retry-After honoured with
// jitter, exponential backoff, permanent faults dropped, the queue bounded and surviving a restart.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { DeviceConfig, MemoryStorage, OcmsClient, QueueFullError, Uploader, decodeMessage, hex, fromHex } from "../dist/index.js";
import { VECTORS } from "./support.mjs";

const config = new DeviceConfig(JSON.parse(readFileSync(`${VECTORS}/privatize_v1.json`, "utf8")).device_config);
const lookup = (fp) => config.byFingerprint.get(fp)?.params;

/** A fetch that answers from a script of {status, headers} (or "network"), recording every request. */
function scriptedFetch(script) {
  const requests = [];
  const fetch = async (url, init) => {
    requests.push({ url, at: Date.now(), headers: { ...init.headers }, body: new Uint8Array(init.body), keepalive: init.keepalive });
    const step = script.length > 1 ? script.shift() : script[0];
    if (step === "network") throw new TypeError("fetch failed");
    return new Response(JSON.stringify({ status: step.status, reason: step.reason ?? "x" }),
                        { status: step.status, headers: step.headers ?? {} });
  };
  return { fetch, requests };
}

function uploader(storage, fetch, extra = {}) {
  return new Uploader({ collector: "http://collector.test", storage, fetch, maxLatencyMs: 0, baseBackoffMs: 20,
                        maxBackoffMs: 2000, pageEvents: false, ...extra });
}

test("a retried upload carries the same Idempotency-Key and body; Retry-After is honoured", async () => {
  const { fetch, requests } = scriptedFetch([{ status: 503, headers: { "Retry-After": "0.3" } }, "network", { status: 202 }]);
  const client = new OcmsClient(config, { budget: 100, storage: new MemoryStorage(), collector: "http://collector.test",
                                          upload: { fetch, maxLatencyMs: 0, baseBackoffMs: 20, pageEvents: false } });
  const r = await client.report("cat_small", "home");
  await client.flush();
  assert.equal(requests.length, 3);
  const keys = new Set(requests.map((q) => q.headers["Idempotency-Key"]));
  assert.equal(keys.size, 1);
  assert.match([...keys][0], /^[A-Za-z0-9_-]{32}$/);
  assert.ok(requests.every((q) => hex(q.body) === hex(r.message)));
  assert.equal(requests[0].url, "http://collector.test/v1/reports");
  assert.equal(requests[0].headers["Content-Type"], "application/vnd.ocms.wire-v1");
  const waited = requests[1].at - requests[0].at;
  assert.ok(waited >= 290 && waited <= 300 * 1.25 + 150, `Retry-After 0.3 s: waited ${waited} ms`);
  assert.equal(client.uploader.stats.retries, 2);
  client.close();
});

test("backoff grows exponentially with jitter in [0.5, 1] of the step, capped", async () => {
  const { fetch, requests } = scriptedFetch(["network", "network", "network", "network", { status: 202 }]);
  const up = uploader(new MemoryStorage(), fetch, { baseBackoffMs: 40, maxBackoffMs: 100 });
  await up.enqueue(config.metric("cat_small").params.fingerprintHex, fromHex("4f430101c7e96b96dc5b50bd00000001171603"));
  await up.flush();
  const gaps = requests.slice(1).map((q, i) => q.at - requests[i].at);
  const steps = [40, 80, 100, 100];
  gaps.forEach((g, i) => assert.ok(g >= steps[i] * 0.5 - 5 && g <= steps[i] + 60, `gap ${i}: ${g} ms for a step of ${steps[i]}`));
  up.close();
});

test("reports of one parameter set share uploads (frames of at most maxUploadReports); levels never mix", async () => {
  const { fetch, requests } = scriptedFetch([{ status: 202 }]);
  const client = new OcmsClient(config, { budget: 1000, storage: new MemoryStorage(), collector: "http://collector.test",
                                          upload: { fetch, maxLatencyMs: 50, maxUploadReports: 4, pageEvents: false } });
  const made = [];
  for (let i = 0; i < 10; i++) made.push(await client.report("cat_small", "home"));
  for (let i = 0; i < 6; i++) made.push(await client.report("words_disc", "abc"));
  await client.flush();
  const sent = requests.flatMap((q) => {
    const { params, records } = decodeMessage(q.body, lookup);
    assert.ok(records.length <= 4);
    return records.map(() => params.fingerprintHex);
  });
  assert.equal(sent.length, 16, "every report sent once");
  const small = requests.filter((q) => hex(q.body.subarray(4, 12)) === config.metric("cat_small").params.fingerprintHex);
  assert.deepEqual(small.map((q) => decodeMessage(q.body, lookup).records.length), [4, 4, 2]);
  client.close();
});

test("a permanent refusal drops the upload and calls onError with the collector's reason", async () => {
  const errors = [];
  const { fetch } = scriptedFetch([{ status: 400, reason: "unknown_fingerprint" }]);
  const up = uploader(new MemoryStorage(), fetch, { onError: (e) => errors.push(e) });
  await up.enqueue("c7e96b96dc5b50bd", fromHex("4f430101c7e96b96dc5b50bd00000001171603"));
  await up.flush();
  assert.equal(errors.length, 1);
  assert.equal(errors[0].status, 400);
  assert.equal(errors[0].reason, "unknown_fingerprint");
  assert.equal(await up.queued(), 0);
  up.close();
});

test("the queue is bounded: a full queue refuses the report before anything is charged", async () => {
  const { fetch } = scriptedFetch(["network"]);
  const client = new OcmsClient(config, { budget: 100, storage: new MemoryStorage(), collector: "http://collector.test",
                                          upload: { fetch, maxQueuedReports: 3, maxLatencyMs: 0, baseBackoffMs: 10_000, pageEvents: false } });
  for (let i = 0; i < 3; i++) await client.report("cat_small", "home");
  await assert.rejects(client.report("cat_small", "home"), (err) => err instanceof QueueFullError && /nothing was charged/.test(err.message));
  assert.equal(await client.ledger.spent("cat_small"), 6);
  client.close();
});

test("the queue survives a restart: a new client on the same storage sends what is queued, with the same keys", async () => {
  const storage = new MemoryStorage();
  const down = scriptedFetch(["network"]);
  const first = new OcmsClient(config, { budget: 100, storage, collector: "http://collector.test",
                                         upload: { fetch: down.fetch, maxLatencyMs: 0, baseBackoffMs: 60_000, pageEvents: false } });
  for (let i = 0; i < 5; i++) await first.report("cat_small", "search");
  while (down.requests.length === 0) await new Promise((r) => setTimeout(r, 5));
  first.close();
  const keysTried = new Set(down.requests.map((q) => q.headers["Idempotency-Key"]));
  const up = scriptedFetch([{ status: 202, headers: { "Idempotent-Replayed": "true" } }, { status: 202 }]);
  const second = new OcmsClient(config, { budget: 100, storage, collector: "http://collector.test",
                                          upload: { fetch: up.fetch, maxLatencyMs: 0, pageEvents: false } });
  await second.flush();
  const n = up.requests.reduce((k, q) => k + decodeMessage(q.body, lookup).records.length, 0);
  assert.equal(n, 5);
  for (const key of keysTried) assert.ok(up.requests.some((q) => q.headers["Idempotency-Key"] === key), "a tried upload keeps its key");
  assert.equal(second.uploader.stats.replayed, 1);
  assert.equal(await second.ledger.spent("cat_small"), 10, "the ledger is shared with the queue's storage");
  second.close();
});

test("page hide sends the queue with fetch keepalive and the same headers (no sendBeacon)", async () => {
  const { fetch, requests } = scriptedFetch([{ status: 202 }]);
  const up = uploader(new MemoryStorage(), fetch, { maxLatencyMs: 60_000, token: "t0ken" });
  await up.enqueue("c7e96b96dc5b50bd", fromHex("4f430101c7e96b96dc5b50bd00000001171603"));
  up.sendOnHide();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(requests.length, 1);
  assert.equal(requests[0].keepalive, true);
  assert.equal(requests[0].headers.Authorization, "Bearer t0ken");
  assert.match(requests[0].headers["Idempotency-Key"], /^[A-Za-z0-9_-]{32}$/);
  assert.equal(await up.queued(), 0, "a 202 seen before the page went away removes the upload");
  up.close();
});
