"""How answers are written: values by name (:class:`Naming`), estimates as JSON records (:func:`records`),
and the JSON text of an answer (:func:`to_json`), which never fails on one record that cannot be written.

Values travel as ``cms_core.values.value_to_json`` writes them (always a JSON string; integers as decimal
digits) and are read back with ``value_from_json``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
from prometheus_client import Counter as PrometheusCounter

from cms_core.sketch import Estimates
from cms_core.values import value_to_json

from .privacy import WITHHELD_FIELDS, withheld

#: Record fields that can be infinite (a bound the theorem cannot give): JSON null.
_BOUND_FIELDS = ("ci_low", "ci_high", "count_ci_low", "count_ci_high", "processed_ci_low", "processed_ci_high",
                 "processed_count_ci_low", "processed_count_ci_high")


#: Records left out of JSON answers because they could not be written, by (field, reason); the answer
#: process's counts come back with each answer (``finish_json``). Exported by every /metrics that serves answers.
ANSWER_RECORDS_DROPPED = PrometheusCounter(
    "ocms_answer_records_dropped", "records left out of a JSON answer because they could not be written "
    "(text that is not valid Unicode, a number that is not finite), by the answer's field and the reason",
    ["field", "reason"], registry=None)


def _dump(doc, indent: int | None = None) -> bytes:
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(doc, allow_nan=False, ensure_ascii=False, indent=indent, separators=separators).encode("utf-8")


def _unwritable(record) -> str | None:
    """Why ``record`` cannot be written as JSON (a reason name), or None."""
    try:
        _dump(record)
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for it (checked before ValueError, its base)
        return "text_not_unicode"
    except ValueError:
        return "number_not_finite"
    except TypeError:
        return "not_json_type"
    return None


def _without_bad_records(node, field: str | None, dropped: dict) -> object:
    """``node`` without the records (dicts in a list, at any depth) that cannot be written; each left out
    is counted under (the list's field, reason). A record keeps its good nested records."""
    if isinstance(node, dict):
        return {key: _without_bad_records(value, key, dropped) for key, value in node.items()}
    if isinstance(node, list):
        kept = []
        for item in node:
            if isinstance(item, dict):
                item = _without_bad_records(item, field, dropped)
                reason = _unwritable(item)
                if reason is not None:
                    dropped[(field, reason)] = dropped.get((field, reason), 0) + 1
                    continue
            kept.append(item)
        return kept
    return node


def json_answer(doc: dict, indent: int | None = None) -> tuple[bytes, dict]:
    """(UTF-8 JSON text of ``doc``, {(field, reason): records left out}).

    One record that cannot be written (text with a lone surrogate, a NaN) never fails the whole
    answer: it is left out, and the answer says so in ``dropped_records`` ({field: {reason: n}}).
    """
    try:
        return _dump(doc, indent), {}
    except (ValueError, TypeError):
        pass
    dropped: dict = {}
    pruned = _without_bad_records(doc, None, dropped)
    summary: dict = {}
    for (field, reason), n in sorted(dropped.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        summary.setdefault(str(field), {})[reason] = n
    pruned["dropped_records"] = summary
    return _dump(pruned, indent), dropped


def count_dropped(dropped: dict) -> None:
    for (field, reason), n in dropped.items():
        ANSWER_RECORDS_DROPPED.labels(str(field), reason).inc(n)


def to_json(doc: dict) -> bytes:
    """JSON text of an answer: UTF-8, no NaN/Infinity (records carry null for an unbounded end); a record
    that cannot be written is left out and counted (:func:`json_answer`, ocms_answer_records_dropped_total)."""
    body, dropped = json_answer(doc)
    count_dropped(dropped)
    return body


def records(est: Estimates, counts) -> list[dict]:
    """JSON records of every value of ``est`` with their match counts: the value as
    ``value_to_json`` writes it, an unbounded interval end as null (JSON has no infinity)."""
    counts = [int(c) for c in counts]
    if est.n == 0:
        return [{"value": value_to_json(v), "match_count": c} for v, c in zip(est.values, counts)]
    out = est.as_records()
    unbounded = not (np.isfinite(est.ci_low).all() and np.isfinite(est.ci_high).all())
    for record, count in zip(out, counts):
        record["value"] = value_to_json(record["value"])
        record["match_count"] = count
        if unbounded:
            for field in _BOUND_FIELDS:
                if not math.isfinite(record[field]):
                    record[field] = None
    return out


@dataclass(frozen=True)
class Naming:
    """What turns a version's answer into a named one: metric, version, value names, min_reports.

    Picklable (it travels with the answer's job to the answer process, agents.web), applied to the
    finished answer by ``Estimator.finish``."""

    metric: str
    version: int
    mechanism: str
    min_reports: int
    names: tuple[str, ...] | None  # category names by id; None: values are their own names

    def name_of(self, label: str) -> str:
        """The name of a value as ``value_to_json`` wrote it (a category id's digits -> its name)."""
        return label if self.names is None else self.names[int(label)]

    def withheld(self, n: int) -> bool:
        return withheld(n, self.min_reports)

    def __call__(self, doc: dict) -> dict:
        """An answer with the metric, version and value names, and withheld windows emptied."""
        out = {"metric": self.metric, "version": self.version, "mechanism": self.mechanism,
               "min_reports": self.min_reports}
        out.update(doc)
        withheld = self.withheld(doc.get("n", 0))
        out["withheld"] = withheld
        if "estimates" in doc:
            out["estimates"] = [] if withheld else [self._record(r) for r in doc["estimates"]]
        if "estimate" in doc:
            out["estimate"] = None if withheld else self._record(doc["estimate"])
        if "top" in doc:
            out["top"] = [] if withheld else [self._record(r) for r in doc["top"]]
        if "histogram" in doc:  # a numeric metric's answer (issue 40)
            out["histogram"] = None if withheld else doc["histogram"]
        if "points" in doc:
            out["value"] = self.name_of(doc["value"])
            out["withheld"] = False  # a trend withholds point by point
            out["points"] = [self._point(p) for p in doc["points"]]
        return out

    def _record(self, record: dict) -> dict:
        return dict(record, value=self.name_of(record["value"]))

    def _point(self, point: dict) -> dict:
        point = self._record(point)
        if self.withheld(point["n"]):
            for name in WITHHELD_FIELDS:
                point.pop(name, None)
            point["withheld"] = True
        else:
            point["withheld"] = False
        return point
