"""A registry says which client release a metric needs (``min_client_version``, issue 39): the device configuration
carries it, and a client of an older release refuses the metric, naming the release to upgrade to, with nothing
charged and nothing sent; the metrics that need no newer client are reported as before."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from cms_core.errors import ClientTooOldError
from cms_core.version import __version__, release_tuple, too_old_for
from producer.ledger import PrivacyLedger
from producer.reporter import DeviceReporter
from registry import load_registry
from registry.device import device_config
from registry.errors import RegistryValidationError

from .test_reporter import FakeProducer

NEXT = f"{release_tuple(__version__)[0]}.{release_tuple(__version__)[1] + 1}.0"


def registry_file(tmp_path, needs: str | None, extra: str = ""):
    needs_line = f'    min_client_version: "{needs}"\n' if needs is not None else ""
    path = tmp_path / "registry.yaml"
    path.write_text(textwrap.dedent("""\
        metrics:
          - name: screen
            description: A screen
            owner: you@example.com
            categories: [home, feed]
            epsilon: 1
        """) + "  - name: newer\n" + textwrap.indent(textwrap.dedent("""\
            description: A metric only newer clients may report
            owner: you@example.com
            categories: [a, b]
            epsilon: 1
            """), "    ") + needs_line + extra, encoding="utf-8")
    return path


def test_a_metric_needing_a_newer_client_is_refused_naming_the_release_and_nothing_is_charged(tmp_path):
    registry = load_registry(registry_file(tmp_path, NEXT))
    fake, ledger = FakeProducer(), PrivacyLedger(tmp_path / "ledger.db", budget=100.0)

    async def go():
        async with DeviceReporter(registry, bootstrap_servers="fake:9092", topic="t", device_key=b"d", ledger=ledger,
                                  producer_factory=fake) as reporter:
            with pytest.raises(ClientTooOldError) as refused:
                await reporter.report("newer", "a")
            await reporter.report("screen", "home")  # a metric that needs no newer client: reported
        return refused.value

    refusal = asyncio.run(go())
    assert str(refusal) == (f"metric 'newer' needs an ocms client of release {NEXT} or later; this client is "
                            f"{__version__}: upgrade it to {NEXT} or later")
    assert ledger.spent("newer") == 0.0 and len(fake.delivered) == 1


@pytest.mark.parametrize("needs", [__version__, "0.1.0", None])
def test_a_metric_this_client_is_new_enough_for_is_reported(tmp_path, needs):
    registry = load_registry(registry_file(tmp_path, needs))
    fake = FakeProducer()

    async def go():
        async with DeviceReporter(registry, bootstrap_servers="fake:9092", topic="t", device_key=b"d",
                                  producer_factory=fake) as reporter:
            await reporter.report("newer", "b")

    asyncio.run(go())
    assert len(fake.delivered) == 1


def test_the_device_configuration_carries_it_only_where_the_registry_gives_it(tmp_path):
    config = device_config(load_registry(registry_file(tmp_path, NEXT)))
    assert config["format"] == 1
    by_name = {m["name"]: m for m in config["metrics"]}
    assert by_name["newer"]["min_client_version"] == NEXT and "min_client_version" not in by_name["screen"]


@pytest.mark.parametrize("bad", ["0.3", "v0.3.0", "0.03.0", "", "0.3.0-rc1"])
def test_a_bad_release_in_the_registry_is_a_clear_error(tmp_path, bad):
    with pytest.raises(RegistryValidationError, match="min_client_version.*must be a release X.Y.Z"):
        load_registry(registry_file(tmp_path, bad))
    path = registry_file(tmp_path, None, "    min_client_version: 3\n")
    with pytest.raises(RegistryValidationError, match="must be a release X.Y.Z"):
        load_registry(path)


def test_releases_compare_as_numbers():
    assert too_old_for("0.10.0", "m", client="0.9.9") is not None
    assert too_old_for("0.9.9", "m", client="0.10.0") is None
    assert too_old_for(None, "m") is None
