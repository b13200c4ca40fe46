"""Reports: what a device sends, one at a time or as a columnar batch.

A report is (a0, a1, z): a0, a1 uniform in the field (the device's hash
function h(x) = (a0 + a1 x) mod m, field arithmetic), and z the randomized
response over [m] of h(value). Batches hold columns: ``a0``/``a1`` as uint64
(n,) arrays, or (n, 2) little-endian limbs for GF(2^128); ``z`` as uint32 (n,).

A direct randomized-response report is just z; in memory it carries the
identity coefficients (a0, a1) = (0, 1), so h(x) = x for every x < d and every
decode path (kernels, reference) stays valid; ``validate`` enforces them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from .errors import InvalidReportError
from .params import OCMSParams
from .values import array_to_elements, elements_to_array, limbs_for


def identity_coefficients(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(a0, a1) columns of n direct reports: the identity hash (0, 1)."""
    return np.zeros(n, np.uint64), np.ones(n, np.uint64)


class Report(NamedTuple):
    a0: int
    a1: int
    z: int


@dataclass(frozen=True, eq=False)
class ReportBatch:
    a0: np.ndarray
    a1: np.ndarray
    z: np.ndarray

    def __post_init__(self):
        n = self.z.shape[0]
        if self.a0.shape != self.a1.shape or self.a0.shape[0] != n or self.z.ndim != 1:
            raise InvalidReportError(f"column shapes disagree: a0 {self.a0.shape}, a1 {self.a1.shape}, z {self.z.shape}")
        if self.a0.dtype != np.uint64 or self.a1.dtype != np.uint64 or self.z.dtype != np.uint32:
            raise InvalidReportError("columns must be uint64 (a0, a1) and uint32 (z)")

    def __len__(self) -> int:
        return int(self.z.shape[0])

    @classmethod
    def empty(cls, params: OCMSParams) -> "ReportBatch":
        shape = (0,) if limbs_for(params) == 1 else (0, 2)
        return cls(np.empty(shape, np.uint64), np.empty(shape, np.uint64), np.empty(0, np.uint32))

    @classmethod
    def from_reports(cls, params: OCMSParams, reports: Sequence[Report]) -> "ReportBatch":
        if not reports:
            return cls.empty(params)
        limbs = limbs_for(params)
        batch = cls(
            elements_to_array([r.a0 for r in reports], limbs),
            elements_to_array([r.a1 for r in reports], limbs),
            np.array([r.z for r in reports], dtype=np.uint32),
        )
        return batch

    def to_reports(self) -> list[Report]:
        return [Report(a0, a1, int(z)) for a0, a1, z in zip(array_to_elements(self.a0), array_to_elements(self.a1), self.z)]

    @staticmethod
    def concat(batches: Sequence["ReportBatch"]) -> "ReportBatch":
        if len(batches) == 1:  # batches are never changed in place: no copy needed
            return batches[0]
        return ReportBatch(
            np.concatenate([b.a0 for b in batches]),
            np.concatenate([b.a1 for b in batches]),
            np.concatenate([b.z for b in batches]),
        )

    def slice(self, start: int, stop: int) -> "ReportBatch":
        return ReportBatch(self.a0[start:stop], self.a1[start:stop], self.z[start:stop])

    def validate(self, params: OCMSParams) -> "ReportBatch":
        """Raise :class:`InvalidReportError` unless every report fits ``params``."""
        limbs = limbs_for(params)
        if (self.a0.ndim == 1) != (limbs == 1):
            raise InvalidReportError(f"coefficients need {limbs} uint64 limb(s) for {params.field}")
        if len(self) == 0:
            return self
        if params.field.kind == "prime":
            if int(self.a0.max()) >= params.field.order:
                raise InvalidReportError(f"a0 >= field order {params.field.order}")
            if int(self.a1.max()) >= params.field.order:
                raise InvalidReportError(f"a1 >= field order {params.field.order}")
        if int(self.z.max()) >= params.hash_range:
            raise InvalidReportError(f"z >= hash range m={params.hash_range}")
        if params.is_direct and (self.a0.any() or not (self.a1 == 1).all()):
            raise InvalidReportError("direct randomized-response reports carry the identity coefficients (0, 1)")
        return self
