/**
 * This client's release: the project version (cms_core/version.py; docs/compatibility.md says what it works
 * with). package.json states the same number; tests/test_versions.py checks that they agree.
 */
export const VERSION = "0.2.0";
