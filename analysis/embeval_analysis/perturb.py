"""Scene-perturbation sensitivity and the IQA-vs-scene question.

Input: the rows of :func:`embeval.sim.perturb.score.score_grid` (one per seed x axis-or-distortion x level, each paired
with the unperturbed episode of the same seed).

* :func:`sensitivity`: per (axis, level) the success rate with a Wilson interval, the paired change in success
  against the unperturbed episode of the same seed (exact McNemar / sign test on the discordant seeds), and the
  paired Execution drop ``100 - Execution`` (the reference scores 100 against itself) with a seeded percentile
  bootstrap interval of its mean and a two-sided sign-test p-value (zero drops left out).
* :func:`measure_iqa` + :func:`iqa_correlations`: do full-reference (PSNR, SSIM) and no-reference (PIQE: no weights
  to download) metrics on the (reference, perturbed) first frames predict Decision and Execution under scene
  perturbations as well as under the image distortions? Spearman rho per metric and group. For ``camera_pose`` and
  ``fov`` the reference is the unperturbed render of the same seed but *not pixel-aligned* (the camera moved), so
  full-reference values there mix viewpoint change with quality; they form their own group.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from embeval.errors import ConfigError, InvalidInputError

#: scene axes that move the camera: the unperturbed render is a reference, but not pixel-aligned
CAMERA_AXES = ("camera_pose", "fov")
#: the cheap offline metrics of the IQA-vs-scene table (FR, FR, NR; PIQE needs no weights file)
IQA_METRICS = ("psnr", "ssim", "piqe")
TARGETS = ("decision", "execution")


# --------------------------------------------------------------------------- paired statistics
def sign_test(diffs: Sequence[float]) -> float:
    """Two-sided exact sign test of paired differences against 0 (zeros dropped); 1.0 when all are zero."""
    from scipy.stats import binomtest

    d = np.asarray(diffs, dtype=float)
    pos, neg = int(np.sum(d > 0)), int(np.sum(d < 0))
    return 1.0 if pos + neg == 0 else float(binomtest(pos, pos + neg, 0.5).pvalue)


def bootstrap_mean(x: Sequence[float], n_resamples: int = 2000, confidence: float = 0.95,
                   seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x`` (resampled with ``numpy.random.default_rng(seed)``)."""
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must lie in (0, 1), got {confidence}")
    a = np.asarray(x, dtype=float)
    if a.size == 0:
        return (math.nan, math.nan)
    idx = np.random.default_rng(seed).integers(0, a.size, size=(n_resamples, a.size))
    lo, hi = np.quantile(a[idx].mean(axis=1), [(1 - confidence) / 2, (1 + confidence) / 2])
    return (float(lo), float(hi))


