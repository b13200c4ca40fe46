// The browser bundles (`npm run build` after tsc): ES modules for <script type="module"> users.
//   dist/ocms-client.min.js                 the full entry point (src/index.ts), @noble/hashes included
//   dist/ocms-client.nohash.min.js          the same with @noble/hashes left external (to measure this package alone)
//   dist/ocms-client.core.min.js            the core entry point (src/core.ts: no numeric metrics), @noble/hashes included
//   dist/ocms-client.core.nohash.min.js     the same with @noble/hashes left external
import { build } from "esbuild";

const common = { bundle: true, format: "esm", minify: true, target: ["es2022"], platform: "browser", legalComments: "none",
                 logLevel: "warning" };
const noHash = { external: ["@noble/hashes", "@noble/hashes/*"] };
for (const [entry, name] of [["src/index.ts", "ocms-client"], ["src/core.ts", "ocms-client.core"]]) {
  await build({ ...common, entryPoints: [entry], outfile: `dist/${name}.min.js` });
  await build({ ...common, ...noHash, entryPoints: [entry], outfile: `dist/${name}.nohash.min.js` });
}
