"""OCMS+RR and its special cases behind the oracle interface, for evaluation only: MSE-OCMS+RR, l-OCMS+RR,
direct randomized response (``mechanism="direct"``) and OLH (CMS+RR with m = round(1 + e^eps)).
"""

from __future__ import annotations

import math

import numpy as np

from .baselines_oracle import FrequencyOracle, check_tracked, check_values
from .errors import InvalidParameterError
from .params import OCMSParams
from .privatize import simulate_reports
from .reports import ReportBatch
from .sketch import OCMSSketch
from .values import TrackedValues, limbs_for


class OCMSOracle(FrequencyOracle):
    """OCMS+RR (this library) behind the oracle interface, for evaluation only.

    simulate: :func:`cms_core.privatize.simulate_reports` (simulation path);
    estimate: :class:`cms_core.sketch.OCMSSketch` g(x) with the exact m' of
    H_api. Privacy: eps-LDP per report (see :mod:`cms_core.params`).
    Runtime: O(n) to simulate, O(n * D) to decode (compiled kernel).
    Equivalent CMS+RR: itself, m' = 1 / c_bar(H_api) ~ m.
    """

    def __init__(self, params: OCMSParams, name: str | None = None):
        if not isinstance(params, OCMSParams):
            raise InvalidParameterError("params", type(params).__name__, "expected OCMSParams")
        if params.value_domain != "integer":
            raise InvalidParameterError("value_domain", params.value_domain, "the oracles take integer values")
        if limbs_for(params) != 1:
            raise InvalidParameterError("dictionary_size", params.dictionary_size, "the oracles take uint64 values")
        self.params = params
        self.name = name or ("direct" if params.is_direct else {"mse": "mse-ocms", "l2": "l-ocms"}.get(params.mode, "ocms"))
        self.epsilon = params.epsilon
        self.dictionary_size = params.dictionary_size

    @classmethod
    def mse_optimized(cls, epsilon: float, dictionary_size: int, f_star: float = 1.0) -> "OCMSOracle":
        """MSE-OCMS+RR: m minimises the worst-case MSE over f in [0, f*]."""
        return cls(OCMSParams.build(epsilon, dictionary_size, mode="mse", f_star=f_star))

    @classmethod
    def l_optimized(cls, epsilon: float, dictionary_size: int, tracked_count: int) -> "OCMSOracle":
        """l-OCMS+RR: m minimises the l2 (hence the l1 bound) over D tracked values."""
        return cls(OCMSParams.build(epsilon, dictionary_size, mode="l2", tracked_count=tracked_count))

    def simulate(self, values: np.ndarray, rng: np.random.Generator) -> ReportBatch:
        """Simulation path (seeded): reports (a0, a1, z) of OCMS+RR, one per value."""
        return simulate_reports(self.params, check_values(values, self.dictionary_size), rng)

    def estimate(self, reports: ReportBatch, tracked: np.ndarray) -> np.ndarray:
        if not isinstance(reports, ReportBatch):
            raise InvalidParameterError("reports", type(reports).__name__, "expected ReportBatch")
        tracked = check_tracked(tracked, self.dictionary_size)
        tv = TrackedValues.of(self.params, [int(v) for v in tracked])
        return OCMSSketch(self.params, tv).update(reports).estimate().frequency

    def variance(self, f, n):
        """Theorem g_x_def with c_bar of H_api (theory.estimator_variance)."""
        return self.params.variance(f, n)

    @property
    def report_bits(self) -> int:
        """a0, a1 at the field's bit width and z in ceil(log2 m) bits (z alone for direct RR)."""
        return self.params.report_bits

    @property
    def equivalent_hash_range(self) -> float:
        """m' (direct RR: no collisions, m' is infinite)."""
        m_eff = self.params.effective_hash_range
        return math.inf if m_eff is None else float(m_eff)


class OptimizedLocalHashing(OCMSOracle):
    """OLH (Wang et al. 2017), for evaluation only: CMS+RR with m = round(1 + e^eps).

    The paper's point: OLH *is* CMS+RR with m = 1 + e^eps (and a random hash
    per report), so it reuses the OCMS machinery with that fixed m. The
    estimate is the standard OLH estimator (C(x)/n - 1/m) / (p - 1/m), C(x)
    the reports supporting x, p = e/(e + m - 1), with 1/m replaced by the
    exact collision probability of H_api (identical to g(x); equal to OLH's
    when m' = m). Privacy: eps-LDP per report. Runtime: O(n) / O(n * D).
    """

    def __init__(self, epsilon: float, dictionary_size: int):
        m = max(2, round(1.0 + math.exp(min(float(epsilon), 700.0))))
        super().__init__(OCMSParams.build(epsilon, dictionary_size, hash_range=m), name="olh")

