"""The one definition of each figure (orchestrator.figures): pure, no database."""

from __future__ import annotations

import itertools
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.figures import (
    EMPTY,
    Quantiles,
    event_rate,
    jain_index,
    most_in_window,
    per_minute,
    percentile,
    quantiles_of,
    ratio,
    retry_rate,
    utilization,
    window_counts,
)

# (values, fraction, expected): written out by hand from the rule in percentile's docstring,
# linear interpolation at position fraction * (n - 1) of the sorted values.
PERCENTILES = [
    ([], 0.5, None),  # no values: no figure, not 0
    ([], 0.0, None),
    ([7.0], 0.0, 7.0),  # one value is every percentile of itself
    ([7.0], 0.5, 7.0),
    ([7.0], 0.95, 7.0),
    ([7.0], 1.0, 7.0),
    ([1.0, 2.0], 0.5, 1.5),  # halfway between the two
    ([0.0, 10.0], 0.1, 1.0),
    ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),  # an even count: the mean of the middle two
    ([1.0, 2.0, 3.0, 4.0], 0.95, 3.85),  # position 2.85: 3 + 0.85 * (4 - 3)
    ([10.0, 20.0, 30.0, 40.0, 100.0], 0.0, 10.0),  # p0 is the minimum
    ([10.0, 20.0, 30.0, 40.0, 100.0], 0.25, 20.0),  # position 1: a value, no interpolation
    ([10.0, 20.0, 30.0, 40.0, 100.0], 0.5, 30.0),
    ([10.0, 20.0, 30.0, 40.0, 100.0], 0.95, 88.0),  # position 3.8: 40 + 0.8 * 60
    ([10.0, 20.0, 30.0, 40.0, 100.0], 1.0, 100.0),  # p100 is the maximum
    ([100.0, 10.0, 40.0, 30.0, 20.0], 0.95, 88.0),  # any order: sorted first
    ([5.0, 5.0, 5.0], 0.95, 5.0),
    ([-2.0, 2.0], 0.5, 0.0),
]


@pytest.mark.parametrize(("values", "fraction", "expected"), PERCENTILES)
def test_percentile_interpolates_linearly_between_the_nearest_ranks(
    values: list[float], fraction: float, expected: float | None
) -> None:
    # when
    found = percentile(values=values, fraction=fraction)
    # then
    if expected is None:
        assert found is None
    else:
        assert found == pytest.approx(expected)


@pytest.mark.parametrize("fraction", [-0.01, 1.01, 95.0])
def test_percentile_refuses_a_fraction_outside_0_to_1(fraction: float) -> None:
    # a percent (95) passed where a fraction (0.95) belongs is a bug, not a figure
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        percentile(values=[1.0, 2.0], fraction=fraction)


@given(
    values=st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=2, max_size=50),
    percent=st.integers(min_value=1, max_value=99),
)
def test_percentile_agrees_with_the_standard_librarys_inclusive_method(
    values: list[float], percent: int
) -> None:
    # given an independent implementation of the same rule
    expected = statistics.quantiles(values, n=100, method="inclusive")[percent - 1]
    # then
    assert percentile(values=values, fraction=percent / 100) == pytest.approx(expected, abs=1e-6)


@given(values=st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=50))
def test_percentile_stays_within_the_values_and_grows_with_the_fraction(values: list[float]) -> None:
    found = [percentile(values=values, fraction=f) or 0.0 for f in (0.0, 0.5, 0.95, 1.0)]
    assert found[0] == min(values)
    assert found[-1] == max(values)
    assert all(low <= high + 1e-9 for low, high in itertools.pairwise(found))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], EMPTY),
        ([4.0], Quantiles(count=1, p50_s=4.0, p95_s=4.0)),
        ([100.0, 10.0, 40.0, 30.0, 20.0], Quantiles(count=5, p50_s=30.0, p95_s=88.0)),
    ],
)
def test_quantiles_of_counts_and_takes_p50_and_p95(values: list[float], expected: Quantiles) -> None:
    found = quantiles_of(values)
    assert found.count == expected.count
    assert found.p50_s == pytest.approx(expected.p50_s)
    assert found.p95_s == pytest.approx(expected.p95_s)


