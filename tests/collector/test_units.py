"""The collector's parts without a broker: settings, tokens, rate limits, idempotency, upload parsing,
and the device HTTP transport against a real aiohttp server that answers what the test scripts."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from cms_core import wire
from cms_core.errors import InvalidParameterError
from collector.guard import (AuthError, Authenticator, IdempotencyCache, KeyReusedError, RateLimiter, TokenBucket,
                             TokensFileError, body_digest, load_tokens)
from collector.settings import CollectorSettings
from collector.uploads import UploadParser, UploadRejected
from producer.reporter import DeliveryError, DeviceReporter, HttpTransport

from .harness import reports, single_messages


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# ------------------------------------------------------------------------------------ settings


def test_settings_read_the_environment_and_flags_win(registry_path):
    env = {"OCMS_REGISTRY": str(registry_path), "OCMS_BOOTSTRAP_SERVERS": "k:9092", "OCMS_COLLECTOR_PORT": "9000",
           "OCMS_COLLECTOR_RATE_LIMIT": "50", "OCMS_SOURCE_TOPIC": "t1"}
    s = CollectorSettings.build(env)
    assert (s.port, s.rate_limit, s.source_topic, s.bootstrap_servers) == (9000, 50.0, "t1", "k:9092")
    assert CollectorSettings.build(env, port="9001").port == 9001


@pytest.mark.parametrize("overrides, variable", [
    ({"port": "70000"}, "OCMS_COLLECTOR_PORT"),
    ({"frame_max_latency_ms": "0"}, "OCMS_COLLECTOR_FRAME_MAX_LATENCY_MS"),
    ({"rate_limit": "-1"}, "OCMS_COLLECTOR_RATE_LIMIT"),
    ({"rate_limit": "nan"}, "OCMS_COLLECTOR_RATE_LIMIT"),
    ({"source_topic": "bad topic"}, "OCMS_SOURCE_TOPIC"),
    ({"access_log": "maybe"}, "OCMS_COLLECTOR_ACCESS_LOG"),
    ({"kafka_idempotence": "sometimes"}, "OCMS_COLLECTOR_KAFKA_IDEMPOTENCE"),
    ({"max_queued_reports": "5"}, "OCMS_COLLECTOR_MAX_QUEUED_REPORTS"),
    ({"tokens_file": "/nonexistent"}, "OCMS_COLLECTOR_TOKENS_FILE"),
    ({"event_loop": "trio"}, "OCMS_COLLECTOR_EVENT_LOOP"),
    ({"shuffle_min_reports": "1"}, "OCMS_COLLECTOR_SHUFFLE_MIN_REPORTS"),  # a batch of one hides nothing
    ({"shuffle_min_reports": "-5"}, "OCMS_COLLECTOR_SHUFFLE_MIN_REPORTS"),
    ({"shuffle_min_reports": "20000000"}, "OCMS_COLLECTOR_SHUFFLE_MIN_REPORTS"),
    ({"shuffle_min_reports": "9500", "max_queued_reports": "10000"}, "OCMS_COLLECTOR_MAX_QUEUED_REPORTS"),  # + 1,000
    ({"shuffle_max_seconds": "5"}, "OCMS_COLLECTOR_SHUFFLE_MAX_SECONDS"),  # without --shuffle-min-reports
    ({"shuffle_min_reports": "100", "shuffle_max_seconds": "0"}, "OCMS_COLLECTOR_SHUFFLE_MAX_SECONDS"),
    ({"shuffle_min_reports": "100", "shuffle_max_seconds": "7200"}, "OCMS_COLLECTOR_SHUFFLE_MAX_SECONDS"),
])
def test_bad_settings_name_the_variable(registry_path, overrides, variable):
    from collector.settings import BY_NAME

    env = {"OCMS_REGISTRY": str(registry_path), "OCMS_BOOTSTRAP_SERVERS": "k:1",
           **{BY_NAME[name].env: value for name, value in overrides.items()}}
    with pytest.raises(InvalidParameterError) as info:
        CollectorSettings.build(env)
    assert info.value.name == variable


def test_a_bad_setting_is_named_as_the_user_gave_it(registry_path):
    """A flag's bad value names the flag, a variable's the variable (as `ocms worker` does); a
    required setting given neither way names both."""
    env = {"OCMS_REGISTRY": str(registry_path), "OCMS_BOOTSTRAP_SERVERS": "k:9092"}
    with pytest.raises(InvalidParameterError) as by_flag:
        CollectorSettings.build(env, port="eighty")
    assert by_flag.value.name == "--port"
    with pytest.raises(InvalidParameterError) as by_variable:
        CollectorSettings.build({**env, "OCMS_COLLECTOR_PORT": "eighty"})
    assert by_variable.value.name == "OCMS_COLLECTOR_PORT"
    with pytest.raises(InvalidParameterError) as neither:
        CollectorSettings.build({"OCMS_REGISTRY": str(registry_path)})
    assert neither.value.name == "--bootstrap-servers (or OCMS_BOOTSTRAP_SERVERS)"


@pytest.mark.parametrize("given, name, message", [
    ({"shuffle_min_reports": "1"}, "--shuffle-min-reports", "a batch of one report hides nothing: give 0 (off) or "
                                                           "at least 2 (e.g. 10000)"),
    ({"shuffle_min_reports": "20000000"}, "--shuffle-min-reports", "must be in [0, 10000000]"),
    ({"shuffle_max_seconds": "5"}, "--shuffle-max-seconds", "applies to shuffling: give --shuffle-min-reports N too"),
    ({"shuffle_min_reports": "100", "shuffle_max_seconds": "0"}, "--shuffle-max-seconds",
     "must be a finite number > 0"),
    ({"shuffle_min_reports": "100", "shuffle_max_seconds": "7200"}, "--shuffle-max-seconds",
     "must be at most 3600 (every upload of a batch waits for its answer until the batch is produced)"),
    ({"shuffle_min_reports": "9500", "max_queued_reports": "10000"}, "--max-queued-reports",
     "must be >= --shuffle-min-reports 9,500 + --max-upload-reports 1,000 (a batch is held in the queue until "
     "produced)"),
])
def test_the_shuffle_settings_say_what_to_fix(registry_path, given, name, message):
    """The --shuffle-* rows (collector/settings.py) keep the messages they had as hand-parsed flags."""
    env = {"OCMS_REGISTRY": str(registry_path), "OCMS_BOOTSTRAP_SERVERS": "k:1"}
    with pytest.raises(InvalidParameterError) as info:
        CollectorSettings.build(env, **given)
    assert info.value.name == name and message in str(info.value)
    on = CollectorSettings.build(env, shuffle_min_reports="10_000", shuffle_max_seconds="2.5")
    assert (on.shuffle_min_reports, on.shuffle_max_seconds) == (10_000, 2.5)
    assert (CollectorSettings.build(env).shuffle_min_reports, CollectorSettings.build(env).shuffle_max_seconds) == (0, 60)


def test_a_shuffle_bound_above_the_idempotency_key_bound_exits_2_naming_both_flags(registry_path, capsys,
                                                                                  monkeypatch):
    """A shuffled batch can hold --shuffle-min-reports uploads, each with a key remembered until the batch is
    answered: above --idempotency-max-keys, keys still waiting were silently forgotten (retries counted twice)."""
    import collector.cli
    from collector.cli import main

    async def started(settings, registry):
        raise AssertionError(f"started with --shuffle-min-reports {settings.shuffle_min_reports:,} and "
                             f"--idempotency-max-keys {settings.idempotency_max_keys:,}")

    monkeypatch.setattr(collector.cli, "_serve", started)  # what main() would serve, had the settings passed
    base = ["--registry", str(registry_path), "--bootstrap-servers", "k:1", "--max-queued-reports", "2000000"]
    with pytest.raises(SystemExit) as info:
        main([*base, "--shuffle-min-reports", "300000"])  # the default key bound is 200,000
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid --shuffle-min-reports=300000" in err and "--idempotency-max-keys" in err and "200,000" in err
    assert "raise --idempotency-max-keys to at least 300,000" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as info:
        main([*base, "--shuffle-min-reports", "5000", "--idempotency-max-keys", "4999"])
    assert info.value.code == 2 and "--idempotency-max-keys 4,999" in capsys.readouterr().err

    env = {"OCMS_REGISTRY": str(registry_path), "OCMS_BOOTSTRAP_SERVERS": "k:1"}
    defaults = CollectorSettings.build(env)
    assert defaults.shuffle_min_reports <= defaults.idempotency_max_keys
    for valid in ({"shuffle_min_reports": "300000", "idempotency_max_keys": "300000"},  # the bound itself
                  {"shuffle_min_reports": "10000"},  # the documented example's order, under the default key bound
                  {"shuffle_min_reports": "300000", "idempotency_window_seconds": "0"},  # retries not remembered
                  {"shuffle_min_reports": "300000", "idempotency_max_keys": "0"}):
        settings = CollectorSettings.build(env, max_queued_reports="2000000", **valid)
        assert settings.shuffle_min_reports == int(valid["shuffle_min_reports"])


def test_collector_settings_are_declared_once_and_documented_from_the_declarations():
    """Issue 26: flags, variables, defaults and the docs table come from collector/settings.py's rows (the
    worker's Setting machinery); the defaults were typed into help texts and docs by hand before."""
    import argparse
    from pathlib import Path

    from collector.cli import add_collector_parser
    from collector.settings import DOCS_MARKER, SETTINGS, docs_table
    from infra.settings import generated_table

    root = Path(__file__).resolve().parents[2]
    assert generated_table(root / "docs" / "collector.md", DOCS_MARKER) == docs_table(), \
        "regenerate: python -m collector.settings --update-docs"
    parser = argparse.ArgumentParser()
    collector = add_collector_parser(parser.add_subparsers())
    text = " ".join(collector.format_help().split())
    defaults = CollectorSettings.build({}, registry=str(registry_path_of(root)), bootstrap_servers="k:1")
    for setting in SETTINGS:
        assert setting.flag in collector._option_string_actions and f"[{setting.env}" in text, setting.flag
        if setting.default is not None and setting.default_text is None:
            assert getattr(defaults, setting.name) == setting.default, setting.name
    assert defaults.idempotency_topic == "ocms-reports-idempotency"  # derived from the source topic
    assert CollectorSettings.build({}, registry=str(registry_path_of(root)), bootstrap_servers="k:1",
                                   idempotency_topic="off").idempotency_topic is None


