// The browser bundles (`npm run build` after tsc): one ES module for <script type="module"> users.
//   dist/ocms-client.min.js            everything, @noble/hashes included
//   dist/ocms-client.nohash.min.js     the same with @noble/hashes left external (to measure this package alone)
import { build } from "esbuild";

const common = { entryPoints: ["src/index.ts"], bundle: true, format: "esm", minify: true, target: ["es2022"],
                 platform: "browser", legalComments: "none", logLevel: "warning" };
await build({ ...common, outfile: "dist/ocms-client.min.js" });
await build({ ...common, outfile: "dist/ocms-client.nohash.min.js", external: ["@noble/hashes", "@noble/hashes/*"] });
