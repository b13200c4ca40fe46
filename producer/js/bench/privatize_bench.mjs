// privatize + encode throughput of the public API, shared by Node and the browser page of
// benchmarks/bench_js_client.py: runBench(api, configDoc, cases, seconds) -> [{metric, label, reports, seconds, per_s}].
// Each case reports a rotating list of values (so string fingerprints are computed every time).
export function runBench(api, configDoc, cases, seconds) {
  const config = new api.DeviceConfig(configDoc);
  const now = typeof performance !== "undefined" ? () => performance.now() : () => Date.now();
  const out = [];
  for (const { metric, label, values } of cases) {
    let sink = 0;
    const once = (n) => {
      for (let i = 0; i < n; i++) sink ^= api.privatize(config, metric, values[i % values.length]).message[16];
    };
    once(20_000); // warm up (JIT)
    let n = 0;
    const start = now();
    let elapsed = 0;
    while (elapsed < seconds * 1000) {
      once(5_000);
      n += 5_000;
      elapsed = now() - start;
    }
    out.push({ metric, label, reports: n, seconds: elapsed / 1000, per_s: n / (elapsed / 1000), sink });
  }
  return out;
}