@pytest.mark.integration
def test_python_m_collector_settings_prints_the_docs_table():
    import subprocess
    import sys
    from pathlib import Path

    from collector.settings import docs_table

    printed = subprocess.run([sys.executable, "-m", "collector.settings"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parents[2], check=True)
    assert printed.stdout.strip() == docs_table() and printed.stderr == ""


def registry_path_of(root):
    return root / "deploy" / "registry.yaml"


def _running_loop_of(registry_path, *flags: str, env: dict | None = None) -> str:
    """Start ``ocms collector`` (no Kafka needed to serve), read the event loop its banner names, stop it."""
    import os
    import signal
    import subprocess

    from ocms.run_collector import collector_command

    environ = {k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}
    process = subprocess.Popen(collector_command(registry_path, "127.0.0.1:9", 0, "--log-level", "warning", *flags),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**environ, **(env or {})})
    try:
        for line in process.stdout:
            if line.startswith("ocms collector: "):
                return line.rsplit("event loop: ", 1)[1].strip(" )\n")
        raise AssertionError(f"no banner; exit status {process.wait()}")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


@pytest.mark.integration
def test_the_collector_runs_on_uvloop_unless_turned_off(registry_path):
    # The banner names the loop the server runs on (type(asyncio.get_running_loop())), not the setting.
    assert _running_loop_of(registry_path) == "uvloop"
    assert _running_loop_of(registry_path, "--event-loop", "asyncio") == "asyncio"
    assert _running_loop_of(registry_path, env={"OCMS_COLLECTOR_EVENT_LOOP": "asyncio"}) == "asyncio"
    assert _running_loop_of(registry_path, "--event-loop", "uvloop", env={"OCMS_COLLECTOR_EVENT_LOOP": "asyncio"}) == "uvloop"


