"""What must hold over a fault schedule's recorded history (pure: history in, findings out).

* **Every 202 counted once**: when the run has settled, each metric's n and each value's match count, as
  every worker answers them, equal the offline decode of exactly the bodies that were answered 202 (the
  ledger). Fewer is ``lost``, more is ``doubled`` (in reports: n's difference, per metric).
* **No 200 smaller than an earlier 200**: an answer (200) for a metric, begun after another 200 for the same
  metric had ended, may not have a smaller n or a smaller match count of any value (counts only grow: no fault
  schedule deletes a bucket). Any worker, forwarded or not. Each such answer is a ``wrong_200``.
* **No 200 larger than what was acknowledged**: an answer's n above every report that was ever sent
  (acked or not) is counted as ``wrong_200`` too (a count no upload explains).
* **/healthz never ok while a held shard is partial**: an ``ok`` whose document holds a shard that is not
  ready, or is not settled on its assignment, is a ``health_lie``.
* **Recovery**: the time from the end of the last fault to the moment from which every worker answers every
  metric 200 (``recover_s``; None when that never happened before the run ended).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Findings:
    acked: int = 0  # reports in uploads answered 202
    counted: int = 0  # reports the workers count at the end (n summed over metrics)
    lost: int = 0
    doubled: int = 0
    wrong_200: int = 0
    health_lies: int = 0
    refused: int = 0  # uploads answered with a client error the harness never provokes
    unsettled: int = 0  # uploads never answered 202 by the end
    retried: int = 0  # uploads answered 202 after an earlier attempt of theirs was not
    in_doubt: int = 0  # ... of which an attempt got no answer at all (a kill or cut while it was under way)
    final_mismatch: list = field(default_factory=list)  # (metric, worker, what) at the end
    wrong_examples: list = field(default_factory=list)
    recover_s: float | None = None

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubled or self.wrong_200 or self.health_lies or self.refused or self.unsettled
                    or self.final_mismatch)


def expected_counts(acked_by_metric: dict[str, list[bytes]], decoders: dict) -> dict[str, tuple[int, tuple]]:
    """metric -> (n, match counts) of the offline decode of the acknowledged bodies (``decoders[metric](bodies)``
    returns both)."""
    return {metric: decoders[metric](bodies) for metric, bodies in acked_by_metric.items()}


def monotonic_violations(answers) -> list:
    """The 200 answers smaller than a 200 answer for the same metric that ended before they began."""
    wrong = []
    by_metric: dict[str, list] = {}
    for a in answers:
        if a.status == 200:
            by_metric.setdefault(a.metric, []).append(a)
    for metric, found in by_metric.items():
        ends = sorted(found, key=lambda a: a.ended)
        starts = sorted(found, key=lambda a: a.began)
        best_n, best_counts, best_of = -1, None, None
        i = 0
        for a in starts:
            while i < len(ends) and ends[i].ended < a.began:
                e = ends[i]
                if e.n > best_n:
                    best_n, best_of = e.n, e
                counts = np.asarray(e.counts, np.int64)
                best_counts = counts if best_counts is None else np.maximum(best_counts, counts)
                i += 1
            if best_counts is None:
                continue
            counts = np.asarray(a.counts, np.int64)
            if a.n < best_n or (len(counts) == len(best_counts) and bool(np.any(counts < best_counts))):
                wrong.append((a, best_of))
    return wrong


def recovery_time(answers, workers: list[str], metrics: list[str], after: float) -> float | None:
    """Seconds from ``after`` to the moment from which every answer is 200 and each (worker, metric) had one."""
    late = sorted((a for a in answers if a.began >= after), key=lambda a: a.began)
    if not late:
        return None
    last_bad = max((a.ended for a in late if a.status != 200), default=after)
    good_since = {}
    for a in late:
        if a.status == 200 and a.began >= last_bad:
            good_since.setdefault((a.worker, a.metric), a.ended)
    if any((w, m) not in good_since for w in workers for m in metrics):
        return None
    return max(good_since.values()) - after


def check(*, uploads, answers, final_answers, health, expected: dict[str, tuple[int, tuple]], workers: list[str],
          metrics: list[str], sent_by_metric: dict[str, int], last_fault_end: float) -> Findings:
    f = Findings()
    acked = [u for u in uploads if u.acked_at is not None]
    f.acked = sum(u.reports for u in acked)
    f.refused = sum(1 for u in uploads if u.refused is not None)
    f.unsettled = sum(1 for u in uploads if u.acked_at is None and u.refused is None)
    f.retried = sum(1 for u in acked if u.attempts > 1)
    f.in_doubt = sum(1 for u in acked if any(not isinstance(s, int) for s in u.statuses))
    # the end: every worker, every metric, the ledger's counts
    counted_by_metric = {}
    for metric in metrics:
        n_expected, counts_expected = expected.get(metric, (0, ()))
        seen = []
        for worker in workers:
            a = final_answers.get((worker, metric))
            if a is None or a.status != 200:
                f.final_mismatch.append((metric, worker, f"no 200 at the end ({a.status if a else None})"))
                continue
            seen.append(a.n)
            if a.n != n_expected or tuple(a.counts) != tuple(counts_expected):
                f.final_mismatch.append((metric, worker, f"n {a.n} (expected {n_expected}), counts {a.counts} "
                                         f"(expected {counts_expected})"))
        if seen:
            counted = max(seen, key=lambda n: abs(n - n_expected))  # the worst worker's
            counted_by_metric[metric] = counted
            f.lost += max(0, n_expected - counted)
            f.doubled += max(0, counted - n_expected)
    f.counted = sum(counted_by_metric.values())
    # during the run
    violations = monotonic_violations(answers)
    over = [a for a in answers if a.status == 200 and a.n > sent_by_metric.get(a.metric, 0)]
    f.wrong_200 = len(violations) + len(over)
    f.wrong_examples = [f"{a.worker} {a.metric} n={a.n} at {a.began:.3f}-{a.ended:.3f} (via {a.answered_by}) after "
                        f"{b.worker} n={b.n} at {b.began:.3f}-{b.ended:.3f} (via {b.answered_by})"
                        for a, b in violations[:10]]
    for sample in health:
        doc = sample.doc or {}
        if sample.status == 200 and doc.get("status") == "ok" and doc.get("view") == "share":
            held, ready = set(doc.get("held_shards", ())), set(doc.get("ready_shards", ()))
            if held != ready or doc.get("rebuilding_shards") or set(doc.get("assigned_partitions", ())) != held:
                f.health_lies += 1
    f.recover_s = recovery_time(answers, workers, metrics, last_fault_end)
    return f
