"""A2Eval paper (arXiv 2602.01640), Table 3: the bottom rows' rank statistics from the table's own scores.

src/embeval/data/reference/a2eval_table3.csv (shipped, the demo prints it) is a copy of ../shared/data/a2eval_table3.csv (13 VLMs: scores on the
A2Eval-constructed benchmark, on the original ten-benchmark pool and from human evaluation, as printed
in the paper's Table 3). The paper reports Spearman(a2eval, human) 0.85, Spearman(original, human) 0.83,
Kendall(a2eval, human) 0.72, Kendall(original, human) 0.64, Spearman(a2eval, original) 0.94 and
Kendall(a2eval, original) 0.81; the last is not reachable with 13 untied models (see docs/a2eval.md).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from embeval_cli import main

TABLE = Path(__file__).resolve().parents[3] / "src" / "embeval" / "data" / "reference" / "a2eval_table3.csv"
SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "a2eval_table3.csv"

# (pair, Spearman, Kendall) as the paper prints them; Kendall(a2eval, original) is printed 0.81
PAPER = {("a2eval", "human"): (0.85, 0.72), ("original", "human"): (0.83, 0.64), ("original", "a2eval"): (0.94, 0.81)}


def _rows(out: str) -> dict[tuple[str, str], tuple[float, float, float, str]]:
    rows = {}
    for m in re.finditer(r"^(\w+) vs (\w+)\s+(-?\d\.\d\d)\s+(-?\d\.\d\d)\s+(-?\d\.\d\d)\s+(\d+/\d+/\d+)$", out, re.M):
        rows[(m[1], m[2])] = (float(m[3]), float(m[4]), float(m[5]), m[6])
    return rows


def test_the_copy_matches_the_shared_reference_table():
    if not SHARED.exists():
        pytest.skip(f"{SHARED} not beside this checkout")
    assert TABLE.read_bytes() == SHARED.read_bytes()


def test_table3_bottom_rows_from_the_cli(capsys):
    assert main(["a2eval", "ranks", str(TABLE), "--reference", "original", "--boot", "50"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert set(rows) == set(PAPER)
    for pair, (rho, tau) in PAPER.items():
        got_rho, got_tau_b, got_tau_a, _ = rows[pair]
        assert got_rho == rho, pair
        if pair == ("original", "a2eval"):
            # 71 concordant, 7 discordant of 78 pairs: (71 - 7) / 78 = 0.8205; the paper prints 0.81
            assert (got_tau_b, got_tau_a, rows[pair][3]) == (0.82, 0.82, "71/7/0")
        else:
            assert got_tau_b == tau == got_tau_a, pair


def test_table3_statistics_agree_with_scipy():
    df = pd.read_csv(TABLE)
    assert len(df) == 13
    from embeval_analysis.a2eval.fidelity import pairwise_table

    for pc in pairwise_table(str(TABLE)):
        a, b = df[pc.a].to_numpy(), df[pc.b].to_numpy()
        assert pc.spearman == pytest.approx(stats.spearmanr(a, b)[0], abs=1e-12)
        assert pc.kendall_b == pytest.approx(stats.kendalltau(a, b, variant="b")[0], abs=1e-12)
        # no ties in any column, so tau-a (counted here) equals tau-b
        assert pc.ties == 0 and pc.kendall_a == pytest.approx(pc.kendall_b, abs=1e-12)
        assert pc.concordant + pc.discordant == 78


def test_kendall_081_is_unreachable_with_13_untied_models():
    """tau = 1 - 2 D / 78: the attainable values next to 0.81 are D = 7 (0.821) and D = 8 (0.795)."""
    taus = np.array([1 - 2 * d / 78 for d in range(79)])
    assert not np.any(np.round(taus, 2) == 0.81)
    assert np.round(taus[7], 2) == 0.82 and np.round(taus[8], 2) == 0.79
