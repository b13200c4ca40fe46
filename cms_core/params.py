"""Frozen, self-validating parameters of the two mechanisms.

Mechanisms (``OCMSParams.mechanism``):

* ``"ocms"`` -- OCMS+RR of the seed paper: a report is (a0, a1, z), a fresh
  hash h(x) = (a0 + a1 x mod p) mod m and z = randomized response over [m] of
  h(value); m chosen by the paper's HashRange (corrected, docs/paper-errata.md).
* ``"direct"`` -- direct randomized response over the d values (GRR, k-RR):
  the CMS whose hash is the identity, m = d, so no two values ever collide
  (c = 0). A report is just z; in memory it carries the constant identity
  coefficients (a0, a1) = (0, 1), so every decode path computes h(x) = x, and
  the wire format never sends them. Integer dictionaries with d <= 2^32 - 1.

``build(..., mechanism="auto")`` picks the mechanism with the lower exact
worst-case MSE (mode "mse") or l2 loss (mode "l2"); the choice is part of the
fingerprint (OCMS+RR fingerprints are those of wire format v1).

Privacy guarantee: every report built from an :class:`OCMSParams` is
``epsilon``-locally differentially private: the only part of a report that
depends on the device's value is z, the output of randomized response over [m]
with keep probability e^eps / (e^eps + m - 1); (a0, a1) are drawn independently
of the value (OCMS+RR) or fixed (direct). Anything computed from reports (sketches, estimates) is
post-processing and keeps the guarantee. Over time, k reports of the same
device cost k * epsilon by sequential composition (see the README, "Privacy model in plain words").

Utility: with n reports the estimator g(x) is unbiased with variance
:func:`cms_core.theory.estimator_variance`; MSE mode minimises the worst-case
variance over f in [0, f*], l2 mode the summed variance over D tracked values.

Validation happens once, here, with errors naming the bad value.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field as dataclass_field
from fractions import Fraction

from . import theory
from .errors import InvalidParameterError
from .fields import BinaryField, FiniteField, PrimeField, choose_field

#: Above this, e^eps overflows the closed forms long before it matters: the
#: keep probability is 1 - 1e-43 and a report is effectively the raw hash.
MAX_EPSILON = 100.0
#: Below this no hash range is usable: the device's rounded keep probability is not above 1/m even
#: at m = 2 (theory.min_usable_epsilon; each m has its own, larger bound, checked with m).
MIN_EPSILON = theory.min_usable_epsilon(2)
#: z travels as a 32-bit integer and the kernel lanes are 32/64-bit.
MAX_HASH_RANGE = 2**32 - 1
#: String/bytes values are mapped to 128-bit fingerprints (see values.py).
STRING_DICTIONARY_SIZE = 2**128

MODES = ("mse", "l2", "fixed")
MECHANISMS = ("ocms", "direct")
#: What ``build(mechanism=...)`` accepts: a mechanism, or "auto" (lower exact objective).
MECHANISM_CHOICES = MECHANISMS + ("auto",)
VALUE_DOMAINS = ("integer", "string")

_FINGERPRINT_VERSION = 1


def check_epsilon(epsilon) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
        raise InvalidParameterError("epsilon", epsilon, "must be a real number")
    epsilon = float(epsilon)
    if math.isnan(epsilon) or math.isinf(epsilon):
        raise InvalidParameterError("epsilon", epsilon, "must be finite")
    if epsilon <= 0:
        raise InvalidParameterError("epsilon", epsilon, "must be > 0")
    if epsilon < MIN_EPSILON:
        raise InvalidParameterError("epsilon", epsilon, f"must be >= {MIN_EPSILON:.2g}: below it randomized response "
                                    "keeps the true bucket no more often than another (the device's keep probability "
                                    "rounds to 1/m), so a report says nothing about the value")
    if epsilon > MAX_EPSILON:
        raise InvalidParameterError("epsilon", epsilon, f"must be <= {MAX_EPSILON:g} (larger values give no meaningful privacy)")
    return epsilon


def _check_int(name: str, value, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParameterError(name, value, "must be an integer")
    if value < minimum:
        raise InvalidParameterError(name, value, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise InvalidParameterError(name, value, f"must be <= {maximum}")
    return value


#: A binding is a short printable label (a metric name and version); bytes on the fingerprint path.
MAX_BINDING_LENGTH = 200


def _check_binding(binding) -> str:
    if not isinstance(binding, str):
        raise InvalidParameterError("binding", binding, "must be a string such as 'flight_dest@1'")
    if not binding or len(binding) > MAX_BINDING_LENGTH:
        raise InvalidParameterError("binding", binding, f"must be 1 to {MAX_BINDING_LENGTH} characters")
    if not binding.isprintable():
        raise InvalidParameterError("binding", binding, "must hold printable characters only")
    return binding


def _check_f_star(f_star) -> float:
    if isinstance(f_star, bool) or not isinstance(f_star, (int, float)) or math.isnan(f_star):
        raise InvalidParameterError("f_star", f_star, "must be a number in [0, 1]")
    if not 0.0 <= f_star <= 1.0:
        raise InvalidParameterError("f_star", f_star, "must be in [0, 1]")
    return float(f_star)


def _direct_hash_range_and_field(dictionary_size, mode, tracked_count, hash_range, value_domain, field):
    """Direct randomized response's (m, field): m = d, checked against what the caller gave."""
    if value_domain != "integer":
        raise InvalidParameterError("mechanism", "direct", "direct randomized response needs integer values")
    if not 2 <= dictionary_size <= MAX_HASH_RANGE:
        raise InvalidParameterError(
            "dictionary_size", dictionary_size,
            f"direct randomized response needs 2 <= d <= {MAX_HASH_RANGE} (z carries the value)",
        )
    if hash_range is not None and hash_range != dictionary_size:
        raise InvalidParameterError("hash_range", hash_range, f"direct randomized response has m = d = {dictionary_size}")
    if mode == "l2" and tracked_count is None:
        raise InvalidParameterError("tracked_count", None, "mode 'l2' needs the number of tracked values")
    # Any prime p > d makes (0, 1) the identity hash; the field never travels (reports are z only).
    return dictionary_size, field if field is not None else choose_field(dictionary_size, 2)