def test_loop_names_follow_the_running_loop():
    import uvloop

    from collector.cli import loop_factory

    assert loop_factory("asyncio") is None
    loop = loop_factory("uvloop")()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert loop.run_until_complete(_name()) == "uvloop"
    finally:
        loop.close()
    assert asyncio.run(_name()) == "asyncio"


async def _name() -> str:
    from collector.cli import running_loop_name

    return running_loop_name()


# -------------------------------------------------------------------------------------- tokens


def test_tokens_file_errors_name_entry_and_field(tmp_path):
    good = hashlib.sha256(b"t").hexdigest()
    cases = [
        ("{", "not JSON"),
        (json.dumps({"applications": []}), "at least one"),
        (json.dumps({"applications": [{"name": "a b", "token_sha256": good}]}), "applications[0].name"),
        (json.dumps({"applications": [{"name": "a", "token_sha256": "xyz"}]}), "applications[0].token_sha256"),
        (json.dumps({"applications": [{"name": "a", "token_sha256": good, "rate_limit": -1}]}), "rate_limit"),
        (json.dumps({"applications": [{"name": "a", "token_sha256": good},
                                      {"name": "b", "token_sha256": good}]}), "applications[1].token_sha256"),
        (json.dumps({"applications": [{"name": "a", "token_sha256": good, "tokn": 1}]}), "unknown field"),
    ]
    path = tmp_path / "tokens.json"
    for text, expected in cases:
        path.write_text(text)
        with pytest.raises(TokensFileError, match=expected.replace("[", r"\[").replace("]", r"\]")):
            load_tokens(path)


