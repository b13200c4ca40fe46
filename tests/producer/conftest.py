"""The JavaScript client's build, shared by test_js_client.py and test_js_browser.py."""

from __future__ import annotations

import os

import pytest

from producer.jsclient import NodeMissingError, ensure_built

REQUIRE_ENV = "OCMS_REQUIRE_SYSTEM_TOOLS"


@pytest.fixture(scope="session")
def js_client():
    """producer/js installed (npm ci from package-lock.json) and built (dist/); node and npm come from
    scripts/ensure_system_packages.sh, which `make test` runs with OCMS_REQUIRE_SYSTEM_TOOLS=1: then a
    missing node fails these tests, otherwise it skips them."""
    try:
        return ensure_built()
    except NodeMissingError as exc:
        if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
            pytest.fail(f"{exc} and {REQUIRE_ENV} is set")
        pytest.skip(f"{exc}; set {REQUIRE_ENV}=1 to fail instead")