def _checked_dictionary(dictionary_size, value_domain) -> int:
    """d for the value domain: given for integers, 2^128 (fingerprints) for strings."""
    if value_domain not in VALUE_DOMAINS:
        raise InvalidParameterError("value_domain", value_domain, f"expected one of {VALUE_DOMAINS}")
    if value_domain == "string":
        if dictionary_size not in (None, STRING_DICTIONARY_SIZE):
            raise InvalidParameterError("dictionary_size", dictionary_size, "is fixed to 2^128 for strings; omit it")
        dictionary_size = STRING_DICTIONARY_SIZE
    elif dictionary_size is None:
        raise InvalidParameterError("dictionary_size", None, "is required for integer values")
    return _check_int("dictionary_size", dictionary_size, 1, STRING_DICTIONARY_SIZE)


def _ocms_hash_range(epsilon, mode, f_star, tracked_count, hash_range) -> tuple[int, str]:
    """OCMS+RR's (m, mode used): the m given ("fixed"), else the m that minimises the mode's objective."""
    if hash_range is not None:
        return _check_int("hash_range", hash_range, 2, MAX_HASH_RANGE), "fixed"
    if mode == "l2" and tracked_count is None:
        raise InvalidParameterError("tracked_count", None, "mode 'l2' needs the number of tracked values")
    continuous = theory.continuous_optimal_hash_range(epsilon, mode, f_star, tracked_count)
    if continuous > MAX_HASH_RANGE:
        raise InvalidParameterError(
            "epsilon", epsilon, f"needs a hash range m~{continuous:.3g} above the maximum {MAX_HASH_RANGE}"
        )
    return theory.optimal_hash_range(epsilon, mode, f_star, tracked_count), mode