def test_authenticator_checks_the_bearer_token(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"applications": [{"name": "a", "token_sha256": hashlib.sha256(b"s3cret").hexdigest()}]}))
    auth = Authenticator(load_tokens(path))
    assert auth.identify("Bearer s3cret").name == "a"
    for header, reason in ((None, "missing_token"), ("Basic abc", "missing_token"), ("Bearer nope", "unknown_token")):
        with pytest.raises(AuthError) as info:
            auth.identify(header)
        assert info.value.reason == reason
    assert Authenticator(None).identify(None) is None


# ---------------------------------------------------------------------------------- rate limits


def test_token_bucket_refills_at_its_rate():
    clock = Clock()
    bucket = TokenBucket(2.0, 3, clock)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)
    clock.now += 0.5
    assert bucket.take() == 0.0
    assert bucket.take() > 0


def test_an_application_over_its_limit_does_not_use_up_the_global_budget(tmp_path):
    from collector.guard import Application

    clock = Clock()
    limiter = RateLimiter(10, 10, 1, 1, clock)
    noisy, quiet = Application("noisy", b"1" * 32), Application("quiet", b"2" * 32)
    assert limiter.check(noisy) is None
    assert all(limiter.check(noisy)[0] == "rate_limited_application" for _ in range(100))
    assert all(limiter.check(Application(f"q{i}", b"3" * 32)) is None for i in range(9))
    assert limiter.check(quiet)[0] == "rate_limited"


# ---------------------------------------------------------------------------------- idempotency


