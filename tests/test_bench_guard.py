"""The guard's pure parts (``python -m bench guard``, docs/benchmarks.md): each figure is
judged against its bound, a missing figure holds nothing, and one broken bound makes the
exit code 1. Its timings are the bench's, not the suite's."""

from __future__ import annotations

import pytest

from bench.guard import BOUNDS, PARTS, Bound, bounds_of, exit_code, judge, main, report


def within() -> dict[str, float | None]:
    return {b.key: b.limit for b in BOUNDS}  # each exactly at its bound: holds


def test_every_figure_at_its_bound_holds() -> None:
    verdicts = judge(within())
    assert [v.bound for v in verdicts] == list(BOUNDS)
    assert all(v.holds for v in verdicts) and exit_code(verdicts) == 0


def test_one_figure_over_its_bound_breaks_the_guard() -> None:
    for bound in BOUNDS:
        figures = within()
        figures[bound.key] = bound.limit * 1.01
        verdicts = judge(figures)
        assert [v.holds for v in verdicts] == [b is not bound for b in BOUNDS]
        assert exit_code(verdicts) == 1
        assert "BROKEN" in report(verdicts).splitlines()[BOUNDS.index(bound)]


def test_a_figure_not_taken_holds_nothing() -> None:
    figures = within()
    del figures["idle_rss_mib"]
    verdicts = judge(figures)
    assert exit_code(verdicts) == 1
    assert "-" in report(verdicts).splitlines()[2] and "BROKEN" in report(verdicts)


def test_the_bounds_are_the_documented_ones() -> None:
    assert {b.key: (b.limit, b.unit) for b in BOUNDS} == {
        "burst_vs_raw": (1.5, "×"),
        "idle_core_pct": (0.05, "%"),
        "idle_rss_mib": (40.0, "MiB"),
        "version_vs_click": (1.5, "×"),
        "list_vs_click": (3.0, "×"),
    }
    lower = judge({"x": 0.5}, [Bound("x", "a figure", 1.0, "×")])
    assert lower[0].holds


def test_a_part_of_the_guard_is_judged_by_its_own_bounds() -> None:
    """``python -m bench guard cli``: the two CLI ratios alone, each against its bound; the
    parts together are the whole guard; an unknown part is a usage error, nothing measured."""
    cli = bounds_of(["cli"])
    assert [b.key for b in cli] == ["version_vs_click", "list_vs_click"]
    verdicts = judge({"version_vs_click": 1.2, "list_vs_click": 2.5}, cli)
    assert exit_code(verdicts) == 0 and "burst" not in report(verdicts)
    assert exit_code(judge({"version_vs_click": 1.2, "list_vs_click": 3.1}, cli)) == 1
    assert bounds_of([]) == list(BOUNDS) == bounds_of(list(PARTS))
    with pytest.raises(ValueError, match="no part 'clli'"):
        bounds_of(["clli"])
    assert main(["clli"]) == 2
