"""The C client under AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer at exit).

`make -C producer/c sanitize` builds the library, the test driver and ocms-report-c with
-fsanitize=address,undefined -fno-sanitize-recover=all. Here they replay every vector and take a
seeded fuzz of garbled device configurations and value lines: each must end in a clean answer or a
one-line error, never a crash, a sanitizer report or a leak.
"""

from __future__ import annotations

import json
import random

import pytest

from .c_client import C_DIR, PRIVATIZE_VECTORS, Driver, device_config_file, line_of, make, run_cli, sanitizer_env

pytestmark = pytest.mark.integration

SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error", "UndefinedBehaviorSanitizer")
CONFIG = PRIVATIZE_VECTORS["device_config"]


@pytest.fixture(scope="module")
def asan(tmp_path_factory):
    make("sanitize")
    return C_DIR / "build-asan"


def _clean(stderr: str) -> None:
    found = [mark for mark in SANITIZER_MARKS if mark in stderr]
    assert not found, stderr[-8000:]


def test_vectors_under_the_sanitizers(asan, tmp_path):
    driver = Driver(asan / "ocms-c-driver", env=sanitizer_env())
    try:
        assert "error" not in driver.ask(op="load", path=str(device_config_file(tmp_path)))
        for case in PRIVATIZE_VECTORS["singles"]:
            for buffered in (False, True):
                for pclmul in (True, False):
                    answer = driver.ask(op="report", metric=case["metric"], line=line_of(case["value"]),
                                        random_hex=case["random_hex"], buffered=buffered, pclmul=pclmul)
                    assert answer.get("message_hex") == case["message_hex"], answer
        for case in PRIVATIZE_VECTORS["frames"]:
            answer = driver.ask(op="frame", metric=case["metric"], lines=[line_of(v) for v in case["values"]],
                                random_hex=case["random_hex"])
            assert answer.get("message_hex") == case["message_hex"], answer
        for case in PRIVATIZE_VECTORS["invalid"]:
            assert driver.ask(op="report", metric=case["metric"], line=line_of(case["value"]), random_hex="")["used"] == 0
        wire = json.loads((C_DIR.parents[1] / "tests" / "vectors" / "wire_v1.json").read_text())
        small = {"epsilon": 2.0, "m": 4, "field": {"kind": "prime", "order": "10007"}, "dictionary_size": "10000",
                 "domain": "integer", "fingerprint": wire["param_sets"]["small"]["fingerprint"]}
        for case in wire["malformed"]:
            if case["params"] == "small":
                assert driver.ask(op="check", hex=case["hex"], **small)["reason"] == case["reason"]
    finally:
        code, err = driver.close()
    _clean(err)
    assert code == 0, err[-4000:]


# ------------------------------------------------------------------ the fuzz
def _garble(rng: random.Random) -> str:
    """A device configuration damaged one way or another (structure or text)."""
    doc = json.loads(json.dumps(CONFIG))
    junk = [None, True, -1, 0, 1.5, 2**64, 2**70, 1e308, -1e308, "", "x" * 5000, "18446744073709551616",
            "340282366920938463463374607431768211591", [], {}, [[[[[]]]]], "ﬀ\u0000", "0x10", " 7", "7 ", "-0"]
    for _ in range(rng.randint(1, 4)):
        metric = rng.choice(doc["metrics"]) if doc["metrics"] else {}
        targets = [metric]
        if "field" in metric and isinstance(metric["field"], dict):
            targets.append(metric["field"])
        if isinstance(metric.get("discovery"), dict):
            targets.append(metric["discovery"])
            levels = metric["discovery"].get("levels")
            if isinstance(levels, list) and levels and isinstance(levels[0], dict):
                targets.append(rng.choice(levels))
                if rng.random() < 0.2:
                    levels.pop()
        target = rng.choice(targets)
        if not isinstance(target, dict) or not target:
            continue
        key = rng.choice(sorted(target))
        action = rng.random()
        if action < 0.3:
            del target[key]
        elif action < 0.8:
            target[key] = rng.choice(junk)
        elif action < 0.9 and isinstance(target.get(key), str) and target[key].isdigit():
            target[key] = str(int(target[key]) + rng.choice([-1, 1, 2**64]))
        else:
            doc["metrics"].append(json.loads(json.dumps(metric)))  # a duplicate metric
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.5)
    roll = rng.random()
    if roll < 0.2:
        text = text[:rng.randrange(len(text))]
    elif roll < 0.35:
        raw = bytearray(text.encode("utf-8"))
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        text = raw.decode("utf-8", errors="replace")
    elif roll < 0.4:
        text = "[" * rng.randint(1, 5000) + "]" * rng.randint(0, 5000)
    return text