def test_idempotency_cache_remembers_accepted_answers_for_the_window():
    async def go():
        clock = Clock()
        cache = IdempotencyCache(window=60, max_keys=3, clock=clock)
        key, digest = ("", "k" * 16), body_digest(b"d")
        assert cache.lookup(key, digest) is None
        cache.begin(key, digest)
        pending = cache.lookup(key, digest)
        assert pending is not None and not pending.done()  # a concurrent retry waits for the first answer
        doc = {"status": 202, "reason": "accepted", "accepted": 3, "metric": "dest", "version": 1}
        cache.finish(key, 202, dict(doc))
        assert (await pending) == (202, doc)
        assert (await cache.lookup(key, digest)) == (202, doc)
        with pytest.raises(KeyReusedError):
            cache.lookup(key, body_digest(b"other body"))
        clock.now += 61
        assert cache.lookup(key, digest) is None  # the window is over
        # a refused upload is forgotten at once: its retry is tried afresh
        cache.begin(("", "r" * 16), digest)
        cache.finish(("", "r" * 16), 503, {"status": 503})
        assert cache.lookup(("", "r" * 16), digest) is None
        # bounded: the oldest keys go first
        for i in range(5):
            cache.begin(("", f"{i}" * 16), digest)
            cache.finish(("", f"{i}" * 16), 202, doc)
        assert len(cache) == 3 and cache.evicted >= 2

    asyncio.run(go())


def test_the_keyed_hash_of_a_key_is_blake2b_over_application_nul_key_whatever_the_application():
    """The state kept per (secret, application) with the prefix fed gives the bytes of hashing the whole
    ``application NUL key`` (what the log holds and 0.2.0 collectors compute), non-ASCII names included."""
    import hashlib

    from collector.exactly_once.log import key_hash

    for application in ("", "café", "東京", "app-🚀"):
        for secret in (b"", b"s" * 32):
            whole = hashlib.blake2b(f"{application}\x00upload-key-0001".encode(), key=secret, digest_size=16,
                                    person=b"ocms-idem-v1").digest()
            assert key_hash(secret, application, "upload-key-0001") == whole
            assert key_hash(secret, application, "upload-key-0002") != whole


def test_idempotency_cache_claim_is_lookup_then_begin():
    async def go():
        clock = Clock()
        cache = IdempotencyCache(window=60, max_keys=2, clock=clock)
        key, digest = ("", "k" * 16), body_digest(b"d")
        assert cache.claim(key, digest) is None  # begun
        pending = cache.claim(key, digest)
        assert pending is not None and not pending.done()  # a concurrent retry waits for the first answer
        with pytest.raises(KeyReusedError):
            cache.claim(key, body_digest(b"other body"))
        doc = {"status": 202, "reason": "accepted", "accepted": 1, "metric": "dest", "version": 1}
        cache.finish(key, 202, dict(doc))
        assert (await pending) == (202, doc)
        clock.now += 30
        cache.claim(("", "o" * 16), digest)  # in flight
        clock.now += 31
        assert cache.claim(key, digest) is None  # expired: begun afresh, as the newest key
        cache.claim(("", "p" * 16), digest)  # over max_keys: the oldest goes, and that is no longer ``key``
        assert cache.lookup(key, digest) is not None and cache.lookup(("", "o" * 16), digest) is None

    asyncio.run(go())


def test_idempotency_cache_sweeps_expired_answers_at_most_once_a_second():
    clock = Clock()
    cache = IdempotencyCache(window=10, max_keys=100, clock=clock)
    digest = body_digest(b"d")
    doc = {"status": 202, "reason": "accepted", "accepted": 1, "metric": "dest", "version": 1}
    for i in range(3):
        cache.claim(("", f"{i}" * 16), digest)
        cache.finish(("", f"{i}" * 16), 202, doc)
    clock.now += 10.5
    assert cache.lookup(("", "0" * 16), digest) is None  # expired for a lookup at once ...
    assert len(cache) == 0  # ... and swept: the last sweep was over a second ago
    cache.claim(("", "a" * 16), digest)
    cache.finish(("", "a" * 16), 202, doc)
    clock.now += 10.5
    cache.claim(("", "b" * 16), digest)
    assert len(cache) == 1  # swept again
    cache.finish(("", "b" * 16), 202, doc)  # expires 10 s from now
    clock.now += 9.9
    cache.lookup(("", "x" * 16), digest)  # a sweep: nothing expired yet
    clock.now += 0.6
    assert cache.lookup(("", "b" * 16), digest) is None and len(cache) == 1  # expired, not swept before a second
    clock.now += 0.5
    cache.lookup(("", "x" * 16), digest)
    assert len(cache) == 0