@dataclass(frozen=True)
class SensitivityRow:
    """One (axis, level) cell: rates in 0..1, Decision 0..1, Execution drop in Execution points (0..100)."""

    kind: str
    axis: str
    level: int
    n: int
    decision: float
    execution: float
    success_rate: float
    success_lo: float
    success_hi: float
    reference_rate: float
    success_change: float  # mean of (perturbed - unperturbed) success over the paired seeds
    success_p: float  # exact McNemar (sign test on the discordant seeds)
    execution_drop: float  # mean of 100 - Execution
    drop_lo: float
    drop_hi: float
    drop_p: float  # sign test of the drops
    subject: str = ""  # the policy ("" when the rows name none)
    family: str = "embeval"  # embeval (axis or distortion) or LIBERO-PRO (a fixed variant suite; level 0: none)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sensitivity(rows: Iterable[Mapping[str, Any]], confidence: float = 0.95, n_resamples: int = 2000,
                seed: int = 0) -> list[SensitivityRow]:
    """Per (subject, family, kind, axis, level), in first-seen order: see the module docstring. Rows without
    ``subject``/``family`` count as one subject ``""`` of family ``embeval``."""
    from embeval.scoring.stats import mcnemar, wilson_interval

    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        try:
            key = (str(r.get("subject", "")), str(r.get("family", "embeval")), r.get("kind", "scene"), str(r["axis"]),
                   int(r["level"]))
            float(r["decision"]), float(r["execution"]), bool(r["success"]), bool(r["reference_success"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"a sensitivity row needs axis, level, decision, execution, success and "
                                    f"reference_success: {exc!r} in {dict(r)}") from None
        groups.setdefault(key, []).append(r)
    out = []
    for (subject, family, kind, axis, level), rs in groups.items():
        s = np.array([bool(r["success"]) for r in rs])
        ref = np.array([bool(r["reference_success"]) for r in rs])
        drop = 100.0 - np.array([float(r["execution"]) for r in rs])
        lo, hi = wilson_interval(int(s.sum()), len(rs), confidence)
        b, c = int(np.sum(ref & ~s)), int(np.sum(s & ~ref))
        dlo, dhi = bootstrap_mean(drop, n_resamples, confidence, seed)
        out.append(SensitivityRow(kind, axis, level, len(rs), float(np.mean([float(r["decision"]) for r in rs])),
                                  float(100.0 - drop.mean()), float(s.mean()), lo, hi, float(ref.mean()),
                                  float(np.mean(s.astype(float) - ref.astype(float))), mcnemar(b, c)[1],
                                  float(drop.mean()), dlo, dhi, sign_test(drop), subject, family))
    return out


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order; nan stays nan): the family-wise error stays below alpha when
    every adjusted p below alpha is called significant."""
    p = np.asarray(pvalues, dtype=float)
    ok = np.flatnonzero(np.isfinite(p))
    adj = np.full(p.shape, np.nan)
    order = ok[np.argsort(p[ok], kind="stable")]
    running = 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * p[j]))
        adj[j] = running
    return adj.tolist()


def findings(rows: Sequence[SensitivityRow], alpha: float = 0.05) -> list[str]:
    """The claims the intervals support, one sentence each: cells whose paired success change (McNemar) or
    Execution drop (sign test) stays significant after Holm's correction over every test in ``rows``, and
    whose interval (drop) excludes 0. Empty: nothing can be claimed at ``alpha``."""
    tests = [(r, "success", r.success_p) for r in rows] + [(r, "drop", r.drop_p) for r in rows]
    adj = holm([t[2] for t in tests])
    out = []
    for (r, what, _), q in zip(tests, adj):
        if not (q < alpha):
            continue
        who = f"{r.subject}: " if r.subject else ""
        cell = r.axis if r.level == 0 else f"{r.axis}:{r.level}"
        if what == "success":
            out.append(f"{who}{cell} changes success by {r.success_change:+.2f} ({r.reference_rate:.0%} -> "
                       f"{r.success_rate:.0%}, n {r.n}; McNemar p {r.success_p:.2g}, Holm {q:.2g})")
        elif r.drop_lo > 0:
            out.append(f"{who}{cell} lowers Execution by {r.execution_drop:.1f} points [{r.drop_lo:.1f}, "
                       f"{r.drop_hi:.1f}] (n {r.n}; sign p {r.drop_p:.2g}, Holm {q:.2g})")
    return out


# --------------------------------------------------------------------------- IQA vs scene
def iqa_group(row: Mapping[str, Any]) -> str:
    """The correlation group of a row: ``distortion``, ``scene, aligned`` or ``scene, camera moved``."""
    if row.get("kind") == "distortion":
        return "distortion"
    return "scene, camera moved" if row["axis"] in CAMERA_AXES else "scene, aligned"


def measure_iqa(rows: list[dict[str, Any]], names: Sequence[str] = IQA_METRICS) -> dict[str, str]:
    """Add each metric's value (key = metric name) to every row holding ``reference_frame`` and ``frame``;
    returns {metric: why it is unavailable} for those skipped (e.g. a weights file not present)."""
    from embeval_analysis.iqa.metrics import zero_shot_scores

    have = [r for r in rows if "frame" in r and "reference_frame" in r]
    if not have:
        raise InvalidInputError("no row carries frames: run score_grid(..., keep_frames=True)")
    values, missing, _ = zero_shot_scores([r["frame"] for r in have], [r["reference_frame"] for r in have], names)
    for name, v in values.items():
        for r, x in zip(have, v):
            r[name] = float(x)
    return missing


def iqa_correlations(rows: Iterable[Mapping[str, Any]], metrics: Sequence[str] = IQA_METRICS,
                     targets: Sequence[str] = TARGETS) -> list[dict[str, Any]]:
    """Spearman rho (and its p-value) of each metric with each target over the rows of each :func:`iqa_group`, plus
    ``scene, all``. One dict per (group, metric): ``group``, ``metric``, ``n``, ``rho_<target>``, ``p_<target>``.
    A constant metric or target gives rho nan (undefined), not 0."""
    from scipy.stats import spearmanr

    rows = [r for r in rows if all(m in r for m in metrics)]
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(iqa_group(r), []).append(r)
        if r.get("kind") != "distortion":
            groups.setdefault("scene, all", []).append(r)
    order = ["scene, aligned", "scene, camera moved", "scene, all", "distortion"]
    out = []
    for g in [g for g in order if g in groups]:
        for m in metrics:
            x = np.array([float(r[m]) for r in groups[g]])
            rec: dict[str, Any] = {"group": g, "metric": m, "n": len(x)}
            for t in targets:
                y = np.array([float(r[t]) for r in groups[g]])
                if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0 or not np.all(np.isfinite(x)):
                    rho, p = math.nan, math.nan
                else:
                    res = spearmanr(x, y)
                    rho, p = float(res.statistic), float(res.pvalue)
                rec[f"rho_{t}"], rec[f"p_{t}"] = rho, p
            out.append(rec)
    return out


# --------------------------------------------------------------------------- tables and plot
SENS_COLUMNS = ("kind", "axis", "level", "n", "decision", "execution", "success", "success change", "drop")


def _extra_columns(rows: Sequence[SensitivityRow]) -> list[str]:
    """``subject`` when any row names one, ``family`` when any row is not an embeval axis or distortion."""
    return ([c for c in ("subject",) if any(r.subject for r in rows)]
            + [c for c in ("family",) if any(r.family != "embeval" for r in rows)])


def _fmt_sens(r: SensitivityRow, extra: Sequence[str] = ()) -> list[str]:
    level = "-" if r.level == 0 else str(r.level)
    return [str(getattr(r, c)) for c in extra] + [
            r.kind, r.axis, level, str(r.n), f"{r.decision:.2f}", f"{r.execution:.1f}",
            f"{r.success_rate:.0%} [{r.success_lo:.2f}, {r.success_hi:.2f}]",
            f"{r.success_change:+.2f} (p {r.success_p:.2f})",
            f"{r.execution_drop:.1f} [{r.drop_lo:.1f}, {r.drop_hi:.1f}] (p {r.drop_p:.2f})"]


def _markdown(header: Sequence[str], body: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(b) + " |" for b in body])


def sensitivity_markdown(rows: Sequence[SensitivityRow], confidence: float = 0.95) -> str:
    """The table: success with its Wilson interval, paired success change (McNemar p), Execution drop with its
    bootstrap interval (sign-test p). A ``subject`` and a ``family`` column lead where the rows need them; a
    LIBERO-PRO variant (no level) shows level ``-``."""
    pct = f"{confidence:.0%}"
    extra = _extra_columns(rows)
    head = extra + ["kind", "axis", "level", "n", "Decision", "Execution", f"success [Wilson {pct}]",
                    "success change vs unperturbed (McNemar p)", f"Execution drop [bootstrap {pct}] (sign p)"]
    return _markdown(head, [_fmt_sens(r, extra) for r in rows])


def iqa_markdown(corrs: Sequence[Mapping[str, Any]], targets: Sequence[str] = TARGETS) -> str:
    head = ["group", "metric", "n"] + [f"Spearman rho with {t} (p)" for t in targets]
    body = [[c["group"], c["metric"], str(c["n"])]
            + [("n/a" if math.isnan(c[f"rho_{t}"]) else f"{c[f'rho_{t}']:+.2f} ({c[f'p_{t}']:.2f})") for t in targets]
            for c in corrs]
    return _markdown(head, body)


def write_csv(path: Path, records: Sequence[Mapping[str, Any]]) -> Path:
    path = Path(path)
    keys = list(records[0]) if records else []
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(records)
    return path


def plot_sensitivity(rows: Sequence[SensitivityRow], path: Path, title: str = "") -> Path:
    """Two panels against the level per subject (one panel row each), one line per axis (distortions dashed):
    success rate with Wilson bars, Execution drop with bootstrap bars. LIBERO-PRO variants (no level) are single
    points at level 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    subjects = list(dict.fromkeys(r.subject for r in rows)) or [""]
    fig, axs = plt.subplots(len(subjects), 2, figsize=(12, 4.8 * len(subjects)), squeeze=False)
    keys = list(dict.fromkeys((r.family, r.kind, r.axis) for r in rows))
    cmap = plt.get_cmap("tab20")
    for si, subject in enumerate(subjects):
        for i, key in enumerate(keys):
            rs = sorted([r for r in rows if r.subject == subject and (r.family, r.kind, r.axis) == key],
                        key=lambda r: r.level)
            if not rs:
                continue
            family, kind, axis = key
            lv = np.array([r.level for r in rs], dtype=float) + (i - len(keys) / 2) * 0.02  # small dodge
            style = dict(color=cmap(i % 20), ls="--" if kind == "distortion" else "-",
                         marker="s" if family != "embeval" else "o", ms=4, capsize=2, lw=1.2)
            label = (axis + (" (distortion)" if kind == "distortion" else "")
                     + (f" ({family})" if family != "embeval" else "")) if si == 0 else None
            sr = np.array([r.success_rate for r in rs])
            axs[si, 0].errorbar(lv, sr, yerr=[sr - [r.success_lo for r in rs], [r.success_hi for r in rs] - sr],
                                label=label, **style)
            d = np.array([r.execution_drop for r in rs])
            axs[si, 1].errorbar(lv, d, yerr=[d - [r.drop_lo for r in rs], [r.drop_hi for r in rs] - d], **style)
        who = f"{subject}: " if subject else ""
        axs[si, 0].set(xlabel="level", ylabel="success rate (Wilson 95%)", ylim=(-0.05, 1.05), title=f"{who}success")
        axs[si, 1].set(xlabel="level", ylabel="Execution drop, 100 - Execution (bootstrap 95%)",
                       title=f"{who}paired Execution drop")
        for a in axs[si]:
            a.set_xticks(sorted({r.level for r in rows}))
            a.grid(alpha=0.3)
    fig.legend(loc="center right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


@dataclass(frozen=True)
class Outputs:
    """Files written by :func:`write_outputs` (None: not asked)."""

    sensitivity_csv: Path
    sensitivity_md: Path
    plot: Path
    iqa_csv: Path | None = None
    iqa_md: Path | None = None

    def paths(self) -> list[Path]:
        return [getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None]


def write_outputs(out_dir: Path, sens: Sequence[SensitivityRow], corrs: Sequence[Mapping[str, Any]] | None = None,
                  title: str = "") -> Outputs:
    """``sensitivity.csv``/``.md``/``.png`` (and ``iqa_vs_scene.csv``/``.md`` given ``corrs``) in ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sc = write_csv(out_dir / "sensitivity.csv", [r.to_dict() for r in sens])
    sm = out_dir / "sensitivity.md"
    sm.write_text(sensitivity_markdown(sens) + "\n")
    png = plot_sensitivity(sens, out_dir / "sensitivity.png", title)
    ic = im = None
    if corrs is not None:
        ic = write_csv(out_dir / "iqa_vs_scene.csv", list(corrs))
        im = out_dir / "iqa_vs_scene.md"
        im.write_text(iqa_markdown(corrs) + "\n")
    return Outputs(sc, sm, png, ic, im)
