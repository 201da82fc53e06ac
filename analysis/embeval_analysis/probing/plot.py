"""Probe accuracy by layer (PNG)."""
from __future__ import annotations

from pathlib import Path


def plot_layer_accuracy(reports, path: str | Path, title: str = "Act2Answer layerwise probing", stamp: str = "") -> Path:
    """One line per :class:`~embeval_analysis.probing.probes.ProbeReport` (accuracy +- std by layer),
    dashed shuffled-label and dotted random-weight controls, chance at 0.5."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reports = reports if isinstance(reports, (list, tuple)) else [reports]
    fig, ax = plt.subplots(figsize=(7, 4))
    for rep in reports:
        names = [p.layer for p in rep.layers]
        x = range(len(names))
        acc = [p.accuracy for p in rep.layers]
        ax.errorbar(x, acc, yerr=[p.accuracy_std for p in rep.layers], marker="o", capsize=3,
                    label=f"{rep.subject} (CNR {rep.cnr:.2f})")
        ax.plot(x, [p.shuffled for p in rep.layers], "--", color="grey", label=f"{rep.subject}: shuffled labels")
        if any(p.random_weights is not None for p in rep.layers):
            ax.plot(x, [p.random_weights if p.random_weights is not None else float("nan") for p in rep.layers], ":",
                    color="black", label=f"{rep.subject}: random weights")
        ax.set_xticks(list(x), names, rotation=30, ha="right")
    ax.axhline(reports[0].chance if reports else 0.5, color="red", lw=0.8, label="chance")
    ax.set_ylim(0.0, 1.05)
    ax.set_ylabel("probe accuracy (grouped CV)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower left")
    if stamp:
        fig.text(0.99, 0.01, stamp, ha="right", va="bottom", fontsize=6, color="grey")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