@dataclass(frozen=True)
class OCMSParams:
    """Parameters fixed for the life of a sketch, a topic and every report in it.

    Build with :meth:`OCMSParams.build`; the constructor re-validates everything
    so that deserialized parameters are as trustworthy as built ones.

    Attributes:
        epsilon: the LDP budget of one report, theory.min_usable_epsilon(m) (>= 8.9e-16) <= eps <= 100.
        hash_range: m, the size of the randomized-response alphabet, >= 2.
        field: the finite field of the hash family H_api.
        dictionary_size: d; values are integers in [0, d) (or 128-bit string fingerprints).
        value_domain: "integer" or "string".
        mode: how m was chosen: "mse", "l2" or "fixed" (explicit override).
        f_star: the prior upper bound on frequencies used by mode "mse".
        tracked_count: D, the number of tracked values used by mode "l2".
        binding: what these parameters belong to, e.g. ``"flight_dest@1"`` (a registry
            metric's name and version); part of the fingerprint, so two metrics with
            identical parameters never share one and their reports never mix.
            ``None`` (the default) keeps the unbound fingerprint of wire format v1.
        mechanism: "ocms" (OCMS+RR, the default) or "direct" (randomized response
            over the d values, m = d); part of the fingerprint when not "ocms".
    """

    epsilon: float
    hash_range: int
    field: FiniteField
    dictionary_size: int
    value_domain: str = "integer"
    mode: str = "fixed"
    f_star: float | None = None
    tracked_count: int | None = None
    binding: str | None = None
    mechanism: str = "ocms"
    _cache: dict = dataclass_field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self):
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        _check_int("hash_range", self.hash_range, 2, MAX_HASH_RANGE)
        usable = theory.min_usable_epsilon(self.hash_range)
        if self.epsilon < usable:
            raise InvalidParameterError(
                "epsilon", self.epsilon, f"must be >= {usable:.2g} with m = {self.hash_range}: below it the device's "
                f"keep probability rounds to 1/m or less, so a report says nothing about the value")
        if self.value_domain not in VALUE_DOMAINS:
            raise InvalidParameterError("value_domain", self.value_domain, f"expected one of {VALUE_DOMAINS}")
        _check_int("dictionary_size", self.dictionary_size, 1, STRING_DICTIONARY_SIZE)
        if self.value_domain == "string" and self.dictionary_size != STRING_DICTIONARY_SIZE:
            raise InvalidParameterError(
                "dictionary_size", self.dictionary_size, "the string domain is the set of 128-bit fingerprints (2^128)"
            )
        if self.mode not in MODES:
            raise InvalidParameterError("mode", self.mode, f"expected one of {MODES}")
        if not isinstance(self.field, (PrimeField, BinaryField)):
            raise InvalidParameterError("field", self.field, "must be a PrimeField or BinaryField")
        if self.mechanism not in MECHANISMS:
            raise InvalidParameterError("mechanism", self.mechanism, f"expected one of {MECHANISMS}")
        # A prime field must hold 0..d (paper: p > d); a binary field all of [0, d).
        needed = self.dictionary_size + 1 if isinstance(self.field, PrimeField) else self.dictionary_size
        if self.field.order < needed:
            raise InvalidParameterError(
                "field", str(self.field), f"order {self.field.order} cannot hold the dictionary [0, {self.dictionary_size})"
            )
        if self.mechanism == "direct":
            if self.value_domain != "integer":
                raise InvalidParameterError("mechanism", self.mechanism, "direct randomized response needs integer values")
            if self.hash_range != self.dictionary_size:
                raise InvalidParameterError(
                    "hash_range", self.hash_range, f"direct randomized response has m = d = {self.dictionary_size}"
                )
            if not isinstance(self.field, PrimeField):
                # The identity hash (a0, a1) = (0, 1) is x mod p mod d = x only in a prime field with p > d.
                raise InvalidParameterError("field", str(self.field), "direct randomized response uses a prime field")
        elif self.field.order < 2 * self.hash_range:
            # q >= 2 at the very least; choose_field gives q >= 7 (docs/paper-errata.md, erratum 5).
            raise InvalidParameterError("hash_range", self.hash_range, f"too large for the field {self.field}")
        if self.f_star is not None:
            object.__setattr__(self, "f_star", _check_f_star(self.f_star))
        if self.tracked_count is not None:
            _check_int("tracked_count", self.tracked_count, 1)
        if self.binding is not None:
            _check_binding(self.binding)

    # ------------------------------------------------------------------ build
    @classmethod
    def build(
        cls,
        epsilon: float,
        dictionary_size: int | None = None,
        *,
        mode: str = "mse",
        f_star: float = 1.0,
        tracked_count: int | None = None,
        hash_range: int | None = None,
        value_domain: str = "integer",
        field: FiniteField | None = None,
        binding: str | None = None,
        mechanism: str = "ocms",
    ) -> "OCMSParams":
        """Choose m and the field for a privacy budget and dictionary.

        Args:
            epsilon: per-report LDP budget, min_usable_epsilon(m) (>= 8.9e-16) <= eps <= 100.
            dictionary_size: d for integer values [0, d). Omit for strings.
            mode: "mse" (minimise the worst-case MSE given the prior f*) or
                "l2" (minimise the l2 loss over ``tracked_count`` values).
            f_star: prior upper bound on any tracked frequency (mode "mse").
            tracked_count: D, number of tracked values (required by "l2").
            hash_range: explicit m (baselines, experiments); sets mode "fixed".
            value_domain: "integer" or "string" (128-bit fingerprints).
            field: explicit field (tests, negative controls); normally chosen.
            binding: the metric these parameters belong to ("name@version"); bound into
                the fingerprint (see the attribute).
            mechanism: "ocms" (default: OCMS+RR), "direct" (randomized response over
                the d values, m = d) or "auto": the one with the lower exact worst-case
                MSE over [0, f*] (mode "mse") or l2 loss over D values (mode "l2"),
                computed by :func:`compare_mechanisms`; ties keep OCMS+RR.

        Runtime: O(1) except the prime search, O(sqrt) Miller-Rabin rounds.
        """
        if mechanism not in MECHANISM_CHOICES:
            raise InvalidParameterError("mechanism", mechanism, f"expected one of {MECHANISM_CHOICES}")
        if mechanism == "auto":
            if hash_range is not None:
                raise InvalidParameterError("hash_range", hash_range, "fixes OCMS+RR's m; use mechanism 'ocms' with it")
            candidates = compare_mechanisms(
                epsilon, dictionary_size, mode=mode, f_star=f_star, tracked_count=tracked_count,
                value_domain=value_domain, binding=binding,
            )
            return candidates.chosen
        epsilon = check_epsilon(epsilon)
        dictionary_size = _checked_dictionary(dictionary_size, value_domain)
        if mode not in ("mse", "l2"):
            raise InvalidParameterError("mode", mode, "expected 'mse' or 'l2'")
        f_star = _check_f_star(f_star)
        if tracked_count is not None:
            tracked_count = _check_int("tracked_count", tracked_count, 1)
        if mechanism == "direct":
            hash_range, field = _direct_hash_range_and_field(dictionary_size, mode, tracked_count, hash_range,
                                                             value_domain, field)
            mode_used = mode
        else:
            hash_range, mode_used = _ocms_hash_range(epsilon, mode, f_star, tracked_count, hash_range)
        if field is None:
            field = choose_field(dictionary_size, hash_range)
        return cls(
            epsilon=epsilon,
            hash_range=hash_range,
            field=field,
            dictionary_size=dictionary_size,
            value_domain=value_domain,
            mode=mode_used,
            f_star=f_star if mode_used == "mse" else None,
            tracked_count=tracked_count,
            binding=binding,
            mechanism=mechanism,
        )

    # --------------------------------------------------------------- derived
    def cached(self, key, compute):
        """Value derived from these frozen parameters, computed once (q, m', thresholds...)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    @property
    def m(self) -> int:
        return self.hash_range

    @property
    def keep_probability(self) -> float:
        """P(z = h(x)) = e^eps / (e^eps + m - 1)."""
        return theory.rr_keep_probability(self.epsilon, self.hash_range)

    @property
    def q(self) -> int:
        return theory.field_quotient_remainder(self.field.order, self.hash_range)[0]

    @property
    def r(self) -> int:
        return theory.field_quotient_remainder(self.field.order, self.hash_range)[1]

    @property
    def is_direct(self) -> bool:
        """Direct randomized response (m = d, identity hash, reports are z only)."""
        return self.mechanism == "direct"

    @property
    def collision_probability(self) -> Fraction:
        """c_bar of H_api, exact (erratum 4); 0 for direct RR (the identity never collides)."""
        if self.is_direct:
            return Fraction(0)
        return self.cached("c", lambda: theory.collision_probability(self.field.order, self.hash_range))

    @property
    def effective_hash_range(self) -> Fraction | None:
        """m' = 1 / c_bar, exact; the estimator g(x) uses it instead of m. None for direct RR (c = 0)."""
        if self.is_direct:
            return None
        return self.cached("m_eff", lambda: theory.effective_hash_range(self.field.order, self.hash_range))

    @property
    def estimator_coefficients(self) -> tuple[float, float]:
        """(A, B) with g(x) = A * matches / n + B."""
        return self.cached(
            "coef", lambda: theory.estimator_coefficients(self.epsilon, self.hash_range, self.effective_hash_range)
        )

    @property
    def poisoning_gain(self) -> float:
        """Estimate gained per unit fraction of maximal-gain fake reports (:func:`theory.poisoning_gain`)."""
        return theory.poisoning_gain(self.estimator_coefficients)

    def variance(self, f, n):
        """Var(g(x)) for true frequency f (array ok) and n reports."""
        return theory.estimator_variance(self.epsilon, self.hash_range, float(self.collision_probability), f, n)

    def worst_case_mse(self, n: float, f_star: float | None = None) -> float:
        """max over f in [0, f*] of Var(g) (f* = the prior of mode mse, else 1)."""
        if f_star is None:
            f_star = self.f_star if self.f_star is not None else 1.0
        return theory.worst_case_mse_of(self.variance, n, f_star)

    def l2_loss(self, n: float, tracked_count: int | None = None) -> float:
        count = tracked_count or self.tracked_count
        if count is None:
            raise InvalidParameterError("tracked_count", None, "needed for the l2 loss")
        return theory.l2_loss_of(self.variance, n, count)

    @property
    def coefficient_bytes(self) -> int:
        """Bytes per hash coefficient on the wire: ceil(bits(order - 1) / 8)."""
        return (self.field.bits + 7) // 8

    @property
    def z_bytes(self) -> int:
        return ((self.hash_range - 1).bit_length() + 7) // 8

    @property
    def report_bits(self) -> int:
        """Information content of one report (the paper's cost table): a0, a1 at the field's bit
        width and z in ceil(log2 m) bits; z alone for direct RR."""
        z_bits = (self.hash_range - 1).bit_length()
        return z_bits if self.is_direct else 2 * self.field.bits + z_bits

    @property
    def report_bytes(self) -> int:
        """Payload of one report: a0, a1 and z at their minimal byte widths; z alone for direct RR."""
        if self.is_direct:
            return self.z_bytes
        return 2 * self.coefficient_bytes + self.z_bytes

    @property
    def fingerprint(self) -> bytes:
        """8 stable bytes identifying everything a report's meaning depends on.

        Covers eps (exact IEEE-754 bits), m, the field, d, the value domain, the
        mechanism when it is not OCMS+RR and, when set, the binding (UTF-8, length-prefixed, after everything else, so
        unbound parameters keep their v1 fingerprint); not the mode/f*/D that only
        explain how m was chosen. Every report and every serialized sketch carries it.
        """

        def compute() -> bytes:
            h = hashlib.blake2b(digest_size=8, person=b"ocms-params")
            h.update(struct.pack(">BdI", _FINGERPRINT_VERSION, self.epsilon, self.hash_range))
            h.update(self.field.descriptor())
            h.update(self.dictionary_size.to_bytes(17, "big"))
            h.update(self.value_domain.encode())
            if self.mechanism != "ocms":
                h.update(b"mechanism" + self.mechanism.encode())
            if self.binding is not None:
                label = self.binding.encode()
                h.update(b"binding" + len(label).to_bytes(2, "big") + label)
            return h.digest()

        return self.cached("fp", compute)

    def describe(self) -> dict:
        """A JSON-friendly summary (used by ``ocms plan`` and ``/params``)."""
        direct = self.is_direct
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "mode": self.mode,
            "f_star": self.f_star,
            "tracked_count": self.tracked_count,
            "hash_range": self.hash_range,
            "field": str(self.field),
            "field_kind": self.field.kind,
            "field_order": str(self.field.order),
            "dictionary_size": str(self.dictionary_size),
            "value_domain": self.value_domain,
            "q": None if direct else str(self.q),
            "r": None if direct else str(self.r),
            "effective_hash_range": None if direct else float(self.effective_hash_range),
            "keep_probability": self.keep_probability,
            "report_bytes": self.report_bytes,
            "binding": self.binding,
            "fingerprint": self.fingerprint.hex(),
        }


