// node bench/run_node.mjs CONFIG.json CASES.json SECONDS: privatize + encode reports/s of the built package
// (dist/index.js, the public API) per case, as JSON on stdout (benchmarks/bench_js_client.py).
import { readFileSync } from "node:fs";

import * as api from "../dist/index.js";
import { runBench } from "./privatize_bench.mjs";

const [config, cases, seconds] = process.argv.slice(2);
const results = runBench(api, JSON.parse(readFileSync(config, "utf8")), JSON.parse(readFileSync(cases, "utf8")), Number(seconds));
console.log(JSON.stringify(results));
