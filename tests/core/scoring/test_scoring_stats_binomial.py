"""The binomial helpers' home is embeval.scoring.stats (Act2Answer and the perturbation analysis import them from there)."""
from __future__ import annotations

import math

import pytest

from embeval.errors import ConfigError, InvalidInputError
from embeval.scoring.stats import mcnemar, wilson_interval


def test_wilson_interval_by_hand():
    z = 1.959963984540054  # the 97.5 % normal quantile
    p, n = 0.7, 10
    den = 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / den, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    assert wilson_interval(7, 10) == pytest.approx((centre - half, centre + half), abs=1e-12)
    assert wilson_interval(7, 10) == pytest.approx((0.39677, 0.89221), abs=1e-5)
    assert wilson_interval(0, 0) == (0.0, 1.0) and wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    lo90, hi90 = wilson_interval(7, 10, 0.90)
    assert 0.39677 < lo90 and hi90 < 0.89221  # narrower at lower confidence
    with pytest.raises(InvalidInputError, match="need 0 <= successes <= n"):
        wilson_interval(5, 4)
    with pytest.raises(ConfigError, match=r"confidence must lie in \(0, 1\), got 1.5"):
        wilson_interval(1, 2, 1.5)


def test_mcnemar_by_hand():
    stat, p_exact, p_chi2 = mcnemar(8, 2)
    assert stat == pytest.approx((6 - 1) ** 2 / 10)  # 2.5
    assert p_exact == pytest.approx(2 * (1 + 10 + 45) / 2**10)  # two-sided binomial, min(b, c) = 2 of 10
    assert p_chi2 == pytest.approx(math.erfc(math.sqrt(2.5 / 2)))  # chi2(1) survival at 2.5
    assert mcnemar(0, 0) == (0.0, 1.0, 1.0)
    with pytest.raises(InvalidInputError, match="discordant counts must be >= 0, got b=-1, c=2"):
        mcnemar(-1, 2)


def test_act2answer_aggregate_keeps_the_names():
    from embeval.act2answer import aggregate

    assert aggregate.wilson_interval is wilson_interval and aggregate.mcnemar is mcnemar
