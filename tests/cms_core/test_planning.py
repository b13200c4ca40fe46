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