@pytest.mark.parametrize(
    ("retries", "completed", "expected"),
    [(0, 0, None), (3, 0, None), (0, 5, 0.0), (1, 2, 0.5), (3, 2, 1.5)],
)
def test_retry_rate_is_retries_per_completed_and_none_without_completed_work(
    retries: int, completed: int, expected: float | None
) -> None:
    assert retry_rate(retries=retries, completed=completed) == expected


def test_most_in_window_counts_the_busiest_window() -> None:
    # written out by hand, windows half-open: [0, 0.5) holds 0.0, 0.2, 0.4
    times = [1.0, 0.2, 0.0, 0.4, 0.9, 1.85, 3.0]
    assert most_in_window(times=times, window_s=0.5) == 3
    assert most_in_window(times=times, window_s=1.0) == 4  # [0.0, 1.0): 0.0, 0.2, 0.4, 0.9
    assert most_in_window(times=[], window_s=1.0) == 0
    assert window_counts(times=times, window_s=1.0) == [4, 4, 3, 3, 2, 1, 1]  # from 0.0, 0.2, ...


def test_event_rate_is_events_per_second_first_to_last() -> None:
    assert event_rate(times=[2.0, 0.0, 1.0]) == 1.0
    assert event_rate(times=[0.0, 0.5, 1.0, 1.5, 2.0]) == 2.0
    assert event_rate(times=[1.0]) is None
    assert event_rate(times=[1.0, 1.0]) is None


# (shares, expected): worked out by hand from (sum x)^2 / (n x sum x^2).
JAIN = [
    ([], None),  # no owners: no figure
    ([0, 0, 0], None),  # nothing shared: neither fair nor unfair, not 0
    ([5], 1.0),  # one owner has everything there is to have
    ([30, 30, 30, 30], 1.0),  # equal shares
    ([294, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0.1),  # one of ten got it all: 1 / n (compare.py's plain Celery)
    ([1, 1, 3, 3], 0.8),  # 8^2 / (4 x 20): a 1:1:3:3 split (fairness.py's count mode, in tokens)
    ([1, 3], 0.8),  # 4^2 / (2 x 10)
    ([2.5, 2.5], 1.0),  # token counts or emails alike: any numbers
]


@pytest.mark.parametrize(("shares", "expected"), JAIN)
def test_jain_index_is_one_when_equal_and_one_over_n_when_one_owner_gets_all(
    shares: list[float], expected: float | None
) -> None:
    # when
    found = jain_index(shares=shares)
    # then
    assert found == (None if expected is None else pytest.approx(expected))


@given(shares=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=30))
def test_jain_index_lies_between_one_over_n_and_one(shares: list[int]) -> None:
    found = jain_index(shares=shares)
    if not any(shares):
        assert found is None
    else:
        assert found is not None
        assert 1 / len(shares) - 1e-9 <= found <= 1 + 1e-9


@pytest.mark.parametrize(
    ("used", "limit_per_min", "seconds", "expected"),
    [
        (300, 300, 60, 1.0),  # a minute at the limit
        (147, 300, 60, 0.49),
        (450, 300, 90, 1.0),  # 90 s: the limit allows 1.5 minutes' worth
        (1188, 600, 120, 0.99),
        (700, 600, 60, 7 / 6),  # over the limit is reported, not capped
        (0, 300, 60, 0.0),  # idle is 0, not None
        (10, 300, 0, None),  # no time: no figure
        (10, 0, 60, None),  # no limit: no figure
    ],
)
def test_utilization_is_what_was_used_of_the_limit_over_the_window(
    used: float, limit_per_min: float, seconds: float, expected: float | None
) -> None:
    found = utilization(used=used, limit_per_min=limit_per_min, seconds=seconds)
    assert found == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("count", "seconds", "expected"),
    [(30, 60, 30.0), (30, 30, 60.0), (5, 150, 2.0), (0, 60, 0.0), (3, 0, None)],
)
def test_per_minute_scales_a_count_to_a_minute(count: float, seconds: float, expected: float | None) -> None:
    assert per_minute(count=count, seconds=seconds) == expected


def test_ratio_takes_any_numbers_and_is_none_over_nothing() -> None:
    assert ratio(3, 4) == 0.75
    assert ratio(1.5, 0.5) == 3.0
    assert ratio(1, 0) is None
    assert ratio(0, 0) is None
