"""registry/flags.py (issue 26): one list of metric flags, compiled once into a one-metric registry;
a metric flag beside --registry is an error naming it, for every command."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cms_core import OCMSParams
from cms_core.errors import InvalidParameterError
from ocms.cli import main
from registry import load_registry
from registry.flags import (FLAGS_METRIC, FLAGS_PATH, METRIC_SETTINGS, MetricFlagError, add_metric_flags,
                            metrics_from_args, version_from_args)

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = str(ROOT / "deploy" / "registry.yaml")

#: A value for each metric flag that would be accepted without --registry.
GIVEN = {"epsilon": ["--epsilon", "2"], "mode": ["--mode", "l2"], "f_star": ["--f-star", "0.5"],
         "dictionary_size": ["--dictionary-size", "100"], "strings": ["--strings"], "tracked": ["--tracked", "5"],
         "hash_range": ["--hash-range", "7"], "mechanism": ["--mechanism", "direct"],
         "lifetime_epsilon": ["--lifetime-epsilon", "3"],
         "tracked_range": ["--tracked-range", "0:5"], "tracked_file": ["--tracked-file", "t.jsonl"],
         "extra_epsilon": ["--extra-epsilon", "1"], "bucket_seconds": ["--bucket-seconds", "30"],
         "retention_seconds": ["--retention-seconds", "600"], "rollup_seconds": ["--rollup-seconds", "600"],
         "rollup_retention_seconds": ["--rollup-retention-seconds", "6000"], "watch": ["--watch", "1"],
         "top_k": ["--top-k", "3"]}
#: Each command, the metric flags it takes, and what else its command line needs to get that far.
COMMANDS = {
    "plan": (("epsilon", "mode", "f_star", "dictionary_size", "strings", "tracked", "hash_range", "mechanism",
              "lifetime_epsilon"), []),
    "simulate": (("epsilon", "mode", "f_star", "dictionary_size", "strings", "tracked", "hash_range", "mechanism",
                  "lifetime_epsilon"), ["--metric", "flight_dest", "--reports", "10", "--out", "x.cap"]),
    "estimate": (("epsilon", "mode", "f_star", "dictionary_size", "strings", "tracked", "hash_range", "mechanism",
                  "lifetime_epsilon", "tracked_range", "tracked_file"), ["x.cap", "--metric", "flight_dest"]),
    "worker": (tuple(GIVEN), ["--bootstrap-servers", "127.0.0.1:9"]),
}


def test_the_one_list_names_every_metric_flag_once():
    assert [s.name for s in METRIC_SETTINGS] == list(GIVEN)
    assert len({s.flag for s in METRIC_SETTINGS}) == len(METRIC_SETTINGS) == 18


@pytest.mark.parametrize("command, name", [(c, n) for c, (names, _) in COMMANDS.items() for n in names])
def test_a_metric_flag_beside_a_registry_is_refused_naming_it(capsys, tmp_path, monkeypatch, command, name):
    monkeypatch.chdir(tmp_path)
    for variable in ("OCMS_REGISTRY", *(s.env for s in METRIC_SETTINGS)):
        monkeypatch.delenv(variable, raising=False)
    flag = GIVEN[name]
    with pytest.raises(SystemExit) as info:
        main([command, "--registry", REGISTRY, *flag, *COMMANDS[command][1]])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"ocms {command}: error: {flag[0]}: single-metric flag; ") and f"drop {flag[0]}" in err
    assert not (tmp_path / "x.cap").exists()


def test_simulate_no_longer_ignores_mode_and_f_star_beside_a_registry(capsys, tmp_path):
    """The review's reproduction: this ran and silently ignored both flags."""
    argv = ["simulate", "--registry", REGISTRY, "--metric", "flight_dest", "--mode", "l2", "--f-star", "0.5",
            "--reports", "10", "--out", str(tmp_path / "x.bin")]
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--mode, --f-star: single-metric flags" in err and "drop --mode, --f-star" in err
    assert not (tmp_path / "x.bin").exists()


def test_estimate_no_longer_ignores_f_star_beside_a_registry(capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["estimate", str(tmp_path / "x.cap"), "--registry", REGISTRY, "--metric", "carrier", "--f-star", "0.5"])
    assert info.value.code == 2 and "drop --f-star" in capsys.readouterr().err


def test_the_worker_reads_metric_variables_too_and_names_them(capsys, monkeypatch):
    monkeypatch.setenv("OCMS_MODE", "l2")
    with pytest.raises(SystemExit) as info:
        main(["worker", "--registry", REGISTRY, "--bootstrap-servers", "127.0.0.1:9"])
    assert info.value.code == 2 and "OCMS_MODE: single-metric flag" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["discover", "CAP", "--registry", REGISTRY, "--metric", "flight_tailnum", "-e", "2"],
                                  ["run", "--registry", REGISTRY, "--mode", "l2"]])