# -------------------------------------------------------------------------------------- parsing


def test_parser_concatenated_messages_and_frames(reg):
    dest = reg.metric("dest").version(1)
    parser = UploadParser(reg, 100)
    messages = single_messages(dest, 3, seed=1)
    frame = wire.encode_frame(dest.params, reports(dest, 5, seed=2))
    upload = parser.parse_binary(b"".join(messages) + frame, None)
    assert upload.version is dest and len(upload.batch) == 8
    with pytest.raises(UploadRejected) as info:
        parser.parse_binary(wire.encode_frame(dest.params, reports(dest, 101, seed=3)), None)
    assert (info.value.status, info.value.reason) == (413, "too_many_reports")
    with pytest.raises(UploadRejected) as info:
        parser.parse_binary(b"".join(messages), "screen")
    assert (info.value.status, info.value.reason) == (400, "foreign_metric")
    with pytest.raises(UploadRejected) as info:
        parser.metric("nope")
    assert info.value.status == 404


def _json_report(version) -> dict:
    return {"z": "0"} if version.params.mechanism == "direct" else {"a0": "1", "a1": "2", "z": "0"}


def test_json_version_field_selects_the_metric_version(reg):
    parser = UploadParser(reg, 100)
    v1, v2 = reg.metric("screen").version(1), reg.metric("screen").version(2)
    body = json.dumps({"version": 2, "reports": [_json_report(v2)]}).encode()
    assert parser.parse_json(body, "screen").version.version == 2
    wrong = {"a0": "1", "a1": "2", "z": "0"} if v2.params.mechanism == "direct" else {"z": "0"}
    with pytest.raises(UploadRejected) as info:
        parser.parse_json(json.dumps({"version": 2, "reports": [wrong]}).encode(), "screen")
    assert info.value.reason == "malformed_json"
    body = json.dumps({"version": 1, "reports": [_json_report(v1)]}).encode()
    with pytest.raises(UploadRejected) as info:
        parser.parse_json(body, "screen")
    assert info.value.reason == "retired_version"
    body = json.dumps({"version": 9, "reports": [{"a0": "1", "a1": "2", "z": "0"}]}).encode()
    with pytest.raises(UploadRejected) as info:
        parser.parse_json(body, "screen")
    assert info.value.reason == "unknown_version"
    # with the fingerprint, "version" must agree with it (also on /v1/reports, where the fingerprint decides)
    for metric in ("screen", None):
        both = {"fingerprint": v2.fingerprint.hex(), "version": 2, "reports": [_json_report(v2)]}
        assert parser.parse_json(json.dumps(both).encode(), metric).version is v2
        with pytest.raises(UploadRejected) as info:
            parser.parse_json(json.dumps({**both, "version": 1}).encode(), metric)
        assert (info.value.status, info.value.reason) == (400, "version_mismatch")
        assert "screen@2" in info.value.detail
    for bad in ("2", 2.0, True, 0, -1, 1 << 40, None, [2]):
        with pytest.raises(UploadRejected) as info:
            parser.parse_json(json.dumps({"version": bad, "reports": [_json_report(v2)]}).encode(), "screen")
        assert info.value.reason == "malformed_json", bad


