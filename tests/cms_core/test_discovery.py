"""Discovery by prefix extension (issue 15): encoding, cut-off, privacy, planted heavy hitters, negative control.

Statistical tests use fixed seeds and bounds from the rule itself: the exact binomial tail
(``binomial_upper_tail``) for what the cut-off allows, binomial quantiles over rounds for how
often an event with a stated probability may occur.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from cms_core import binomial, discovery as D
from cms_core.audit import output_distribution
from cms_core.errors import InvalidParameterError, InvalidValueError


def _binomial_quantile(trials: int, p: float, q: float = 0.999) -> int:
    """Smallest c with P(Binomial(trials, p) <= c) >= q (how many successes a stated rate allows)."""
    for c in range(trials + 1):
        if 1.0 - binomial.binomial_upper_tail(trials, p, c + 1) >= q:
            return c
    return trials


SMALL = D.DiscoveryDomain("strings", alphabet="abcdefgh", max_length=4, symbols_per_level=1)
UTF8 = D.DiscoveryDomain("strings", alphabet="utf8", max_length=8, symbols_per_level=1)
INT64 = D.DiscoveryDomain("integers", bits=64, bits_per_level=8)


# ------------------------------------------------------------------ domain and encoding

@pytest.mark.parametrize("kwargs, field", [
    (dict(kind="strings", alphabet="abca", max_length=4, symbols_per_level=1), "alphabet"),
    (dict(kind="strings", alphabet="", max_length=4, symbols_per_level=1), "alphabet"),
    (dict(kind="strings", alphabet="ab", max_length=0, symbols_per_level=1), "max_length"),
    (dict(kind="strings", alphabet="ab", max_length=4, symbols_per_level=5), "symbols_per_level"),
    (dict(kind="strings", alphabet="utf8", max_length=8, symbols_per_level=2), "symbols_per_level"),
    (dict(kind="strings", alphabet="ab", max_length=4, symbols_per_level=1, bits=8), "bits"),
    (dict(kind="integers", bits=65, bits_per_level=8), "bits"),
    (dict(kind="integers", bits=64, bits_per_level=17), "bits_per_level"),
    (dict(kind="integers", bits=64, bits_per_level=8, max_length=3), "alphabet"),
    (dict(kind="categories"), "kind"),
])
def test_bad_domains_name_the_field(kwargs, field):
    with pytest.raises(InvalidParameterError) as info:
        D.DiscoveryDomain(**kwargs)
    assert info.value.name == field


def test_levels_and_prefix_lengths():
    assert UTF8.levels == 8 and [UTF8.prefix_length(L) for L in (1, 8)] == [1, 8]
    odd = D.DiscoveryDomain("integers", bits=20, bits_per_level=8)
    assert odd.levels == 3 and [odd.prefix_length(L) for L in (1, 2, 3)] == [8, 16, 20]
    assert odd.branching(3) == 16
    assert D.DiscoveryDomain("strings", alphabet="ab", max_length=4, symbols_per_level=2).branching(1) == 1 + 2 + 4


def test_prefix_encoding_keeps_ended_and_open_apart():
    assert D.prefix_of(SMALL, "ab", 2) == D.Prefix((0, 1), False)  # "ab" so far, may go on
    assert D.prefix_of(SMALL, "ab", 3) == D.Prefix((0, 1), True)  # "ab" and nothing more
    assert D.prefix_value(SMALL, "ab", 2) != D.prefix_value(SMALL, "ab", 3)
    assert D.prefix_value(SMALL, "abc", 2) == D.prefix_value(SMALL, "abd", 2)
    assert D.prefix_of(SMALL, "abcdefg", 4) == D.Prefix((0, 1, 2, 3), False)  # longer than max_length: cut
    assert D.prefix_label(UTF8, D.prefix_of(UTF8, "日本", 8)) == "日本"
    assert D.prefix_label(UTF8, D.prefix_of(UTF8, "日本", 2)) == "日".encode()[:2]  # cut inside a character
    x = 0xDEADBEEF_01234567
    assert D.prefix_value(INT64, x, 1) == 0xDE and D.prefix_value(INT64, x, 8) == x


@pytest.mark.parametrize("domain, value, level", [
    (SMALL, "abz", 1), (SMALL, 7, 1), (SMALL, "ab", 0), (SMALL, "ab", 5), (INT64, -1, 1), (INT64, 2**64, 1),
    (INT64, "12", 1), (INT64, 5, 9), (UTF8, 3.5, 1),
])
def test_bad_values_and_levels_are_refused(domain, value, level):
    with pytest.raises(InvalidValueError):
        D.prefix_value(domain, value, level)


def test_every_level_has_its_own_fingerprint_at_the_metric_epsilon():
    params = D.level_params("words", 3, 2.0, UTF8)
    assert [p.binding for p in params] == [f"words@3/level{L}" for L in range(1, 9)]
    assert len({p.fingerprint for p in params}) == 8
    assert {p.epsilon for p in params} == {2.0}
    assert params[0].hash_range == round(math.exp(2.0) + 1)  # argmin Var(f = 0)
    ints = D.level_params("ids", 1, 4.0, INT64)
    assert [p.dictionary_size for p in ints] == [2 ** (8 * L) for L in range(1, 9)]


def test_extensions_cover_open_and_ended_children():
    children = D.extensions(SMALL, [D.Prefix((0,))], 2)
    assert len(children) == SMALL.branching(2) == 9
    assert D.Prefix((0,), True) in children and D.Prefix((0, 7), False) in children
    assert [c.symbols for c in D.extensions(INT64, [D.Prefix(3)], 2)][:2] == [3 << 8, (3 << 8) + 1]


# ------------------------------------------------------------------ the cut-off rule

def test_binomial_tail_and_critical_count_are_exact():
    n, p = 40, 0.1
    pmf = [Fraction(math.comb(n, j)) * Fraction(p) ** j * (1 - Fraction(p)) ** (n - j) for j in range(n + 1)]
    for k in (0, 1, 4, 9, 15, 40):
        assert binomial.binomial_upper_tail(n, p, k) == pytest.approx(float(sum(pmf[k:])), rel=1e-9, abs=1e-300)
    for alpha in (0.2, 0.01, 1e-6):
        k = binomial.critical_count(n, p, alpha)
        assert binomial.binomial_upper_tail(n, p, k) <= alpha < binomial.binomial_upper_tail(n, p, k - 1)


def test_null_match_probability_makes_the_estimate_zero():
    params = D.level_params("w", 1, 4.0, UTF8)[0]
    a, b = params.estimator_coefficients
    assert a * binomial.null_match_probability(params) + b == pytest.approx(0.0, abs=1e-15)
    assert a * binomial.match_probability(params, 0.3) + b == pytest.approx(0.3)


# ------------------------------------------------------------------ privacy

def test_a_discovery_report_is_epsilon_ldp_exactly():
    """P((L, a0, a1, z) | v) = P(L) P_L(a0, a1, z | prefix_L(v)); the worst ratio over values is <= e^eps."""
    domain = D.DiscoveryDomain("integers", bits=3, bits_per_level=2)
    epsilon = 1.0
    params = D.level_params("tiny", 1, epsilon, domain)
    distributions = []
    for v in range(8):
        dist = {}
        for level, p in enumerate(params, 1):
            for out, prob in output_distribution(p, D.prefix_value(domain, v, level)).items():
                dist[(level, *out)] = prob / domain.levels
        distributions.append(dist)
    worst = max(first[o] / second[o] for first in distributions for second in distributions if first is not second
                for o in first)
    assert worst <= Fraction(math.exp(epsilon))
    assert float(worst) > math.exp(epsilon) * (1 - 1e-9)  # the budget is used, not wasted


# ------------------------------------------------------------------ planted heavy hitters

def _population(heavy: dict, background: list, n: int, rng) -> list:
    """n values: each heavy value at its frequency, the rest spread uniformly over ``background``."""
    values, probs = list(heavy), list(heavy.values())
    rest = 1.0 - sum(probs)
    codes = rng.choice(len(values) + 1, size=n, p=probs + [rest])
    fill = rng.integers(0, len(background), size=n)
    return [values[c] if c < len(values) else background[fill[i]] for i, c in enumerate(codes)]


def test_planted_strings_including_non_ascii_are_found_at_the_stated_rate():
    n, epsilon, rounds = 48_000, 4.0, 3
    params = D.level_params("words", 1, epsilon, UTF8)
    # Threshold the doc states: found with probability >= 1 - miss at K candidates per level.
    k_assumed = 257 * 8
    threshold = D.detection_threshold(params[0], n // UTF8.levels, UTF8.levels, k_assumed, alpha=0.05, miss=0.05)
    planted = {"café": 1.2 * threshold, "日本": 1.2 * threshold, "naïve": 1.5 * threshold, "the": 2 * threshold}
    rng = np.random.default_rng(20261124)
    background = [f"zz{i:05d}" for i in range(50_000)]  # 1/50,000 each: far below any cut-off
    misses, false = 0, 0
    for _ in range(rounds):
        values = _population(planted, background, n, rng)
        result = D.discover(UTF8, params, D.simulate_level_reports(UTF8, params, values, rng), alpha=0.05)
        found = {d.value for d in result.discovered}
        misses += sum(1 for v in planted if v not in found)
        false += sum(1 for v in found if v not in planted and v not in background)
    assert misses <= _binomial_quantile(rounds * len(planted), 0.05)
    assert false <= _binomial_quantile(rounds, 0.05)


def test_planted_64_bit_integers_are_found():
    n, epsilon = 64_000, 4.0
    params = D.level_params("build_id", 1, epsilon, INT64)
    threshold = D.detection_threshold(params[0], n // INT64.levels, INT64.levels, 256 * 8, alpha=0.05, miss=0.05)
    planted = {2**64 - 1: 1.3 * threshold, 0x0123456789ABCDEF: 1.3 * threshold, 12345: 2 * threshold}
    rng = np.random.default_rng(7)
    background = [int(x) for x in rng.integers(0, 2**63, size=100_000, dtype=np.uint64)]
    values = _population(planted, background, n, rng)
    result = D.discover(INT64, params, D.simulate_level_reports(INT64, params, values, rng))
    found = {d.value: d for d in result.discovered}
    assert set(planted) <= set(found)
    assert set(found) <= set(planted)
    assert all(d.selection_biased for d in found.values())  # integers end at the last level


def test_no_prefix_nobody_holds_survives_more_often_than_alpha():
    """Family-wise rule: P(any zero-frequency prefix survives at any level) <= alpha per round."""
    alpha, rounds, n = 0.3, 30, 16_000
    params = D.level_params("w", 1, 2.0, SMALL)
    truth = {"abc": 0.3, "bad": 0.3, "ge": 0.2, "h": 0.2}
    held = {D.prefix_of(SMALL, v, L) for v in truth for L in range(1, SMALL.levels + 1)}
    rng = np.random.default_rng(99)
    bad_rounds = 0
    for _ in range(rounds):
        values = list(rng.choice(list(truth), size=n, p=list(truth.values())))
        result = D.discover(SMALL, params, D.simulate_level_reports(SMALL, params, values, rng), alpha=alpha)
        survivors = {p for lv in result.levels for p, *_ in lv.survivors}
        assert {D.prefix_of(SMALL, v, L) for v in truth for L in (1,)} <= survivors
        bad_rounds += bool(survivors - held)
    assert bad_rounds <= _binomial_quantile(rounds, alpha)


def test_negative_control_a_value_below_the_cutoff_is_not_claimed_more_than_the_rule_allows():
    """A value at a third of its level's cut-off: claimed at most P(Bin(n_L, q(f)) >= k_L) of the time."""
    n, rounds = 24_000, 12
    params = D.level_params("w", 1, 4.0, SMALL)
    n_level = n // SMALL.levels
    k1 = binomial.critical_count(n_level, binomial.null_match_probability(params[0]), D.per_test_alpha(0.05, SMALL.levels, SMALL.branching(1)))
    weak = D.cutoff_frequency(params[0], n_level, k1) / 3
    allowed = D.detection_probability(params[0], n_level, weak, k1)  # surviving level 1 alone; ending needs more
    truth = {"abc": 0.5, "bad": 0.5 - weak, "h": weak}
    rng = np.random.default_rng(3)
    claimed = 0
    for _ in range(rounds):
        values = list(rng.choice(list(truth), size=n, p=list(truth.values())))
        result = D.discover(SMALL, params, D.simulate_level_reports(SMALL, params, values, rng))
        found = {d.value for d in result.discovered}
        assert {"abc", "bad"} <= found  # the heavy ones are there, so the run worked
        claimed += "h" in found
    assert allowed < 0.05  # the control really is below the cut-off
    assert claimed <= _binomial_quantile(rounds, allowed)


