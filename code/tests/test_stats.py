"""Paired seed differences: the noise of a comparison is the spread of its pairs."""

import math

import numpy as np
import pytest

from normlab.stats import median_loss, paired_difference, row_slopes


def test_a_paired_difference_by_hand():
    p = paired_difference([2.30, 2.25, 2.28], [2.25, 2.22, 2.24])
    assert p.diffs == pytest.approx([0.05, 0.03, 0.04])
    assert p.mean == pytest.approx(0.04) and p.se == pytest.approx(0.01 / math.sqrt(3))
    assert p.resolved and p.dropped == 0
    assert p.describe().startswith("+0.040 +- 0.006 (SE, 3 seeds")
    lo, hi = p.interval95()
    assert p.interval_text() == f"+0.040 ({lo:+.3f}, {hi:+.3f})"


def test_a_shared_seed_effect_cancels_in_the_pairs_and_not_in_the_pooled_spread():
    seed_effect = np.array([0.0, 0.1, -0.1, 0.05])
    a, b = 2.3 + seed_effect + 0.01, 2.3 + seed_effect
    assert paired_difference(a, b).se < 1e-12 < a.std(ddof=1)


def test_diverged_pairs_are_left_out_and_bad_shapes_refused():
    p = paired_difference([2.3, float("nan"), 2.4], [2.2, 2.2, float("nan")])
    assert p.diffs.size == 1 and p.dropped == 2 and math.isnan(p.se) and not p.resolved
    assert "2 pair(s) with a stalled or diverged run (no value) left out" in p.describe()
    # one pair has no spread: the texts say so rather than print nan
    assert p.interval_text() == "+0.100 (one pair: no interval)"
    assert p.describe().startswith("+0.100 (no SE: 1 seed; per seed")
    assert "nan" not in p.describe() and paired_difference([], []).interval_text() == "no pair"
    assert paired_difference([], []).describe() == "no pair without a diverged run"
    with pytest.raises(ValueError, match="one length"):
        paired_difference([1.0, 2.0], [1.0])


def test_a_diverged_run_counts_as_worse_than_any_finished_one_in_the_median():
    assert median_loss([2.0, 3.0, 2.5]) == 2.5
    assert median_loss([2.0, float("nan"), 2.5]) == 2.5  # nan ranks above 2.5
    assert median_loss([2.0, float("nan"), float("nan")]) == float("inf")
    with pytest.raises(ValueError, match="non-empty 1-d"):
        median_loss([])


def test_the_paired_t_interval_uses_students_t_on_few_seeds():
    from normlab.stats import paired_difference, t_critical95

    assert t_critical95(2) == 4.30 and t_critical95(100) == 1.96
    p = paired_difference([1.0, 1.2, 1.1], [0.9, 1.0, 1.05])  # diffs 0.1, 0.2, 0.05
    lo, hi = p.interval95()
    assert lo < p.mean < hi
    assert abs((hi - p.mean) / p.se - 4.30) < 1e-9


def test_row_slopes_fit_each_seed_and_mark_rows_they_cannot_fit():
    x = np.log2([2, 4, 8])
    rows = np.array([[3.0, 2.5, 2.0], [2.0, 2.0, 2.0], [2.0, np.nan, 2.2]])
    np.testing.assert_allclose(row_slopes(x, rows)[:2], [-0.5, 0.0], atol=1e-12)
    assert np.isnan(row_slopes(x, rows)[2])  # a stalled rung: no slope through it
    assert np.isnan(row_slopes(x[:1], rows[:, :1])).all()  # one rung: no slope
    with pytest.raises(ValueError, match="one value per x"):
        row_slopes(x, rows[:, :2])


def test_a_three_rung_ladder_slope_is_half_the_end_difference_so_the_middle_rung_does_not_enter():
    """Chapter 9's ladders have three rungs equally spaced in log2 depth (2, 4, 8 and 3, 6, 12): the
    least-squares slope is (L_deep - L_shallow) / 2 whatever the middle rung's loss."""
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(6, 3))
    for ladder in ((2, 4, 8), (3, 6, 12)):
        x = np.log2(ladder)
        np.testing.assert_allclose(row_slopes(x, rows), (rows[:, 2] - rows[:, 0]) / 2, atol=1e-12)
        moved = rows.copy()
        moved[:, 1] += 10.0  # the middle rung, as far off as you like
        np.testing.assert_allclose(row_slopes(x, moved), row_slopes(x, rows), atol=1e-12)
