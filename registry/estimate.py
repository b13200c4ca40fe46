"""``ocms estimate --registry FILE --metric NAME CAPTURE...``: offline estimates of a registry metric, by name.

Decodes the captures with the metric version's parameters (newest live, or
``--metric-version``) and tracked set, and answers with the JSON of ``ocms
estimate`` plus the metric and version, every value named (``"value": "ATL"``).
Reports of other metrics or versions are refused by fingerprint and named in
the warnings (``fingerprint ... is app_launches@1: --metric-version 1``).
"""

from __future__ import annotations

import json
import sys

from cms_core.errors import OCMSError

from .output import write_stdout

PARAM_FLAGS = (("--epsilon", "epsilon"), ("--dictionary-size", "dictionary_size"), ("--tracked", "tracked"),
               ("--hash-range", "hash_range"), ("--mechanism", "mechanism"), ("--tracked-range", "tracked_range"),
               ("--tracked-file", "tracked_file"))


def named_document(version, doc: dict) -> dict:
    """``estimate_document``'s answer with the metric, the version and value names."""
    if version.domain == "categories":
        for record in doc["estimates"]:
            record["value"] = version.value_name(int(record["value"]))
    return {"metric": version.metric, "version": version.version, **doc}


def registry_hints(reg, params, result) -> list[str]:
    """Warnings naming the metric and version of each refused fingerprint the registry knows."""
    lines = []
    for fingerprint, messages in result.unknown_fingerprints.most_common():
        other = reg.by_fingerprint(fingerprint)
        if other is None:
            lines.append(f"warning: fingerprint {fingerprint.hex()}: {messages:,} messages of no metric in the registry")
        else:
            lines.append(f"warning: fingerprint {fingerprint.hex()}: {messages:,} messages of {other.binding} "
                         f"(--metric {other.metric} --metric-version {other.version})")
    return lines


def cmd_estimate(args) -> int:
    from producer.offline import (EXIT_NOTHING_COUNTED, EstimateOptions, decode_captures, diagnose, estimate_document,
                                  noise_line)

    from .loader import load_registry

    given = [flag for flag, name in PARAM_FLAGS if getattr(args, name, None) is not None]
    if getattr(args, "strings", False):
        given.append("--strings")
    if given:
        raise OCMSError(f"--registry takes the parameters and tracked values from the metric; drop {', '.join(given)}")
    if args.metric is None:
        raise OCMSError("--registry needs --metric NAME (which metric the captures hold)")
    reg = load_registry(args.registry)
    spec = reg.metric(args.metric)
    version = spec.version(args.metric_version) if args.metric_version is not None else spec.latest
    options = EstimateOptions(args.confidence, args.interval, args.postprocess, args.strict)
    result = decode_captures(version.params, version.tracked_values(), args.inputs)
    doc = named_document(version, estimate_document(version.params, result, options))
    write_stdout(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    prog = "ocms estimate"
    # diagnose() explains refused fingerprints in terms of flags; here the registry names them instead.
    lines = [line for line in diagnose(version.params, result)
             if not line.startswith(("warning: these messages carry other", "warning:   fingerprint"))]
    for line in lines + registry_hints(reg, version.params, result) + [noise_line(doc)]:
        if line:
            print(f"{prog}: {line}", file=sys.stderr)
    problems = bool(result.rejected) or bool(result.damage)
    if result.sketch.n == 0 and problems:
        why = (f"every readable message was rejected (none is {version.binding})" if result.rejected
               else "the captures hold no complete message")
        print(f"{prog}: error: nothing counted: {why} (exit {EXIT_NOTHING_COUNTED})", file=sys.stderr)
        return EXIT_NOTHING_COUNTED
    if options.strict and result.damage:
        print(f"{prog}: error: --strict: {len(result.damage)} capture file(s) damaged (exit {EXIT_NOTHING_COUNTED})",
              file=sys.stderr)
        return EXIT_NOTHING_COUNTED
    if result.sketch.n == 0:
        print(f"{prog}: warning: the captures hold no reports", file=sys.stderr)
    return 0
