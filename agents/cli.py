"""The ``ocms`` command line: one entry point, one subcommand per job.

Subcommands import their heavy dependencies lazily so that ``ocms plan``
starts instantly. Bad flags exit with status 2 and a message naming the flag.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from cms_core.errors import OCMSError


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not finite")
    return value


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            if "^" in text:  # allow 2^64 style
                base, _, exp = text.partition("^")
                try:
                    value = int(base) ** int(exp)
                except ValueError:
                    raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
            else:
                raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value

    return parse


def _add_params_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epsilon", "-e", type=_finite_float, required=True, help="per-report LDP budget (0, 100]")
    p.add_argument("--mode", choices=["mse", "l2"], default="mse", help="what m minimises (default mse)")
    p.add_argument("--f-star", type=_finite_float, default=1.0, help="prior upper bound on any frequency (mse mode)")
    p.add_argument("--dictionary-size", "-d", type=_int_at_least(1), help="integer values are in [0, d) (e.g. 100000 or 2^64)")
    p.add_argument("--strings", action="store_true", help="values are strings (128-bit fingerprints, GF(2^128))")
    p.add_argument("--tracked", type=_int_at_least(1), help="number of tracked values D (needed by l2)")
    p.add_argument("--hash-range", type=_int_at_least(2), help="explicit m (overrides the optimum)")


def _params_from_args(args):
    from cms_core import OCMSParams

    if args.strings and args.dictionary_size is not None:
        raise OCMSError("--strings and --dictionary-size are exclusive (strings use 128-bit fingerprints)")
    if not args.strings and args.dictionary_size is None:
        raise OCMSError("--dictionary-size is required for integer values (or pass --strings)")
    return OCMSParams.build(
        args.epsilon,
        args.dictionary_size,
        mode=args.mode,
        f_star=args.f_star,
        tracked_count=args.tracked,
        hash_range=args.hash_range,
        value_domain="string" if args.strings else "integer",
    )


def cmd_plan(args) -> int:
    from cms_core import planning

    params = _params_from_args(args)
    result = {"params": params.describe()}
    if args.n is not None:
        result["prediction"] = planning.predict(params, args.n, args.confidence, args.tracked)
    target = {
        "target_mse": args.target_mse,
        "target_ci_half_width": args.target_ci,
        "target_l2": args.target_l2,
    }
    given = {k: v for k, v in target.items() if v is not None}
    if given:
        result["reports_needed"] = planning.reports_needed(
            params, confidence=args.confidence, tracked_count=args.tracked, **given
        )
        result["target"] = given
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    d = result["params"]
    print(f"epsilon          {d['epsilon']:g}  (mode {d['mode']}" + (f", f*={d['f_star']:g}" if d["f_star"] is not None else "") + ")")
    print(f"hash range m     {d['hash_range']}   (m' = {d['effective_hash_range']:.12g})")
    print(f"field            {d['field']}   (q={d['q']}, r={d['r']})")
    print(f"report size      {d['report_bytes']} bytes payload (a0, a1, z)")
    print(f"keep probability {d['keep_probability']:.6g}")
    print(f"fingerprint      {d['fingerprint']}")
    if "prediction" in result:
        pr = result["prediction"]
        print(f"with n={pr['n']}:")
        print(f"  worst-case MSE   {pr['worst_case_mse']:.4g}  (std {pr['worst_case_std']:.4g})")
        print(f"  {pr['confidence']:.0%} CI half-width  +-{pr['ci_half_width']:.4g} in frequency, +-{pr['ci_half_width_count']:.4g} in count")
        if "l2_loss" in pr:
            print(f"  l2 over D={pr['tracked_count']}  {pr['l2_loss']:.4g}; l1 <= {pr['l1_bound']:.4g}")
    if "reports_needed" in result:
        (name, value), = result["target"].items()
        print(f"reports needed for {name.replace('target_', '')} <= {value:g}: {result['reports_needed']}")
    return 0


def cmd_not_yet(args) -> int:
    """Placeholder for the pipeline commands still being built (issues 3-5)."""
    print(
        f"ocms {args.command}: not implemented yet. Available now: `ocms plan` (cms_core); "
        "the broker/worker/simulator pipeline lands with the producer and agents work.",
        file=sys.stderr,
    )
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ocms", description="LDP frequency estimation with OCMS+RR")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    plan = sub.add_parser("plan", help="choose parameters and predict accuracy / reports needed")
    _add_params_flags(plan)
    plan.add_argument("--n", type=_int_at_least(1), help="number of reports to predict accuracy for")
    plan.add_argument("--confidence", type=_finite_float, default=0.95, help="CI confidence (default 0.95)")
    plan.add_argument("--target-mse", type=_finite_float, help="report the n needed for this worst-case MSE")
    plan.add_argument("--target-ci", type=_finite_float, help="report the n needed for this CI half-width (frequency)")
    plan.add_argument("--target-l2", type=_finite_float, help="report the n needed for this l2 loss (needs --tracked)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan)
    for name, text in [("run", "broker + worker + simulated fleet (not yet)"), ("worker", "the Faust worker (not yet)"),
                       ("simulate", "fleet simulator (not yet)"), ("estimate", "offline estimate from a dump (not yet)")]:
        sub.add_parser(name, help=text).set_defaults(func=cmd_not_yet)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except OCMSError as exc:
        parser.exit(2, f"ocms {args.command}: error: {exc}\n")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