@dataclass(frozen=True)
class MechanismComparison:
    """Both mechanisms' parameters for one (eps, d, objective), and the pick.

    ``objective`` names what is compared ("worst_case_mse" over [0, f*] or
    "l2_loss" over D values), per report (n = 1; every variance scales as 1/n).
    ``direct`` is None where direct RR cannot run (strings, d = 1, d > 2^32 - 1, epsilon below
    :func:`theory.min_usable_epsilon` of m = d).
    """

    objective: str
    ocms: OCMSParams
    direct: OCMSParams | None
    ocms_value: float
    direct_value: float | None

    @property
    def chosen(self) -> OCMSParams:
        if self.direct is not None and self.direct_value < self.ocms_value:
            return self.direct
        return self.ocms

    @property
    def poisoning_note(self) -> str | None:
        """What the pick costs against poisoning, when it is much more exposed than the other mechanism
        (:func:`poisoning_exposure_note`); None when it is not, or when direct RR cannot run."""
        if self.direct is None:
            return None
        chosen = self.chosen
        other = self.ocms if chosen is self.direct else self.direct
        return poisoning_exposure_note(chosen, other, self.objective)

    def describe(self) -> dict:
        """JSON-friendly summary (``ocms plan``)."""
        return {
            "objective": self.objective,
            "ocms": {"hash_range": self.ocms.hash_range, "per_report": self.ocms_value,
                     "report_bytes": self.ocms.report_bytes, "fingerprint": self.ocms.fingerprint.hex()},
            "direct": None if self.direct is None else {
                "hash_range": self.direct.hash_range, "per_report": self.direct_value,
                "report_bytes": self.direct.report_bytes, "fingerprint": self.direct.fingerprint.hex()},
            "chosen": self.chosen.mechanism,
            "poisoning_note": self.poisoning_note,
        }