def test_estimates_of_ended_values_are_unbiased_and_cover():
    n = 40_000
    params = D.level_params("w", 1, 4.0, SMALL)
    truth = {"ab": 0.4, "ba": 0.35, "c": 0.25}
    rng = np.random.default_rng(11)
    covered, total = 0, 0
    for _ in range(8):
        values = list(rng.choice(list(truth), size=n, p=list(truth.values())))
        result = D.discover(SMALL, params, D.simulate_level_reports(SMALL, params, values, rng), confidence=0.9)
        for d in result.discovered:
            assert not d.selection_biased and not d.truncated
            total += 1
            covered += d.ci_low <= truth[d.value] <= d.ci_high
    assert total == 24
    assert covered >= 24 - _binomial_quantile(24, 0.1)
    doc = result.to_json()
    assert {d["value"] for d in doc["discovered"]} == set(truth)
    assert doc["levels"][0]["cutoff_count"] > 0 and doc["reports"] == n


def test_reports_for_an_unknown_level_are_refused():
    params = D.level_params("w", 1, 4.0, SMALL)
    rng = np.random.default_rng(1)
    batches = D.simulate_level_reports(SMALL, params, ["ab"] * 100, rng)
    batches[9] = batches[1]
    with pytest.raises(InvalidValueError, match="level"):
        D.discover(SMALL, params, batches)
    with pytest.raises(Exception, match="level parameter sets"):
        D.discover(SMALL, params[:2], {})


