"""The maximal-gain poisoning attack, simulated: evidence for the exposure ``ocms plan`` states.

Cao, Jia, Gong, "Data Poisoning Attacks to Local Differential Privacy Protocols" (USENIX
Security 2021): fake devices skip randomized response and send reports crafted to support
a target value. Against OCMS+RR the best such report keeps fresh random coefficients (a0,
a1), like any device, and sets z = h(target), so it always matches the target; against
direct RR it is z = target. Every fake is a valid report, indistinguishable by any
per-report check; what it does to the estimate is :func:`cms_core.theory.poisoning_gain`.

This module builds such reports for the tests and benchmarks/bench_poisoning.py (seeded
numpy ``Generator``: a simulation, never a device path).
"""

from __future__ import annotations

import numpy as np

from . import kernel
from .params import OCMSParams
from .privatize import _random_coefficients
from .reports import ReportBatch, identity_coefficients
from .values import elements_to_array, encode_value, limbs_for


def maximal_gain_reports(params: OCMSParams, target, n: int, rng: np.random.Generator) -> ReportBatch:
    """n fake reports that each match ``target`` (a value of ``params``' domain: an integer or a string)."""
    element = encode_value(params, target)
    elements = elements_to_array([element] * n, limbs_for(params))
    if params.is_direct:
        a0, a1 = identity_coefficients(n)
        z = elements.astype(np.uint32)
    else:
        a0 = _random_coefficients(params, rng, n)
        a1 = _random_coefficients(params, rng, n)
        z = kernel.hash_residues(params, a0, a1, elements).astype(np.uint32)
    return ReportBatch(a0, a1, z)


__all__ = ["maximal_gain_reports"]