def test_json_report_numbers_must_be_strings(reg):
    parser = UploadParser(reg, 100)
    dest = reg.metric("dest").version(1)
    fp = dest.fingerprint.hex()
    ok = {"fingerprint": fp, "reports": [{"a0": "1", "a1": "2", "z": "0"}]}
    assert len(parser.parse_json(json.dumps(ok).encode(), None).batch) == 1
    for field in ("a0", "a1", "z"):
        for number in (1, 0, 1.5, 10 ** 50):
            doc = {"fingerprint": fp, "reports": [{**ok["reports"][0], field: number}]}
            with pytest.raises(UploadRejected) as info:
                parser.parse_json(json.dumps(doc).encode(), None)
            assert info.value.reason == "malformed_json" and "JSON number" in info.value.detail, (field, number)
            assert len(info.value.detail) < 300
    huge = ('{"fingerprint": "%s", "reports": [{"a0": %s, "a1": "2", "z": "0"}]}' % (fp, "7" * 4301)).encode()
    with pytest.raises(UploadRejected) as info:
        parser.parse_json(huge, None)
    assert info.value.reason == "malformed_json" and len(info.value.detail) < 300


# ------------------------------------------------------------------------------- HTTP transport


class ScriptedCollector:
    """A real aiohttp server answering uploads from a script of (status, headers); logs what it got."""

    def __init__(self, script):
        self.script = list(script)
        self.seen = []

    async def handle(self, request):
        from aiohttp import web

        body = await request.read()
        self.seen.append((request.headers.get("Idempotency-Key"), body, request.headers.get("Authorization")))
        status, headers = self.script.pop(0) if self.script else (202, {})
        return web.json_response({"status": status}, status=status, headers=headers)

    async def __aenter__(self):
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/v1/metrics/dest/reports", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        await self.runner.cleanup()


def test_http_transport_retries_with_the_same_key_and_honours_retry_after(reg):
    dest = reg.metric("dest").version(1)

    async def go():
        async with ScriptedCollector([(503, {"Retry-After": "1"}), (429, {"Retry-After": "0"})]) as server:
            transport = HttpTransport(server.url, metric="dest", token="tok", max_reports=10, max_latency_s=0.05)
            loop = asyncio.get_running_loop()
            async with DeviceReporter(dest.params, metric="dest", transport=transport) as reporter:
                started = loop.time()
                futures = [await reporter.submit(v) for v in (1, 2, 3)]
                deliveries = await asyncio.gather(*futures)
                elapsed = loop.time() - started
            return server.seen, deliveries, elapsed

    seen, deliveries, elapsed = asyncio.run(go())
    assert len(seen) == 3, "one upload, two retries"
    keys = {key for key, _, _ in seen}
    assert len(keys) == 1 and len(next(iter(keys))) >= 16, "every retry reuses the upload's key"
    assert len({body for _, body, _ in seen}) == 1 and len(seen[0][1]) == 3 * len(deliveries[0].message)
    assert all(auth == "Bearer tok" for _, _, auth in seen)
    assert elapsed >= 1.0, "the 503's Retry-After was honoured"
    assert [d.attempts for d in deliveries] == [3, 3, 3]


def test_http_transport_permanent_errors_fail_the_reports(reg):
    dest = reg.metric("dest").version(1)

    async def go():
        async with ScriptedCollector([(400, {})]) as server:
            transport = HttpTransport(server.url, metric="dest", max_latency_s=0)
            async with DeviceReporter(dest.params, metric="dest", transport=transport) as reporter:
                with pytest.raises(DeliveryError) as info:
                    await reporter.report(5)
            return info.value, server.seen

    error, seen = asyncio.run(go())
    assert not error.retriable and error.attempts == 1 and len(seen) == 1
    assert "HTTP 400" in str(error)


def test_http_transport_rejects_bad_arguments():
    with pytest.raises(InvalidParameterError):
        HttpTransport("ftp://x")
    with pytest.raises(InvalidParameterError):
        HttpTransport("http://x", max_reports=0)


