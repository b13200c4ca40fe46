import pytest

from cms_core import InvalidParameterError, OCMSParams, planning


def test_reports_needed_is_tight():
    params = OCMSParams.build(1.5, 10_000)
    for target in (1e-3, 3.3e-5, 1e-7):
        n = planning.reports_needed(params, target_mse=target)
        assert params.worst_case_mse(n) <= target < params.worst_case_mse(n - 1) or n == 1
    n = planning.reports_needed(params, target_ci_half_width=0.01, confidence=0.99)
    assert planning.predict(params, n, 0.99)["ci_half_width"] <= 0.01
    assert planning.predict(params, n - 1, 0.99)["ci_half_width"] > 0.01


def test_l2_target_and_prediction():
    params = OCMSParams.build(2.0, 10_000, mode="l2", tracked_count=500)
    n = planning.reports_needed(params, target_l2=0.05)
    pred = planning.predict(params, n)
    assert pred["l2_loss"] <= 0.05 and pred["l1_bound"] == pytest.approx((500 * pred["l2_loss"]) ** 0.5)


def test_planning_errors():
    params = OCMSParams.build(1.0, 100)
    with pytest.raises(InvalidParameterError, match="target"):
        planning.reports_needed(params)
    with pytest.raises(InvalidParameterError, match="target"):
        planning.reports_needed(params, target_mse=1e-3, target_l2=1.0)
    with pytest.raises(InvalidParameterError, match="tracked_count"):
        planning.reports_needed(params, target_l2=1.0)
    with pytest.raises(InvalidParameterError, match="n=0"):
        planning.predict(params, 0)


def test_compare_mechanisms_prints_both_and_the_pick():
    from cms_core import planning

    params = OCMSParams.build(2.0, 16, mode="l2", tracked_count=16)
    both = planning.compare_mechanisms(params, 100_000)
    assert both["objective"] == "l2_loss" and both["chosen"] == "direct"
    assert both["direct"]["l2_loss"] < both["ocms"]["l2_loss"]
    assert both["ocms"]["fingerprint"] == params.fingerprint.hex()
    text = "\n".join(planning.comparison_lines(both))
    assert "direct RR" in text and "OCMS+RR" in text and "lower l2 loss: direct RR" in text
    # The pick is what build(mechanism="auto") builds.
    auto = OCMSParams.build(2.0, 16, mode="l2", tracked_count=16, mechanism="auto")
    assert auto.mechanism == both["chosen"] and auto.fingerprint.hex() == both["direct"]["fingerprint"]
    # mse mode with f* = 1 at d = 1000: OCMS+RR; strings: no direct row.
    assert planning.compare_mechanisms(OCMSParams.build(2.0, 1000))["chosen"] == "ocms"
    strings = planning.compare_mechanisms(OCMSParams.build(2.0, value_domain="string"))
    assert strings["direct"] is None and "not available" in "\n".join(planning.comparison_lines(strings))
    # Direct parameters compare against the optimal OCMS+RR.
    direct = OCMSParams.build(0.5, 2, mechanism="direct")
    assert planning.compare_mechanisms(direct)["chosen"] == "direct"


def test_percentages_and_epsilons_are_written_for_people():
    """Issue 36: `ocms plan` printed "adds 1.57e+03%" and a central epsilon with no sense of scale."""
    from cms_core.planning import _percent, likelihood_factor

    assert [_percent(f) for f in (15.7, 0.123, 0.00457, 1.72e-8, 0.0)] == ["1,570%", "12.3%", "0.457%", "0.00000172%", "0%"]
    assert likelihood_factor(0.05302) == "1.05x" and likelihood_factor(2.0) == "7.39x"


# --- the mean of a numeric metric (issue 40): the histogram's against the Hybrid mechanism's

def _mean_setting(epsilon: float):
    from cms_core.hybrid import HybridParams
    from cms_core.numeric import BucketLayout
    from cms_core.params import OCMSParams

    layout = BucketLayout.explicit(list(range(1, 40)), 0, 40)
    params = OCMSParams.build(epsilon, 40, mode="l2", tracked_count=40, mechanism="direct")
    return layout, HybridParams.build(epsilon, 0, 40), params


def test_the_mean_variances_are_the_mechanisms_own_formulas():
    import numpy as np

    from cms_core import hybrid
    from cms_core.numeric import DirectRRNoise
    from cms_core.planning import histogram_mean_variance, hybrid_mean_variance

    layout, hybrid_params, params = _mean_setting(1.0)
    f = np.full(40, 1 / 40)
    assert histogram_mean_variance(layout, params, None, 10_000) == pytest.approx(
        DirectRRNoise(1.0, 40).variance(f, layout.points, 10_000))
    # a device per bucket midpoint: hybrid.mean_variance of those values, with n = 40 devices scaled to 10,000
    assert hybrid_mean_variance(layout, hybrid_params, 10_000) == pytest.approx(
        hybrid.mean_variance(hybrid_params, 0, layout.points) * 40 / 10_000)


def test_choose_mean_mechanism_splits_and_validates():
    from cms_core.planning import choose_mean_mechanism

    layout, hybrid_params, params = _mean_setting(1.0)
    alone = choose_mean_mechanism(layout, hybrid_params, params, None, 100_000, 1)
    split = choose_mean_mechanism(layout, hybrid_params, params, None, 100_000, 2)
    assert split["hybrid_sd"] == pytest.approx(alone["hybrid_sd"] * 2 ** 0.5)
    assert split["histogram_sd"] == alone["histogram_sd"] and split["cdf_variance_factor"] == 2
    assert alone["chosen"] == "hybrid"  # 40 fine buckets at eps 1: the histogram's mean is 7x as noisy
    for bad in ({"parts": 0}, {"parts": True}, {"n": 1, "parts": 2}):
        args = {"n": 100_000, "parts": 2, **bad}
        with pytest.raises(InvalidParameterError, match=next(iter(bad))):
            choose_mean_mechanism(layout, hybrid_params, params, None, args["n"], args["parts"])
