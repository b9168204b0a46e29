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
    most_in_window,
    percentile,
    quantiles_of,
    retry_rate,
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