def test_candidate_cap_keeps_the_largest_and_says_so():
    params = D.level_params("w", 1, 4.0, SMALL)
    rng = np.random.default_rng(2)
    values = list(rng.choice(["ab", "bc", "cd", "de"], size=20_000))
    result = D.discover(SMALL, params, D.simulate_level_reports(SMALL, params, values, rng), max_candidates=20)
    assert result.levels[0].capped == 2  # 4 open survivors, room for 20 // 9 = 2
    assert len(result.discovered) == 2


# ------------------------------------------------------------------ element layout and the range path

@pytest.mark.parametrize("domain", [SMALL, UTF8, D.DiscoveryDomain("strings", alphabet="abc", max_length=5,
                                                                  symbols_per_level=2)])
def test_a_parents_children_are_one_contiguous_range_and_ended_values_keep_their_element(domain):
    parent = D.prefix_of(domain, "ab" * 3, 1)
    children = D.extensions(domain, [parent], 2)
    elements = [D.prefix_element_value(domain, c) for c in children]
    assert elements == list(range(elements[0], elements[0] + domain.branching(2)))
    assert max(elements) < 2**D.STRING_PREFIX_BITS
    ended = D.prefix_of(domain, "a", 1)
    assert ended.ended == (domain.prefix_length(1) > 1)
    short = "a"
    assert len({D.prefix_value(domain, short, L) for L in range(2, domain.levels + 1)}) == 1