#: Mechanism "auto" picks on accuracy alone; when its pick's exposure to the maximal-gain poisoning
#: attack (:attr:`OCMSParams.poisoning_gain`) is more than this many times the other mechanism's, it says so.
#: Near the crossover (d about 3 e^eps + 2) direct RR gains 4e/(e - 1) per unit of fakes against about
#: 2e/(e - 1) for OCMS+RR with its optimal m, so a ratio just above 2 happens there (eps 1, d 9: 2.06).
POISONING_NOTE_RATIO = 2.0

MECHANISM_LABELS = {"ocms": "OCMS+RR", "direct": "direct RR"}


def poisoning_exposure_note(chosen: OCMSParams, other: OCMSParams, objective: str) -> str | None:
    """A sentence saying that ``chosen`` (picked for the lower ``objective``) is more than
    :data:`POISONING_NOTE_RATIO` times as exposed to poisoning as ``other``, or None.

    Exposure is the maximal-gain attack's gain (:func:`theory.poisoning_gain`): the estimate a
    value nobody holds gains per unit fraction of crafted fake reports. The note names both
    mechanisms' fake fractions that lift such a value to 1%, and how to trade accuracy for it.
    """
    ratio = chosen.poisoning_gain / other.poisoning_gain
    if ratio <= POISONING_NOTE_RATIO:
        return None
    fraction = {p.mechanism: theory.fake_fraction_to_reach(p.poisoning_gain, 0.01) for p in (chosen, other)}
    name, other_name = MECHANISM_LABELS[chosen.mechanism], MECHANISM_LABELS[other.mechanism]
    objective_name = {"worst_case_mse": "worst-case MSE", "l2_loss": "l2 loss"}.get(objective, objective)
    return (f"mechanism auto picks {name} for its lower {objective_name}, but it is {ratio:.2f}x as exposed to "
            f"poisoning as {other_name}: {fraction[chosen.mechanism]:.3%} of fake reports lift a value nobody holds "
            f"to 1% ({other_name}: {fraction[other.mechanism]:.3%}); pin mechanism {other.mechanism} "
            f"(--mechanism {other.mechanism}, or 'mechanism: {other.mechanism}' in a registry) to trade accuracy for it")


