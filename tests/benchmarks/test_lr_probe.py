"""``benchmarks/lr_probe.py``: its arithmetic and its argument checks (the probe itself loads a model
and is run by hand, docs/LOG.md)."""

from __future__ import annotations

import pytest

from tests.benchmarks.benchmark_scripts import load_benchmark

lp = load_benchmark("lr_probe")


def test_push_is_the_advantage_weighted_change_and_kl_the_mean_log_ratio() -> None:
    lp0 = [(-1.0, -1.0), (-2.0, -2.0, -2.0)]
    lpt = [(-0.5, -0.5), (-2.5, -2.5, -2.5)]  # the good sample up by 0.5, the bad one down by 0.5
    push, kl = lp.movement(lp0, lpt, [1.0, -1.0])
    assert push == pytest.approx(0.5)
    assert kl == pytest.approx((-0.5 * 2 + 0.5 * 3) / 5)
    push_flipped, _ = lp.movement(lp0, lpt, [-1.0, 1.0])  # the same move against the advantages
    assert push_flipped == pytest.approx(-0.5)
    assert lp.movement(lp0, lp0, [1.0, -1.0]) == (0.0, 0.0)
    assert lp.movement(lp0, lpt, [0.0, 0.0])[0] == 0.0


def test_the_chosen_rate_is_the_largest_below_the_kl_bound() -> None:
    assert lp.chosen_rate({1e-5: 0.01, 3e-5: 0.05, 1e-4: 0.3}, 0.1) == 3e-5
    assert lp.chosen_rate({1e-4: 0.3}, 0.1) is None


@pytest.mark.parametrize("text", ["", "abc", "1e-5,-1", "0", "nan", "1e-5,inf"])
def test_bad_rates_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(SystemExit, match="lr_probe: --lrs"):
        lp.parse_lrs(text)


def test_parse_rates() -> None:
    assert lp.parse_lrs("1e-5, 3e-4") == [1e-5, 3e-4]
