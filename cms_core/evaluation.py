"""Seeded Monte-Carlo rounds for statistical tests and experiments.

One round = the fixed dataset ``values`` (n field elements) privatized once on
the simulation path (fresh hash functions and randomized response), decoded
for the tracked elements. The dataset is held fixed across rounds, as in the
paper's analysis: the randomness is the hash assignment and the perturbation.
"""

from __future__ import annotations

import numpy as np

from . import kernel, theory
from .params import OCMSParams
from .privatize import simulate_reports


def round_match_counts(
    params: OCMSParams, values: np.ndarray, tracked_elements: np.ndarray, rounds: int, rng: np.random.Generator,
    *, chunk_rounds: int = 256,
) -> np.ndarray:
    """(rounds, D) int64 match counts, each row one independent round over ``values``."""
    n = int(values.shape[0])
    out = np.empty((rounds, tracked_elements.shape[0]), np.int64)
    for start in range(0, rounds, chunk_rounds):
        r = min(chunk_rounds, rounds - start)
        batch = simulate_reports(params, np.tile(values, (r,) + (1,) * (values.ndim - 1)), rng)
        for j in range(tracked_elements.shape[0]):
            x = np.broadcast_to(tracked_elements[j], batch.a0.shape).copy()
            hit = kernel.hash_residues(params, batch.a0, batch.a1, x) == batch.z
            out[start : start + r, j] = hit.reshape(r, n).sum(axis=1)
    return out


def estimates_from_counts(params: OCMSParams, counts: np.ndarray, n: int) -> np.ndarray:
    """g(x) = A M/n + B applied elementwise (the sketch's estimator, vectorized)."""
    return theory.estimate_frequencies(params.estimator_coefficients, counts, n)
