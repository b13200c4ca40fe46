// The client's release (issue 39): the exported VERSION is package.json's version (tests/test_versions.py checks
// that both are the project's, cms_core/version.py).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import * as api from "../dist/index.js";

const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));

test("VERSION is package.json's version, in semantic versioning", () => {
  assert.equal(api.VERSION, pkg.version);
  assert.match(api.VERSION, /^\d+\.\d+\.\d+$/);
});
