"""Black-box audit of both budgets of longitudinal reports (issue 38), as benchmarks/privacy_audit.py audits one-shot ones.

    .venv/bin/python -m benchmarks.privacy_audit_longitudinal [--trials 200000] [--json]

Two claims per case, each audited from CSPRNG device-path output of the real Python client
(:func:`cms_core.longitudinal.privatize_longitudinal`), a fresh device secret per trial, inputs x1 = 0
and x2 = 1, a Clopper-Pearson lower bound on epsilon at alpha = 0.01 for the most distinguishing event
(:func:`cms_core.audit.audit_batches`):

* **eps_1 of one report**: the report (a0, a1, z) itself;
* **eps_inf of the memoized response**: (a0, a1, y1), what a device's linked reports converge to (an
  attacker that averages infinitely many of them learns exactly that).

Verdicts as for one-shot reports: the bound must not exceed the claim (no leak) and must reach 80% of
it (calibrated; 80% rather than 90% at the default trials, whose bound is looser). Negative controls: a
device whose memoized round keeps with the threshold of 1.25 eps_inf, and one whose second round
keeps with the threshold of a report at 1.25 eps_1, each claiming the true budgets: the audit must
catch them.
"""

from __future__ import annotations

import argparse
import json
import time

from cms_core import longitudinal as L
from cms_core.audit import audit_batches
from cms_core.reports import Report, ReportBatch

CASES = [  # (label, eps_inf, eps_1, d, mechanism)
    ("OCMS+RR eps_inf=2 eps_1=1 d=1000", 2.0, 1.0, 1000, "ocms"),
    ("OCMS+RR eps_inf=4.39 eps_1=1.07 d=10000", 4.39, 1.07, 10_000, "ocms"),
    ("direct RR eps_inf=2 eps_1=1 d=4", 2.0, 1.0, 4, "direct"),
    ("direct RR eps_inf=4 eps_1=2 d=16", 4.0, 2.0, 16, "direct"),
]


def leaky_memo(lp: L.LongitudinalParams) -> L.LongitudinalParams:
    """The same parameters with a memoized round at 1.25 eps_inf (the second round re-tuned to it)."""
    return L.LongitudinalParams(lp.lifetime_epsilon * 1.25, lp.report)


def leaky_report(lp: L.LongitudinalParams) -> L.LongitudinalParams:
    """The same hash range with reports at 1.25 eps_1 (what a wrong report threshold does)."""
    import dataclasses

    report = dataclasses.replace(lp.report, epsilon=lp.epsilon * 1.25)
    return L.LongitudinalParams(max(lp.lifetime_epsilon, report.epsilon * 1.01), report)


def audit(lp: L.LongitudinalParams, device_lp: L.LongitudinalParams, trials: int, alpha: float) -> dict:
    """Both budgets of ``device_lp``'s reports, claimed as ``lp``'s."""
    out = {}
    for what, claimed, params in (("report", lp.epsilon, lp.report), ("memoized", lp.lifetime_epsilon, lp.memo)):
        batches = []
        for x in (0, 1):
            made = []
            for _ in range(trials):
                secret = L.new_device_secret()
                if what == "report":
                    made.append(L.privatize_longitudinal(device_lp, secret, x).report)
                else:
                    a0, a1 = L.device_hash(device_lp, secret)
                    y = L.hashed_value(device_lp, secret, x)
                    made.append(Report(a0, a1, L.memoized_response(device_lp, secret, y)))
            batches.append(ReportBatch.from_reports(params, made))
        result = audit_batches(params, 0, 1, *batches, alpha=alpha, claimed_epsilon=claimed)
        out[what] = {"claimed": claimed, "epsilon_lower_bound": result.epsilon_lower_bound, "leaks": result.leaks,
                     "fraction_of_claim": result.fraction_of_claim}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200_000, help="device-path outputs per input")
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows, failures = [], 0
    for label, eps_inf, eps_1, d, mechanism in CASES:
        lp = L.LongitudinalParams.build(eps_inf, eps_1, d, mechanism=mechanism)
        for kind, device in (("honest", lp), ("LEAKY memo 1.25 eps_inf", leaky_memo(lp)),
                             ("LEAKY report 1.25 eps_1", leaky_report(lp))):
            if kind != "honest" and mechanism == "ocms" and eps_inf > 4:
                continue  # the controls once per mechanism family are enough at this cost
            started = time.perf_counter()
            result = audit(lp, device, args.trials, args.alpha)
            if kind == "honest":
                ok = all(not r["leaks"] and r["fraction_of_claim"] >= 0.8 for r in result.values())
            else:
                target = "memoized" if "memo" in kind else "report"
                ok = result[target]["leaks"]
            failures += not ok
            rows.append({"case": label, "device": kind, "g": lp.g, **result, "ok": ok,
                         "seconds": time.perf_counter() - started})
    if args.json:
        print(json.dumps({"trials": args.trials, "alpha": args.alpha, "rows": rows}))
    else:
        print(f"trials per input {args.trials:,}; Clopper-Pearson alpha {args.alpha}; inputs x1=0, x2=1")
        print(f"{'case':42} {'device':24} {'eps_1':>6} {'lb':>7} {'eps_inf':>7} {'lb':>7}  verdict")
        for r in rows:
            print(f"{r['case']:42} {r['device']:24} {r['report']['claimed']:6.3g} "
                  f"{r['report']['epsilon_lower_bound']:7.3f} {r['memoized']['claimed']:7.3g} "
                  f"{r['memoized']['epsilon_lower_bound']:7.3f}  {'ok' if r['ok'] else 'FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
