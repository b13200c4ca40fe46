"""cms_core: the OCMS+RR estimator library (pure numerics, no I/O).

Public API::

    params = OCMSParams.build(epsilon=2.0, dictionary_size=10_000)    # m, field chosen
    report = privatize(params, 42)                                     # device path (CSPRNG)
    batch = ReportBatch.from_reports(params, [report, ...])
    sketch = OCMSSketch(params, TrackedValues.range(params, 0, 10_000))
    sketch.update(batch)
    est = sketch.estimate(confidence=0.95, postprocess_method="norm_sub")

    # Direct randomized response (m = d) or the lower exact error of the two:
    params = OCMSParams.build(epsilon=4.0, dictionary_size=16, mechanism="auto", mode="l2", tracked_count=16)
    compare_mechanisms(4.0, 16, mode="l2", tracked_count=16).describe()   # both, and the pick

Specification: the seed paper's OCMS+RR, corrected by docs/paper-errata.md ("erratum N" in comments is item N there).
"""

from .errors import (
    BackendUnavailableError,
    FingerprintMismatchError,
    InvalidParameterError,
    InvalidReportError,
    InvalidValueError,
    OCMSError,
    ParameterMismatchError,
    PrivacyBudgetError,
    SerializationError,
)
from .fields import PRIME_64, BinaryField, PrimeField, choose_field
from .kernel import BACKEND, match_counts, reference_match_counts
from .params import OCMSParams, compare_mechanisms
from .privatize import privatize, simulate_reports
from .reports import Report, ReportBatch
from .sketch import Estimates, OCMSSketch
from .values import TrackedValues, encode_value, string_fingerprint

__all__ = [
    "BACKEND",
    "BackendUnavailableError",
    "BinaryField",
    "Estimates",
    "FingerprintMismatchError",
    "InvalidParameterError",
    "InvalidReportError",
    "InvalidValueError",
    "OCMSError",
    "OCMSParams",
    "OCMSSketch",
    "PRIME_64",
    "ParameterMismatchError",
    "PrimeField",
    "PrivacyBudgetError",
    "Report",
    "ReportBatch",
    "SerializationError",
    "TrackedValues",
    "choose_field",
    "compare_mechanisms",
    "encode_value",
    "match_counts",
    "privatize",
    "reference_match_counts",
    "simulate_reports",
    "string_fingerprint",
]
