"""Analyses of an Embodied-IQA database, each returning its numbers and saving a PNG.

- :func:`score_by_distortion`: mean score per distortion type x level (heatmap);
- :func:`jnd_sensitivity`: share of each type's images in the JND "severe" third, per subject
  kind (VLA: Decision, VLM: Cognition);
- :func:`subject_srcc_matrix`: Spearman correlation between subjects over the images they share;
- :func:`score_relations`: Cognition vs Decision (vs Execution where scored), SRCC and scatter.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def score_by_distortion(scores, target: str, out_png: str | Path):
    """Mean ``target`` per (distortion, level); rows sorted by category then name."""
    plt = _plt()
    tab = scores.pivot_table(index=["category", "distortion"], columns="level", values=target, aggfunc="mean")
    fig, ax = plt.subplots(figsize=(6, 0.22 * len(tab) + 1.5))
    im = ax.imshow(tab.to_numpy(float), aspect="auto", cmap="viridis")
    ax.set_yticks(range(len(tab)), [f"{c}/{d}" for c, d in tab.index], fontsize=6)
    ax.set_xticks(range(tab.shape[1]), [str(c) for c in tab.columns])
    ax.set_xlabel("distortion level")
    ax.set_title(f"mean {target} score (higher = less affected)", fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return tab


def jnd_sensitivity(scores, out_png: str | Path, kinds=(("VLA", "decision"), ("VLM", "cognition"))):
    """Per distortion type and subject kind: share of its images in the JND severe third."""
    import pandas as pd

    from embeval.scoring.jnd import jnd_groups

    plt = _plt()
    cols = {}
    for label, target in kinds:
        if target in scores and scores[target].notna().all():
            sev = jnd_groups(scores[target].to_numpy(float)) == "severe"
            cols[label] = pd.Series(sev, index=scores.index).groupby(scores["distortion"]).mean()
    tab = pd.DataFrame(cols)
    if tab.empty:
        return tab
    tab = tab.sort_values(tab.columns[0], ascending=False)
    fig, ax = plt.subplots(figsize=(0.25 * len(tab) + 2, 2.4))
    im = ax.imshow(tab.T.to_numpy(float), aspect="auto", cmap="magma_r", vmin=0, vmax=1)
    ax.set_xticks(range(len(tab)), tab.index, rotation=90, fontsize=6)
    ax.set_yticks(range(tab.shape[1]), tab.columns)
    ax.set_title("JND sensitivity: share of images in the severe third", fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return tab


def subject_srcc_matrix(subject_scores, out_png: str | Path):
    """Spearman correlation of subjects' scores (VLA: decision, VLM: cognition) over shared images."""
    plt = _plt()
    s = subject_scores.copy()
    s["score"] = np.where(s["kind"] == "vla", s.get("decision"), s.get("cognition"))
    wide = s.pivot_table(index="image_id", columns="subject", values="score")
    order = sorted(wide.columns, key=lambda c: (s.loc[s["subject"] == c, "kind"].iloc[0], c))
    mat = wide[order].corr(method="spearman")
    fig, ax = plt.subplots(figsize=(0.4 * len(mat) + 2.5, 0.4 * len(mat) + 2))
    im = ax.imshow(mat.to_numpy(float), cmap="coolwarm", vmin=-1, vmax=1)
    ax.set_xticks(range(len(mat)), mat.columns, rotation=90, fontsize=6)
    ax.set_yticks(range(len(mat)), mat.index, fontsize=6)
    ax.set_title("subject-subject SRCC", fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return mat


def score_relations(scores, out_png: str | Path):
    """SRCC between the stage scores present (cognition, decision, execution) and a scatter plot."""
    from embeval.scoring.stats import corr

    plt = _plt()
    cols = [c for c in ("cognition", "decision", "execution") if c in scores and scores[c].notna().any()]
    res = {}
    for i, a in enumerate(cols):
        for b in cols[i + 1:]:
            m = scores[[a, b]].dropna()
            res[f"{a}|{b}"] = corr(m[a], m[b], "spearman", constant=float("nan")) if len(m) > 2 else float("nan")
    if len(cols) >= 2:
        fig, ax = plt.subplots(figsize=(4.5, 4))
        ax.scatter(scores[cols[0]], scores[cols[1]], s=6, alpha=0.6)
        ax.set_xlabel(cols[0])
        ax.set_ylabel(cols[1])
        ax.set_title(f"{cols[0]} vs {cols[1]}: SRCC {res[f'{cols[0]}|{cols[1]}']:.3f}", fontsize=9)
        fig.tight_layout()
        fig.savefig(out_png, dpi=100)
        plt.close(fig)
    return res


def run_all(db: str | Path, out_dir: str | Path) -> dict:
    """Every analysis of database ``db``; PNGs into ``out_dir``. Returns the tables."""

    from embeval_analysis.iqa.database import read_table

    db, out = Path(db), Path(out_dir)
    scores = read_table(db)
    subj = read_table(db, "subject_scores.csv")
    out.mkdir(parents=True, exist_ok=True)  # only once the tables are read
    res = {}
    for t in ("decision", "cognition"):
        if t in scores and scores[t].notna().any():
            res[f"by_distortion_{t}"] = score_by_distortion(scores, t, out / f"iqa_{t}_by_distortion.png")
    res["jnd"] = jnd_sensitivity(scores, out / "iqa_jnd_sensitivity.png")
    res["srcc_matrix"] = subject_srcc_matrix(subj, out / "iqa_subject_srcc.png")
    res["relations"] = score_relations(scores, out / "iqa_cognition_vs_decision.png")
    return res
