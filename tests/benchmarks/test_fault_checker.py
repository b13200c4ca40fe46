"""benchmarks.faults: the checker finds each kind of wrong history (and passes a right one); the plan is the
seed's alone; the CLI refuses bad flags naming them. No hosts, no processes."""

from __future__ import annotations

import pytest

from benchmarks.fault_schedules import parse
from benchmarks.faults.checker import check, monotonic_violations, recovery_time
from benchmarks.faults.nemesis import MIN_FAULTS, plan
from benchmarks.faults.traffic import Answer, HealthSample, Upload

WORKERS = ["w1", "w2"]
METRICS = ["m"]


def upload(reports: int, acked: bool = True) -> Upload:
    return Upload("m", "k", b"", reports, 0.0, 1, 1.0 if acked else None)


def answer(worker: str, began: float, ended: float, n: int, counts=(1, 2), status: int = 200) -> Answer:
    return Answer(worker, "m", began, ended, status, n if status == 200 else None,
                  tuple(counts) if status == 200 else None)


def judge(uploads, answers, final_n=10, final_counts=(4, 6), health=(), expected=(10, (4, 6))):
    final = {(w, "m"): answer(w, 100, 101, final_n, final_counts) for w in WORKERS}
    return check(uploads=uploads, answers=answers, final_answers=final, health=list(health),
                 expected={"m": expected}, workers=WORKERS, metrics=METRICS, sent_by_metric={"m": 12},
                 last_fault_end=5.0)


def test_a_right_history_passes():
    answers = [answer("w1", 1, 2, 3, (1, 2)), answer("w2", 3, 4, 3, (1, 2)), answer("w1", 6, 7, 10, (4, 6)),
               answer("w2", 6.5, 7.5, 10, (4, 6))]
    f = judge([upload(10)], answers)
    assert f.ok and (f.acked, f.counted, f.lost, f.doubled, f.wrong_200) == (10, 10, 0, 0, 0)
    assert f.recover_s == pytest.approx(2.5)


def test_lost_and_doubled_reports_are_found_at_the_end():
    lost = judge([upload(10)], [], final_n=8, final_counts=(4, 4))
    assert not lost.ok and lost.lost == 2 and lost.final_mismatch
    doubled = judge([upload(10)], [], final_n=14, final_counts=(6, 8))
    assert not doubled.ok and doubled.doubled == 4
    same_n_other_counts = judge([upload(10)], [], final_n=10, final_counts=(5, 5))
    assert not same_n_other_counts.ok and same_n_other_counts.final_mismatch


def test_a_200_smaller_than_one_that_ended_before_it_began_is_wrong_but_overlapping_ones_are_not():
    smaller_n = [answer("w1", 1, 2, 5, (2, 3)), answer("w2", 3, 4, 4, (2, 3))]
    assert len(monotonic_violations(smaller_n)) == 1
    smaller_count = [answer("w1", 1, 2, 5, (2, 3)), answer("w2", 3, 4, 6, (1, 5))]
    assert len(monotonic_violations(smaller_count)) == 1
    overlapping = [answer("w1", 1, 3, 5, (2, 3)), answer("w2", 2, 4, 4, (2, 3))]  # concurrent: either order
    assert monotonic_violations(overlapping) == []
    not_200 = [answer("w1", 1, 2, 5, (2, 3)), answer("w2", 3, 4, 0, status=503)]
    assert monotonic_violations(not_200) == []
    f = judge([upload(10)], smaller_n + [answer("w1", 9, 9.5, 13, (6, 7))])
    assert f.wrong_200 == 2 and not f.ok  # the smaller one, and one above everything ever sent
    assert "n=4" in f.wrong_examples[0]


def test_an_ok_health_while_a_held_shard_is_partial_is_a_lie():
    lie = HealthSample("w1", 1, 200, {"status": "ok", "view": "share", "held_shards": [0, 1], "ready_shards": [0],
                                      "rebuilding_shards": [1], "assigned_partitions": [0, 1]})
    truth = HealthSample("w1", 2, 200, {"status": "ok", "view": "share", "held_shards": [0], "ready_shards": [0],
                                        "rebuilding_shards": [], "assigned_partitions": [0]})
    f = judge([upload(10)], [], health=[lie, truth])
    assert f.health_lies == 1 and not f.ok


def test_uploads_never_answered_202_are_reported():
    f = judge([upload(10), upload(3, acked=False)], [])
    assert f.unsettled == 1 and not f.ok


def test_recovery_is_the_time_from_the_last_fault_until_every_worker_answers_every_metric_200():
    answers = [answer("w1", 6, 6.1, 1, status=503), answer("w2", 6, 6.2, 1), answer("w1", 8, 8.5, 1),
               answer("w2", 9, 9.1, 1)]
    assert recovery_time(answers, WORKERS, METRICS, after=5) == pytest.approx(4.1)
    assert recovery_time(answers[:2], WORKERS, METRICS, after=5) is None  # w1 never answered 200 after


def test_a_schedule_is_its_seed_alone_and_has_at_least_five_faults():
    args = (60.0, ["w1", "w2", "w3"], ["w4"], ["c1", "c2"], "embedded", 3.0)
    first, again, other = plan(7, *args), plan(7, *args), plan(8, *args)
    assert [f.describe() for f in first] == [f.describe() for f in again]
    assert [f.describe() for f in first] != [f.describe() for f in other]
    assert all(len(plan(seed, 5.0, *args[1:])) >= MIN_FAULTS for seed in range(20))
    mock = {f.kind for seed in range(30) for f in plan(seed, 60.0, ["w1"], [], ["c1"], "mock", 6.0)}
    assert {"broker_down", "leader_move", "request_errors"} <= mock and "join_leave" not in mock


@pytest.mark.parametrize("argv, flag", [(["--schedules", "0"], "--schedules"), (["--seconds", "1"], "--seconds"),
                                        (["--broker", "rabbit"], "--broker"), (["--seed", "x"], "--seed"), (["--kinds", "meteor"], "--kinds")])
def test_bad_flags_exit_2_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 2 and flag in capsys.readouterr().err