def test_the_sdk_waits_longer_than_a_shuffling_collector_holds_an_answer_by_default():
    """With shuffling on, an upload is answered once its batch is in Kafka: after up to --shuffle-max-seconds
    (default 60 s) and the acknowledgement. The SDK's default timeout was 30 s, so every upload of a quiet
    metric timed out and was retried (joining its first attempt: nothing doubled, but traffic and an error)."""
    from collector.settings import BY_NAME
    from tests.support.collector_defaults import longest_default_answer_s

    default = HttpTransport("http://127.0.0.1:1").timeout_s
    assert default > longest_default_answer_s() > BY_NAME["shuffle_max_seconds"].default, \
        (default, longest_default_answer_s())
    from producer.reporter import DEFAULT_HTTP_TIMEOUT_S

    assert default == DEFAULT_HTTP_TIMEOUT_S


# ------------------------------------------------------------------------------------- metrics


def test_upload_counts_expose_what_a_prometheus_counter_and_histogram_would():
    """collector.app.UploadCounts (plain counts, families built when scraped) against prometheus_client's own
    Counter and Histogram fed the same answers: the same exposition, bucket edges included."""
    import random
    import re

    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from collector.app import LATENCY_BUCKETS, UploadCounts

    reference = CollectorRegistry()
    requests = Counter("ocms_collector_requests", "Uploads answered, by status and reason", ["status", "reason"],
                       registry=reference)
    latency = Histogram("ocms_collector_request_seconds", "Time to answer an upload", registry=reference,
                        buckets=LATENCY_BUCKETS)
    ours = CollectorRegistry()
    counts = UploadCounts()
    ours.register(counts)
    rng = random.Random(7)
    for i in range(3000):
        status, reason = rng.choice([(202, "accepted"), (400, "truncated"), (503, "queue_full"), (429, "rate_limited")])
        seconds = rng.choice((0.0, 0.001, 0.0025, 0.00250001, 1, 10, 10.5)) if i % 3 == 0 else rng.random() * 12
        requests.labels(str(status), reason).inc()
        latency.observe(seconds)
        counts.count(status, reason, seconds)

    def masked(registry) -> str:
        return re.sub(r"(_created(\{[^}]*\})? )\S+", r"\1T", generate_latest(registry).decode())

    assert masked(ours) == masked(reference)
    assert 'ocms_collector_requests_total{reason="accepted",status="202"}' in masked(ours)


def test_fast_uploads_takes_exactly_the_two_upload_routes(registry_path, reg):
    from aiohttp.test_utils import make_mocked_request

    from collector.app import Collector

    collector = Collector(CollectorSettings.build({}, registry=str(registry_path), bootstrap_servers="k:1"), reg)
    taken = []

    async def upload(request, metric):
        taken.append(("upload", metric))

    async def app_handler(request):
        taken.append(("app", None))

    collector._post = upload
    dispatch = collector.fast_uploads(app_handler)
    cases = [
        ("POST", "/v1/reports", {}, ("upload", None)),
        ("POST", "/v1/reports?x=1", {}, ("upload", None)),
        ("POST", "/v1/metrics/dest/reports", {}, ("upload", "dest")),
        ("POST", "/v1/metrics/no_such/reports", {}, ("upload", "no_such")),  # 404 unknown_metric from the handler
        ("POST", "/v1/metrics/%64est/reports", {}, ("app", None)),
        ("POST", "/v1/metrics//reports", {}, ("app", None)),
        ("POST", "/v1/metrics/a/b/reports", {}, ("app", None)),
        ("POST", "/v1/metrics/reports", {}, ("app", None)),
        ("POST", "/v1/reports/", {}, ("app", None)),
        ("POST", "/v1/reports", {"Expect": "100-continue"}, ("app", None)),
        ("GET", "/v1/reports", {}, ("app", None)),
        ("PUT", "/v1/metrics/dest/reports", {}, ("app", None)),
        ("GET", "/v1/metrics/dest", {}, ("app", None)),
        ("GET", "/metrics", {}, ("app", None)),
    ]

    async def run():
        for method, path, headers, expected in cases:
            taken.clear()
            await dispatch(make_mocked_request(method, path, headers=headers))
            assert taken == [expected], (method, path, headers)

    asyncio.run(run())
