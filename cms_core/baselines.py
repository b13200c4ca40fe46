"""Baseline LDP frequency oracles behind one interface -- for evaluation only.

Every class here exists so that benchmark and experiment scripts can loop over
estimators uniformly (paper Section "Experiment"); none of them is a device
path. ``simulate`` is a **simulation path**: vectorized, driven by a seeded
numpy ``Generator``, float64 keep probabilities. A seeded PRNG is not a privacy
mechanism; devices use :func:`cms_core.privatize.privatize` (OCMS+RR only).

Each mechanism is eps-LDP per report (the only value-dependent part of a report
goes through randomized response whose probability ratio is e^eps), and each is
equivalent to a CMS+RR (paper Section "Connection with Existing Frequency
Estimators"); ``equivalent_hash_range`` gives the m of that CMS+RR:

=========  =========================================  ===========================
name       mechanism                                  equivalent CMS+RR
=========  =========================================  ===========================
mse-ocms   OCMS+RR, m minimising the worst-case MSE   itself (m' of H_api)
l-ocms     OCMS+RR, m minimising the l2 loss over D   itself (m' of H_api)
he         Hadamard Encoding (Bassily-Smith)          m = 2, exactly pairwise
cms-he     Apple's CMS + Hadamard Encoding            m' = 2/(1+c1) ~ 2m/(m+1)
rhr        Recursive Hadamard Response (Chen et al.)  skewed: c = 1/2 or 0, R over 2^b
olh        Optimized Local Hashing (Wang et al.)      m = round(1 + e^eps)
direct     direct randomized response (GRR, k-RR)      m = d, identity hash (c = 0)
=========  =========================================  ===========================

Notation: e = e^eps, n reports, D tracked values, f a true frequency.
Variances are for a fixed dataset (only the mechanism is random), as in the
paper's Lemma var_hat_f; they come from :mod:`cms_core.theory`.

Runtime: ``simulate`` is O(n); ``estimate`` is O(n * D) (chunked, so memory
stays bounded), except CMS+HE which may instead use Apple's sketch path,
O(n + k m log m + k D).

The interface and its shared decode are :mod:`cms_core.baselines_oracle`; the OCMS+RR family (mse-ocms, l-ocms,
olh, direct) :mod:`cms_core.baselines_ocms`; the Hadamard family (he, cms-he, rhr)
:mod:`cms_core.baselines_hadamard`. This module builds any of them by name (:func:`make_oracle`).
"""

from __future__ import annotations

from .baselines_hadamard import (AppleCMSHE, AppleCMSReports, HadamardEncoding, HadamardReports, RHRReports,
                                 RecursiveHadamardResponse, fwht)
from .baselines_ocms import OCMSOracle, OptimizedLocalHashing
from .baselines_oracle import FrequencyOracle
from .errors import InvalidParameterError
from .params import OCMSParams

ORACLE_NAMES = ("mse-ocms", "l-ocms", "he", "cms-he", "rhr", "olh", "direct")


# ---------------------------------------------------------------- registry
def make_oracle(name: str, epsilon: float, dictionary_size: int, tracked_count: int | None = None) -> FrequencyOracle:
    """The oracle registered as ``name`` (see :data:`ORACLE_NAMES`), for evaluation only.

    "mse-ocms": MSE-OCMS+RR with f* = 1; "l-ocms": l-OCMS+RR (needs
    ``tracked_count``); "he"; "cms-he" (k = 2048, m = 1024); "rhr" (b =
    ceil(eps), clamped); "olh"; "direct" (randomized response over d). ``tracked_count``
    is ignored by the others.
    """
    if name == "mse-ocms":
        return OCMSOracle.mse_optimized(epsilon, dictionary_size)
    if name == "l-ocms":
        if tracked_count is None:
            raise InvalidParameterError("tracked_count", None, "oracle 'l-ocms' needs the number of tracked values")
        return OCMSOracle.l_optimized(epsilon, dictionary_size, tracked_count)
    if name == "he":
        return HadamardEncoding(epsilon, dictionary_size)
    if name == "cms-he":
        return AppleCMSHE(epsilon, dictionary_size)
    if name == "rhr":
        return RecursiveHadamardResponse(epsilon, dictionary_size)
    if name == "olh":
        return OptimizedLocalHashing(epsilon, dictionary_size)
    if name == "direct":
        return OCMSOracle(OCMSParams.build(epsilon, dictionary_size, mechanism="direct"))
    raise InvalidParameterError("oracle", name, f"expected one of {ORACLE_NAMES}")


__all__ = [
    "AppleCMSHE",
    "AppleCMSReports",
    "FrequencyOracle",
    "HadamardEncoding",
    "HadamardReports",
    "OCMSOracle",
    "ORACLE_NAMES",
    "OptimizedLocalHashing",
    "RHRReports",
    "RecursiveHadamardResponse",
    "fwht",
    "make_oracle",
]