def _random_line(rng: random.Random) -> str:
    pool = ["home", "Home", "0", "18446744073709551615", "18446744073709551616", "-1", "1e3", "", "zebra", "Zebra",
            "東京", "🚀", "a" * 5000, "9" * 45, "0007", "\u0000", "ab\u0000cd", "naïve"]
    roll = rng.random()
    if roll < 0.5:
        return json.dumps(rng.choice(pool), ensure_ascii=rng.random() < 0.5)
    if roll < 0.7:
        return json.dumps("".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x2000),
                                                  rng.randrange(0x10000, 0x10ffff)])) for _ in range(rng.randint(0, 40))))
    broken = ['"', '"\\', '"\\u12', '"\\ud800"', '"\\udc00"', '"\\ud800\\u0041"', '"\\x"', "null", "42", "[]", '"a"b',
              '  "padded"  ', '"\t"', "\"" + "\\u0041" * 100 + "\""]
    return rng.choice(broken)


def test_fuzzed_configs_and_value_lines_end_cleanly(asan):
    rng = random.Random(25)
    driver = Driver(asan / "ocms-c-driver", env=sanitizer_env())
    loaded = refused = 0
    try:
        for i in range(1500):
            text = json.dumps(CONFIG) if i % 10 == 0 else _garble(rng)
            answer = driver.ask(op="load_text", text=text)
            if "error" in answer:
                refused += 1
                assert answer["error"] and "\n" not in answer["error"]
                continue
            loaded += 1
            for metric in rng.sample([m["name"] for m in CONFIG["metrics"]], 3):
                line = _random_line(rng)
                answer = driver.ask(op="value", metric=metric, line=line)
                random_hex = bytes(rng.randrange(256) for _ in range(rng.randint(0, 80))).hex()
                driver.ask(op="report", metric=metric, line=line, random_hex=random_hex, buffered=rng.random() < 0.5)
                driver.ask(op="params", metric=metric)
    finally:
        code, err = driver.close()
    _clean(err)
    assert code == 0, err[-4000:]
    assert loaded >= 150 and refused >= 700, (loaded, refused)  # both paths were exercised


def test_the_cli_under_the_sanitizers_ends_every_bad_input_with_one_line(asan, tmp_path):
    rng = random.Random(2025)
    env = sanitizer_env()
    config = device_config_file(tmp_path)
    cli = asan / "ocms-report-c"
    done = run_cli(["--config", config, "--metric", "words_disc", "--out", tmp_path / "ok.capture"],
                   [line_of(v) for v in ["zebra", "", "abc"] * 50], binary=cli, env=env)
    _clean(done.stderr.decode())
    assert done.returncode == 0
    for i in range(25):
        bad = tmp_path / f"bad-{i}.json"
        bad.write_text(_garble(rng), encoding="utf-8")
        done = run_cli(["--config", bad, "--metric", "cat_small", "--out", tmp_path / "x.capture"], ['"home"'],
                       binary=cli, env=env)
        err = done.stderr.decode()
        _clean(err)
        assert done.returncode in (0, 2), err
        if done.returncode == 2:
            assert err.count("\n") == 1 and err.startswith("ocms-report-c: error: --config "), err
    for i in range(25):  # raw bytes on stdin, invalid UTF-8 included
        data = b"\n".join(bytes(rng.randrange(256) for _ in range(rng.randint(0, 30))) for _ in range(3))
        import subprocess

        done = subprocess.run([str(cli), "--config", str(config), "--metric", "words", "--out", str(tmp_path / "y")],
                              input=b'"ok"\n' + data, capture_output=True, env=env, timeout=60)
        err = done.stderr.decode(errors="replace")
        _clean(err)
        assert done.returncode in (0, 2), err
        if done.returncode == 2:
            assert err.count("\n") == 1 and err.startswith("ocms-report-c: error: line "), err
    done = run_cli(["--config", config, "--metric", "cat_small", "--collector", "http://127.0.0.1:9", "--retries", "1",
                    "--max-backoff", "0.05", "--timeout", "20"], ['"home"'], binary=cli, env=env)
    _clean(done.stderr.decode())
    assert done.returncode == 1 and "gave up after 2 attempts" in done.stderr.decode()
