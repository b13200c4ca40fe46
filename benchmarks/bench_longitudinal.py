"""Longitudinal reporting (issue 38): the averaging attack, and the accuracy of one day, one-shot against memoized.

    .venv/bin/python -m benchmarks.bench_longitudinal [--json] [--quick] [--seed S]

**Averaging attack.** ``--devices`` (10,000) simulated devices hold constant values (a Zipf prior over
``--d`` categories) and report every day for ``--days`` (365) through the real Python device path:
one-shot mode with :func:`cms_core.privatize.privatize` at eps_1 (a fresh hash and a fresh randomized
response every report), longitudinal mode with :func:`cms_core.longitudinal.privatize_longitudinal`
(a secret per device: hash fixed for life, memoized first round at eps_inf, fresh second round at
eps_1). The attacker links all the reports of each device (a Kafka key, a connection, a fixed hash)
and makes the Bayes-optimal guess of its value knowing the prior and the mechanism: one-shot, the
value maximizing prior x prod P(z_i | h_i(v)); longitudinal, prior x sum over the memoized response
y1 of P(y1 | h(v)) prod P(z_i | y1). ``longitudinal.bound_accuracy`` is the most any attacker can
reach from one report at eps_inf, taken as the best Bayes-decoded randomized response over the prior's
k most likely values (k = 1..d; ``bound_subset_k``), ``grr_accuracy`` that of GRR over all d values,
``upper_bound_accuracy`` the proven cap min(1, e^eps_inf max_v prior(v)) of any eps_inf-LDP view, and
``memoized_accuracy`` what the attacker reaches when it knows the memoized response exactly (infinitely
many days; the simulation path).

**Accuracy of one day.** ``--seeds`` fleets of ``--day-devices`` devices (the seeded simulation path,
the same law as the device path: tests/cms_core/test_longitudinal.py) report once; every fleet's
estimates of the tracked values are compared with the truth: the largest |error| / sigma (sigma from
the closed form), the measured variance over the closed form (within 10% is the goal) and
``variance_ratio``, the measured single-day variance of the longitudinal mode over one-shot reports at
the same per-report epsilon (the goal: at most 1.15 at eps_inf = 2, eps_1 = 1).

``--json`` prints one object. ``--quick`` is a run of well under a minute (fewer devices and days).
Seeded: the same ``--seed`` gives the same simulation, except the device path's CSPRNG draws (the
attack figures move by their sampling error only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

from cms_core import kernel
from cms_core import longitudinal as L
from cms_core.params import OCMSParams
from cms_core.privatize import privatize
from cms_core.reports import ReportBatch
from cms_core.sketch import OCMSSketch
from cms_core.values import TrackedValues


def zipf_prior(d: int, s: float = 1.1) -> np.ndarray:
    weights = 1.0 / np.arange(1, d + 1) ** s
    return weights / weights.sum()


def _logsumexp(a: np.ndarray, axis: int) -> np.ndarray:
    top = a.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(a - top).sum(axis=axis, keepdims=True))).squeeze(axis)


def one_shot_attack(params: OCMSParams, values: np.ndarray, days: int, prior: np.ndarray) -> tuple[float, int]:
    """Accuracy of the Bayes-optimal guess from ``days`` linked one-shot reports of each device (device path)."""
    n, d, m = values.shape[0], params.dictionary_size, params.hash_range
    p = params.keep_probability
    q = (1 - p) / (m - 1)
    matches = np.zeros((n, d), np.int64)
    candidates = np.arange(d, dtype=np.uint64)
    for _ in range(days):
        batch = ReportBatch.from_reports(params, [privatize(params, int(v)) for v in values])
        for v in range(d):
            h = kernel.hash_residues(params, batch.a0, batch.a1, np.full(n, candidates[v], np.uint64))
            matches[:, v] += (h == batch.z)
    score = np.log(prior)[None, :] + matches * math.log(p) + (days - matches) * math.log(q)
    return float(np.mean(score.argmax(axis=1) == values)), n * days


def longitudinal_attack(lp: L.LongitudinalParams, values: np.ndarray, days: int, prior: np.ndarray,
                        rng: np.random.Generator) -> tuple[float, int]:
    """Accuracy of the Bayes-optimal guess from ``days`` linked longitudinal reports of each device (device path)."""
    n, d, g = values.shape[0], lp.report.dictionary_size, lp.g
    secrets_ = [rng.bytes(32) for _ in range(n)]
    hashes = [L.device_hash(lp, s) for s in secrets_]
    counts = np.zeros((n, g), np.int64)
    for _ in range(days):
        for i, (v, secret) in enumerate(zip(values, secrets_)):
            counts[i, L.privatize_longitudinal(lp, secret, int(v)).report.z] += 1
    pr = lp.probabilities
    log_like = counts * math.log(pr["p2"]) + (days - counts) * math.log(pr["q2"])  # log P(zs | y1), (n, g)
    a0 = np.array([h[0] for h in hashes], np.uint64)
    a1 = np.array([h[1] for h in hashes], np.uint64)
    scores = np.empty((n, d))
    for v in range(d):
        hv = kernel.hash_residues(lp.report, a0, a1, np.full(n, v, np.uint64)).astype(np.int64)
        first = np.where(np.arange(g)[None, :] == hv[:, None], math.log(pr["p1"]), math.log(pr["q1"]))
        scores[:, v] = math.log(prior[v]) + _logsumexp(first + log_like, axis=1)
    return float(np.mean(scores.argmax(axis=1) == values)), n * days


def subset_rr_accuracy(epsilon: float, prior: np.ndarray, k: int) -> float:
    """MAP accuracy of one report of randomized response over the prior's k most likely values at ``epsilon``
    (a value outside them answers uniformly over the k: still epsilon-LDP); k = d is GRR over the domain."""
    order = np.argsort(-prior, kind="stable")
    inside, outside = prior[order[:k]], prior[order[k:]]
    e = math.exp(epsilon)
    p, q = e / (e + k - 1), 1 / (e + k - 1)
    table = inside[:, None] * np.where(np.eye(k, dtype=bool), p, q)  # P(v) P(z | v), v and z in the k
    best_outside = float(outside.max()) / k if outside.size else 0.0
    return float(np.maximum(table.max(axis=0), best_outside).sum())


def best_one_report_accuracy(epsilon: float, prior: np.ndarray) -> tuple[float, int]:
    """The best :func:`subset_rr_accuracy` over k: what one report at ``epsilon`` tuned to the prior gives."""
    return max((subset_rr_accuracy(epsilon, prior, k), k) for k in range(1, prior.shape[0] + 1))


def memoized_attack(lp: L.LongitudinalParams, values: np.ndarray, prior: np.ndarray, rng: np.random.Generator) -> float:
    """Accuracy of the Bayes guess from the memoized response itself (infinitely many days; simulation path)."""
    n, d, g = values.shape[0], lp.report.dictionary_size, lp.g
    fleet = L.simulate_devices(lp, values, rng)
    pr = lp.probabilities
    scores = np.empty((n, d))
    for v in range(d):
        hv = kernel.hash_residues(lp.report, fleet.a0, fleet.a1, np.full(n, v, np.uint64))
        scores[:, v] = math.log(prior[v]) + np.where(hv == fleet.memoized, math.log(pr["p1"]), math.log(pr["q1"]))
    return float(np.mean(scores.argmax(axis=1) == values))


def day_accuracy(lp: L.LongitudinalParams, devices: int, seeds: int, rng: np.random.Generator,
                 prior: np.ndarray) -> dict:
    """Single-day estimates of both modes over ``seeds`` fleets (simulation path)."""
    d = lp.report.dictionary_size
    tracked = TrackedValues.range(lp.report, 0, d)
    errors = {"longitudinal": [], "one_shot": []}
    worst_sigma = 0.0
    for _ in range(seeds):
        values = rng.choice(d, size=devices, p=prior).astype(np.uint64)
        truth = np.bincount(values.astype(np.int64), minlength=d) / devices
        sigma = np.sqrt(lp.variance(truth, devices))
        fleet = L.simulate_devices(lp, values, rng)
        est = OCMSSketch(lp.report, tracked).update(L.simulate_day(lp, fleet, rng)).estimate().frequency
        errors["longitudinal"].append(est - truth)
        worst_sigma = max(worst_sigma, float(np.max(np.abs(est - truth) / sigma)))
        from cms_core.privatize import simulate_reports

        one = OCMSSketch(lp.report, tracked).update(simulate_reports(lp.report, values, rng)).estimate().frequency
        errors["one_shot"].append(one - truth)
    expected = float(np.mean(lp.variance(prior, devices)))
    measured = {k: float(np.mean(np.array(v) ** 2)) for k, v in errors.items()}
    return {"seeds": seeds, "devices_per_day": devices, "max_abs_error_in_sigma": worst_sigma,
            "measured_variance": measured["longitudinal"], "closed_form_variance": expected,
            "measured_over_closed_form": measured["longitudinal"] / expected,
            "one_shot_measured_variance": measured["one_shot"],
            "variance_ratio": measured["longitudinal"] / measured["one_shot"]}


def run(args) -> dict:
    rng = np.random.default_rng(args.seed)
    prior = zipf_prior(args.d)
    lp = L.LongitudinalParams.build(args.lifetime_epsilon, args.epsilon, args.d, mechanism="ocms",
                                    binding="bench_longitudinal@1")
    values = rng.choice(args.d, size=args.devices, p=prior).astype(np.uint64)
    started = time.perf_counter()
    one_acc, one_reports = one_shot_attack(lp.report, values, args.days, prior)
    long_acc, long_reports = longitudinal_attack(lp, values, args.days, prior, rng)
    attack_seconds = time.perf_counter() - started
    day = day_accuracy(lp, args.day_devices, args.seeds, rng, prior)
    e_inf = math.exp(args.lifetime_epsilon)
    best, best_k = best_one_report_accuracy(args.lifetime_epsilon, prior)
    memo_values = rng.choice(args.d, size=max(args.devices, 100_000), p=prior).astype(np.uint64)
    return {
        "epsilon_per_report": args.epsilon, "lifetime_epsilon": args.lifetime_epsilon, "hash_range": lp.g,
        "d": args.d, "prior": "zipf s=1.1", "devices": args.devices, "days": args.days, "seed": args.seed,
        "prior_accuracy": float(prior.max()),
        "one_shot": {"attacker_accuracy": one_acc, "reports": one_reports,
                     "spent_epsilon_per_device": args.days * args.epsilon},
        "longitudinal": {"attacker_accuracy": long_acc, "reports": long_reports,
                         "bound_accuracy": best, "bound_subset_k": best_k,
                         "grr_accuracy": subset_rr_accuracy(args.lifetime_epsilon, prior, args.d),
                         "upper_bound_accuracy": min(1.0, e_inf * float(prior.max())),
                         "memoized_accuracy": memoized_attack(lp, memo_values, prior, rng),
                         "spent_epsilon_per_device": args.lifetime_epsilon},
        "attack_seconds": attack_seconds,
        "single_day": day,
        "variance_ratio": day["variance_ratio"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_longitudinal", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="a short run (1,000 devices, 60 days, 40 seeds)")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--d", type=int, default=16)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--lifetime-epsilon", type=float, default=2.0)
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--day-devices", type=int, default=20_000)
    args = parser.parse_args(argv)
    if args.quick:
        args.devices, args.days, args.seeds = min(args.devices, 1_000), min(args.days, 60), min(args.seeds, 40)
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return 0
    lo, one, day = result["longitudinal"], result["one_shot"], result["single_day"]
    print(f"{args.devices:,} devices x {args.days} days, d = {args.d} (Zipf), eps_1 = {args.epsilon:g}, "
          f"eps_inf = {args.lifetime_epsilon:g}, g = {result['hash_range']}; prior alone guesses "
          f"{result['prior_accuracy']:.3f}")
    print(f"attacker accuracy  one-shot {one['attacker_accuracy']:.3f} (spent {one['spent_epsilon_per_device']:g} "
          f"per device)  longitudinal {lo['attacker_accuracy']:.3f} (spent {lo['spent_epsilon_per_device']:g}); "
          f"(the memoized response itself: {lo['memoized_accuracy']:.3f}); one report at eps_inf: "
          f"{lo['bound_accuracy']:.3f} (RR over the {lo['bound_subset_k']} likeliest values; GRR over all "
          f"{lo['grr_accuracy']:.3f})")
    print(f"one day, {day['seeds']} fleets of {day['devices_per_day']:,}: max |error| {day['max_abs_error_in_sigma']:.2f} "
          f"sigma; measured/closed-form variance {day['measured_over_closed_form']:.3f}; longitudinal/one-shot "
          f"{day['variance_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