def test_range_path_counts_equal_explicit_counts_bit_for_bit():
    from cms_core.sketch import OCMSSketch
    from cms_core.values import TrackedValues

    for domain, values in ((UTF8, ["ab", "abc", "b", "日本"] * 500),
                           (D.DiscoveryDomain("integers", bits=32, bits_per_level=8), [7, 2**31, 12345] * 500)):
        params = D.level_params("m", 1, 3.0, domain)
        batches = D.simulate_level_reports(domain, params, values, np.random.default_rng(5))
        level = 2
        parents = [D.prefix_of(domain, v, level - 1) for v in values[:3]]
        candidates = D.extensions(domain, list(dict.fromkeys(parents)), level) + [D.Prefix((120,), True)] * (
            domain.kind == "strings")
        fast = D._counts(params[level - 1], batches[level], candidates, domain)
        tracked = TrackedValues.of(params[level - 1], [D.prefix_element_value(domain, c) for c in candidates])
        slow = OCMSSketch(params[level - 1], tracked).update(batches[level])
        assert fast == slow and fast.n == len(batches[level]) and fast.counts.sum() > 0


def test_utf8_prefixes_and_truncated_values_cut_inside_a_character_carry_their_exact_bytes():
    """Issue 24: level 4 of café is caf\\xc3 and max_length 16 cuts ab東京タワー東京 inside ー; their JSON
    is valid text (U+FFFD at the cut) plus the exact bytes, never a lone surrogate."""
    import json

    domain = D.DiscoveryDomain("strings", alphabet="utf8", max_length=16, symbols_per_level=1)
    params = D.level_params("words", 1, 4.0, domain)
    values = ["café"] * 6000 + ["ab東京タワー東京"] * 6000 + ["🎉"] * 4000
    rng = np.random.default_rng(24)
    result = D.discover(domain, params, D.simulate_level_reports(domain, params, values, rng), alpha=0.05)
    doc = json.loads(json.dumps(result.to_json(), ensure_ascii=False).encode("utf-8"))  # raised before the fix
    found = {d["value"]: d for d in doc["discovered"]}
    assert set(found) == {"café", "🎉", "ab東京タワ\ufffd"}
    tower = found["ab東京タワ\ufffd"]
    assert tower["truncated"] and tower["cut_inside_character"]
    assert bytes.fromhex(tower["bytes_hex"]) == "ab東京タワー東京".encode()[:16]
    assert "bytes_hex" not in found["café"] and "bytes_hex" not in found["🎉"]
    level4 = {s["prefix"]: s for s in doc["levels"][3]["survivors"]}
    assert level4["caf\ufffd"]["bytes_hex"] == "636166c3" and level4["caf\ufffd"]["cut_inside_character"]