def test_commands_without_metric_flags_refuse_them_by_name(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and argv[-2] in err


def parse(*argv, settings=METRIC_SETTINGS):
    parser = argparse.ArgumentParser()
    add_metric_flags(parser, settings, registry_help="r", metric_help="m", metric_version=True)
    return parser.parse_args(list(argv))


def test_the_flags_compile_once_into_a_one_metric_registry_whose_newest_version_is_the_primary(tmp_path):
    registry = metrics_from_args(parse("-e", "2", "-d", "1000", "--extra-epsilon", "1", "--extra-epsilon", "3",
                                       "--watch", "7", "--bucket-seconds", "30", "--retention-seconds", "600"))
    assert registry.path == FLAGS_PATH and [m.name for m in registry.metrics] == [FLAGS_METRIC]
    versions = registry.metrics[0].versions
    assert [v.params.epsilon for v in versions] == [1.0, 3.0, 2.0]  # rotated sets first; --epsilon is the newest
    assert registry.metrics[0].latest.params == OCMSParams.build(2.0, 1000)  # unbound: wire-v1 fingerprints
    assert all(v.tracked_count == 1000 and v.watch == ("7",) and v.bucket_seconds == 30 for v in versions)
    assert version_from_args(parse(), registry) is versions[-1]


def test_commands_that_count_nothing_state_no_tracked_set():
    plan_like = [s for s in METRIC_SETTINGS if s.name in COMMANDS["plan"][0]]
    version = metrics_from_args(parse("-e", "2", "--strings", settings=plan_like)).metrics[0].latest
    assert version.tracked.kind == "none" and version.tracked_count is None and version.tracked_names() == []
    with pytest.raises(InvalidParameterError, match="give a tracked range or file"):
        metrics_from_args(parse("-e", "2", "--strings"))  # the worker's flags count: a tracked set is needed


def test_l2_takes_d_from_the_tracked_set_and_rules_between_flags_name_them(tmp_path):
    values = tmp_path / "t.jsonl"
    values.write_text('"a"\n"b"\n"c"\n')
    version = metrics_from_args(parse("-e", "2", "--strings", "--mode", "l2", "--tracked-file", str(values))).metrics[0].latest
    assert version.params.tracked_count == 3 and version.tracked_names() == ["a", "b", "c"]
    with pytest.raises(InvalidParameterError) as info:
        metrics_from_args(parse("-e", "2", "-d", "10", "--tracked-range", "0:5", "--tracked-file", str(values)))
    assert info.value.name == "--tracked-file" and "exclusive with --tracked-range" in info.value.reason
    with pytest.raises(InvalidParameterError) as info:
        metrics_from_args(parse("-e", "2", "-d", "10", "--bucket-seconds", "60", "--retention-seconds", "30"))
    assert info.value.name == "--retention-seconds"
    with pytest.raises(InvalidParameterError) as info:
        metrics_from_args(parse("-e", "2", "-d", "10", "--watch", "11"))
    assert info.value.name == "--watch"


def test_metric_without_a_registry_and_a_registry_without_metric():
    with pytest.raises(MetricFlagError, match="--metric needs --registry FILE"):
        metrics_from_args(parse("-e", "2", "-d", "10", "--metric", "x"))
    with pytest.raises(MetricFlagError, match="needs --metric NAME"):
        version_from_args(parse("--registry", REGISTRY), metrics_from_args(parse("--registry", REGISTRY)))


def test_plan_is_one_body_for_a_metric_stated_either_way(capsys, tmp_path):
    """The same numbers for the same metric, whether the flags or a registry state it."""
    path = tmp_path / "r.yaml"
    path.write_text("metrics:\n  - name: m\n    description: d\n    owner: o\n    integers: 1000\n    epsilon: 2\n"
                    "    mechanism: ocms\n", encoding="utf-8")
    main(["plan", "-e", "2", "-d", "1000", "--n", "5000", "--json"])
    flags = json.loads(capsys.readouterr().out)
    main(["plan", "--registry", str(path), "--n", "5000", "--json"])
    (named,) = json.loads(capsys.readouterr().out)["metrics"]
    assert flags["params"]["hash_range"] == named["params"]["hash_range"]
    assert flags["prediction"]["ci_half_width"] == named["prediction"]["ci_half_width"]
    assert flags["prediction"]["n"] == named["prediction"]["n"] == 5000
    version = load_registry(path).metric("m").latest
    assert named["params"]["fingerprint"] == version.fingerprint.hex() != flags["params"]["fingerprint"]  # bound