def objective_per_report(params: OCMSParams) -> tuple[str, float]:
    """(name, value) of the exact objective ``params`` were chosen for, at n = 1."""
    if params.mode == "l2":
        return "l2_loss", params.l2_loss(1.0)
    return "worst_case_mse", params.worst_case_mse(1.0)


def compare_mechanisms(
    epsilon: float,
    dictionary_size: int | None = None,
    *,
    mode: str = "mse",
    f_star: float = 1.0,
    tracked_count: int | None = None,
    value_domain: str = "integer",
    binding: str | None = None,
) -> MechanismComparison:
    """Build OCMS+RR and direct RR for the same objective and compare their exact variances.

    With e = e^eps, at f -> 0 direct RR costs (e + d - 2)/(e - 1)^2 per report and the
    optimal CMS about 4e/(e - 1)^2, so direct wins roughly when d < 3e + 2; the
    comparison here is exact (m' of H_api, the prior f*, D).
    """
    ocms = OCMSParams.build(epsilon, dictionary_size, mode=mode, f_star=f_star, tracked_count=tracked_count,
                            value_domain=value_domain, binding=binding)
    name, ocms_value = objective_per_report(ocms)
    direct = direct_value = None
    if (ocms.value_domain == "integer" and 2 <= ocms.dictionary_size <= MAX_HASH_RANGE
            and ocms.epsilon >= theory.min_usable_epsilon(ocms.dictionary_size)):  # else direct RR's m = d is unusable
        direct = OCMSParams.build(epsilon, dictionary_size, mode=mode, f_star=f_star, tracked_count=tracked_count,
                                  binding=binding, mechanism="direct")
        direct_value = objective_per_report(direct)[1]
    return MechanismComparison(name, ocms, direct, ocms_value, direct_value)