# ------------------------------------------------------------------ simulation path (issue 24: O(reports), not O(levels x distinct))

PAIRS = D.DiscoveryDomain("strings", alphabet="abc", max_length=5, symbols_per_level=2)
ODD_BITS = D.DiscoveryDomain("integers", bits=20, bits_per_level=8)


@pytest.mark.parametrize("domain, values", [
    (SMALL, ["a", "ab", "abcd", "abcdefg", "hhhh", "ab", "ba"]),
    (UTF8, ["café", "日本", "naïve", b"\xff\x00", "", "café"]),
    (PAIRS, ["a", "ab", "abc", "abcab", "cc", "abc"]),
    (ODD_BITS, [0, 1, 255, 2**20 - 1, 12345, 1]),
])
def test_prefix_values_equal_prefix_value_one_by_one(domain, values):
    for level in range(1, domain.levels + 1):
        assert D.prefix_values(domain, values, level) == [D.prefix_value(domain, v, level) for v in values]


def test_prefix_values_refuse_what_prefix_value_refuses():
    for domain, bad in ((SMALL, "abz"), (INT64, 2**64), (UTF8, 3.5)):
        with pytest.raises(InvalidValueError):
            D.prefix_values(domain, ["a" if domain.kind == "strings" else 1, bad], 1)


def _reference_level_reports(domain, params_by_level, values, rng):
    """The simulation spelled out report by report: same levels, same elements, same random draws."""
    from cms_core.privatize import simulate_reports
    from cms_core.values import elements_to_array, limbs_for

    levels = D.assign_levels(domain.levels, len(values), rng)
    out = {}
    for level in range(1, domain.levels + 1):
        rows = np.flatnonzero(levels == level)
        if rows.size:
            params = params_by_level[level - 1]
            elements = [D.prefix_value(domain, values[i], level) for i in rows.tolist()]
            out[level] = simulate_reports(params, elements_to_array(elements, limbs_for(params)), rng)
    return out


@pytest.mark.parametrize("domain, values", [
    (UTF8, ["the", "café", "日本", "of"] * 300 + [f"tail{i}" for i in range(800)]),
    (INT64, [2**64 - 1, 7, 12345] * 300 + list(range(10**6, 10**6 + 800))),
])
def test_simulated_reports_equal_the_report_by_report_reference(domain, values):
    params = D.level_params("m", 1, 3.0, domain)
    fast = D.simulate_level_reports(domain, params, values, np.random.default_rng(11))
    slow = _reference_level_reports(domain, params, values, np.random.default_rng(11))
    assert sorted(fast) == sorted(slow)
    for level in fast:
        assert np.array_equal(fast[level].a0, slow[level].a0) and np.array_equal(fast[level].a1, slow[level].a1)
        assert np.array_equal(fast[level].z, slow[level].z)


def test_simulation_computes_prefixes_of_the_values_drawn_at_each_level_only(monkeypatch):
    """A long tail (every value distinct): one prefix per report, not one per level and distinct value."""
    calls = []
    symbols = D.DiscoveryDomain.symbols
    monkeypatch.setattr(D.DiscoveryDomain, "symbols", lambda self, value: calls.append(value) or symbols(self, value))
    values = [f"v{i}" for i in range(2000)]
    params = D.level_params("m", 1, 3.0, UTF8)
    batches = D.simulate_level_reports(UTF8, params, values, np.random.default_rng(2))
    assert sum(len(b) for b in batches.values()) == len(values)
    assert len(calls) == len(values)  # before: UTF8.levels x 2000 = 16,000
