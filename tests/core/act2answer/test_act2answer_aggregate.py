"""Act2Answer aggregation: hand-computed cases and cross-checks against statsmodels/scipy."""
import math

import numpy as np
import pytest

from embeval.act2answer.aggregate import (
    category_rates,
    category_table,
    format_table,
    item_consistency,
    mcnemar,
    position_bias_index,
    regime,
    swap_stats,
    wilson_interval,
)
from embeval.act2answer.zones import classify
from embeval.errors import ConfigError, InvalidInputError


def rec(item, layout, success, choice, category="color"):
    return {"item": item, "category": category, "layout": layout, "success": float(success), "choice": choice}


# A hand case: 4 items in both layouts.
#   i1: correct both (chose left then right: same image)      -> consistent
#   i2: always left; correct left in original, right in swapped -> 1 then 0, same side, inconsistent
#   i3: wrong both                                             -> consistent
#   i4: out of bounds in swapped                               -> consistency None
HAND = [
    rec("i1", "original", 1, "left"), rec("i1", "swapped", 1, "right"),
    rec("i2", "original", 1, "left"), rec("i2", "swapped", 0, "left"),
    rec("i3", "original", 0, "right"), rec("i3", "swapped", 0, "left"),
    rec("i4", "original", 0, "right", "shape"), rec("i4", "swapped", 0, None, "shape"),
]


def test_wilson_matches_statsmodels():
    from statsmodels.stats.proportion import proportion_confint

    for k, n in [(0, 10), (3, 10), (7, 10), (10, 10), (41, 80), (1, 1)]:
        lo, hi = wilson_interval(k, n)
        slo, shi = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert lo == pytest.approx(slo, abs=1e-12) and hi == pytest.approx(shi, abs=1e-12)
    # hand value: k=7, n=10, z=1.959964: centre (0.7 + z^2/20)/(1 + z^2/10)
    z = 1.959963984540054
    c = (0.7 + z * z / 20) / (1 + z * z / 10)
    h = z * math.sqrt(0.7 * 0.3 / 10 + z * z / 400) / (1 + z * z / 10)
    assert wilson_interval(7, 10) == pytest.approx((c - h, c + h))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(InvalidInputError):
        wilson_interval(5, 4)


def test_regimes_at_the_boundaries():
    assert regime(0.39) == "failure"
    assert regime(0.40) == "no usable knowledge"
    assert regime(0.5) == "no usable knowledge"
    assert regime(0.60) == "no usable knowledge"
    assert regime(0.61) == "usable knowledge"
    assert regime(0.7, delta=0.25) == "no usable knowledge"
    with pytest.raises(ConfigError):
        regime(0.5, delta=0.6)


def test_category_rates_hand_case():
    rates = {r.category: r for r in category_rates(HAND)}
    c = rates["color"]
    assert (c.n_items, c.n_episodes) == (3, 6)
    assert c.rate_original == pytest.approx(2 / 3) and c.rate_swapped == pytest.approx(1 / 3)
    assert c.rate == pytest.approx(0.5)
    assert (c.ci_low, c.ci_high) == pytest.approx(wilson_interval(3, 6))
    assert c.regime == "no usable knowledge" and not c.separated
    s = rates["shape"]
    assert s.rate == 0.0 and s.regime == "failure"
    a = rates["all"]
    assert a.n_episodes == 8 and a.rate == pytest.approx(0.5 * (2 / 4 + 1 / 4))
    assert list(rates)[-1] == "all"


def test_swap_statistics_hand_case():
    assert item_consistency(HAND) == {"i1": True, "i2": False, "i3": True, "i4": None}
    # choices: left x4 (i1o, i2o, i2s, i3s), right x3 (i1s, i3o, i4o), None x1
    assert position_bias_index(HAND) == pytest.approx((4 - 3) / 7)
    ss = swap_stats(HAND)
    assert ss.n_pairs == 4
    assert ss.consistency == pytest.approx(2 / 3)
    assert ss.same_side == pytest.approx(1 / 3)  # i2 only, of i1, i2, i3
    assert (ss.both_correct, ss.original_only, ss.swapped_only, ss.neither) == (1, 1, 0, 2)
    assert ss.mcnemar_p_exact == pytest.approx(1.0)


def test_mcnemar_against_statsmodels():
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

    for b, c in [(10, 2), (3, 9), (0, 6), (25, 14)]:
        stat, p_exact, p_chi2 = mcnemar(b, c)
        t = np.array([[5, b], [c, 7]])
        ex = sm_mcnemar(t, exact=True)
        ch = sm_mcnemar(t, exact=False, correction=True)
        assert p_exact == pytest.approx(ex.pvalue, rel=1e-9)
        assert stat == pytest.approx(ch.statistic) and p_chi2 == pytest.approx(ch.pvalue)
    # hand: b=6, c=0 -> exact p = 2 * 0.5^6
    assert mcnemar(6, 0)[1] == pytest.approx(2 * 0.5 ** 6)
    assert mcnemar(0, 0) == (0.0, 1.0, 1.0)


def test_always_left_policy_is_pure_position_bias():
    recs = []
    for i in range(20):
        side = "left" if i % 2 else "right"
        other = "right" if side == "left" else "left"
        recs.append(rec(f"k{i}", "original", side == "left", "left"))
        recs.append(rec(f"k{i}", "swapped", other == "left", "left"))
    ss = swap_stats(recs)
    assert ss.position_bias == 1.0 and ss.consistency == 0.0 and ss.same_side == 1.0
    assert category_rates(recs)[0].rate == pytest.approx(0.5)
    # a perfectly discordant table: McNemar sees b = c = 10 -> p = 1 (no layout effect on accuracy)
    assert (ss.original_only, ss.swapped_only) == (10, 10)


def test_category_table_and_text():
    t = category_table({"a": HAND, "b": [dict(r, success=1.0) for r in HAND]})
    assert set(t["subject"]) == {"a", "b"}
    assert t[(t.subject == "b") & (t.category == "all")]["rate"].item() == 1.0
    assert t[(t.subject == "b") & (t.category == "all")]["regime"].item() == "usable knowledge"
    text = format_table(t)
    assert "color" in text and "all" in text and "U" in text


def test_zones_hand_cases():
    L, R = (0.55, 0.15), (0.55, -0.15)
    assert classify((0.55, 0.15), L, R, "left", 0.08).zone == "correct"
    z = classify((0.60, -0.10), L, R, "left", 0.08)  # 0.0707 m from the right centre
    assert z.zone == "incorrect" and z.choice == "right" and z.distance_incorrect == pytest.approx(math.hypot(0.05, 0.05))
    z = classify((0.55, 0.0), L, R, "right", 0.08)
    assert z.zone == "out_of_bounds" and z.choice is None
    assert classify((0.55, 0.07), L, R, "left", 0.08).zone == "correct"  # exactly eps away is inside
    with pytest.raises(ConfigError):
        classify((0, 0), L, R, "left", 0.2)  # zones would overlap
