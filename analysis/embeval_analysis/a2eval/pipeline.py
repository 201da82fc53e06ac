"""The A2Eval pipeline behind ``embeval a2eval`` and the demo: config, pool, curate, evaluate, report.

Config (YAML; every section optional, defaults in ``config/a2eval/default.yaml``)::

    seed: 0
    pool: {procedural: {n_items: 600, seed: 0}}     # or {files: [a.jsonl, b.parquet, task_dir/]}
    embedding: {text_encoder: minilm, image_encoder: pixels, text_weight: 0.5}
    data_agent: {proposer: rules, reviewer: rules, voters: [...], max_rounds: 5, k_per_dim: auto}
    eval_agent: {evaluator: rules, scorer: rules, max_attempts: 4}
    subjects: {population: {n: 10, seed: 0}, specs: []}   # specs: subject YAMLs (kind vlm); n: 0 = no population
    report: {n_random: 20, n_boot: 1000, n_kcenter: 5, headline: dimension_mean}   # or headline: item_mean
    cache: ~/.cache/embeval/a2eval_llm.sqlite          # LLM call cache for every role

:func:`load_config` validates all of it before any work (:func:`check_config`: each section a typed dataclass read by
:func:`embeval.config.from_mapping`, bounds in the dataclasses' ``check_config``; docs/a2eval.md lists them).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embeval.config import check_keys, from_mapping, in_range, mapping, non_empty_str, opts
from embeval.errors import ConfigError, load_yaml

CONFIG_DIR = Path(__file__).resolve().parents[3] / "config" / "a2eval"
_SECTIONS = {"seed", "pool", "embedding", "data_agent", "eval_agent", "subjects", "report", "cache"}
_FIX = "see config/a2eval/default.yaml and docs/a2eval.md"


@dataclass
class PoolConfig:
    """``pool`` of an A2Eval config: pool ``files`` (JSONL, Parquet, lmms-eval task folders) or, when none are
    given, the ``procedural`` pool (:class:`~.procedural.ProceduralConfig`)."""

    procedural: Any = None  # a ProceduralConfig mapping (read in check_config)
    files: list[str] = field(default_factory=list)

    def check_config(self, where: str = "pool") -> None:
        from embeval_analysis.a2eval.procedural import ProceduralConfig

        self.procedural = from_mapping(ProceduralConfig, mapping(self.procedural, f"{where}.procedural"),
                                       f"{where}.procedural", strict=True)


@dataclass
class ReportConfig:
    """``report`` of an A2Eval config: random-subset seeds (>= 20), bootstrap resamples, k-center seeds and the
    headline definition: ``dimension_mean`` (default, the paper's: mean over dimensions of the per-dimension item
    means) or ``item_mean`` (option: mean over the subset's items); the other is reported beside it."""

    n_random: int = 20
    n_boot: int = 1000
    n_kcenter: int = 5
    headline: str = field(default="dimension_mean", metadata=opts(choices=("dimension_mean", "item_mean"),
                                                                  noun="headline definition"))

    def check_config(self, where: str = "report") -> None:
        from embeval_analysis.a2eval.fidelity import MIN_RANDOM_SEEDS

        in_range(self.n_random, f"{where}.n_random", MIN_RANDOM_SEEDS, 10_000, "random subsets; fewer give no stable mean")
        in_range(self.n_boot, f"{where}.n_boot", 1, 100_000)
        in_range(self.n_kcenter, f"{where}.n_kcenter", 1, 1000)


def _section_classes() -> dict[str, type]:
    from embeval_analysis.a2eval.data_agent import DataAgentConfig
    from embeval_analysis.a2eval.eval_agent import EvalAgentConfig
    from embeval_analysis.a2eval.sampling import EmbedConfig
    from embeval_analysis.a2eval.subjects import SubjectsConfig

    return {"pool": PoolConfig, "embedding": EmbedConfig, "data_agent": DataAgentConfig,
            "eval_agent": EvalAgentConfig, "subjects": SubjectsConfig, "report": ReportConfig}


def section(cfg: dict[str, Any], name: str, **defaults: Any) -> Any:
    """Section ``name`` of a config dict as its typed dataclass, read strictly by
    :func:`embeval.config.from_mapping` (unknown keys with did-you-mean, types, bounds); ``defaults`` fill
    keys the section does not set (e.g. the top-level ``seed``)."""
    d = {**defaults, **dict(mapping(cfg.get(name), name))}
    return from_mapping(_section_classes()[name], d, name, strict=True)


def check_config(cfg: Any) -> dict[str, Any]:
    """Validate a whole A2Eval config before any work: sections known, every section's fields typed and
    bounded (the dataclasses' own checks). Returns ``cfg``; raises :class:`ConfigError` in one line."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"must be a mapping of sections ({', '.join(sorted(_SECTIONS))}), got a "
                          f"{type(cfg).__name__}; {_FIX}")
    try:
        check_keys(cfg, _SECTIONS, "", noun="section", note=_FIX)
    except ConfigError as exc:  # "bogus: unknown section; did you mean ...", not ".bogus: ..."
        raise ConfigError(str(exc).lstrip(".: ")) from None
    if "seed" in cfg and (isinstance(cfg["seed"], bool) or not isinstance(cfg["seed"], int) or cfg["seed"] < 0):
        raise ConfigError(f"seed: must be an integer >= 0, got {cfg['seed']!r}")
    if cfg.get("cache") is not None:
        non_empty_str(cfg["cache"], "cache")
    for name in _section_classes():
        section(cfg, name)
    return cfg


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read a YAML config (default: the shipped ``config/a2eval/default.yaml`` if present) and validate all of it
    (:func:`check_config`); errors name the file."""
    cfg: Any = {}
    if path is None and (CONFIG_DIR / "default.yaml").exists():
        path = CONFIG_DIR / "default.yaml"
    if path is not None:
        p = Path(path)
        cfg = load_yaml(p, "A2Eval config", fix=_FIX,
                        missing=f"A2Eval config {p} does not exist; see config/a2eval/default.yaml")
        cfg = {} if cfg is None else cfg
    if isinstance(cfg, dict):
        for k, v in (overrides or {}).items():
            if isinstance(v, dict) and isinstance(cfg.get(k), dict):
                cfg[k] = {**cfg[k], **v}
            else:
                cfg[k] = v
    try:
        check_config(cfg)
    except ConfigError as exc:
        raise ConfigError(f"A2Eval config {path if path is not None else '(overrides)'}: {exc}") from None
    if cfg.get("cache"):
        cfg["cache"] = os.path.expanduser(str(cfg["cache"]))
    return cfg


def make_pool(cfg: dict[str, Any]) -> list[Any]:
    from embeval_analysis.a2eval.pool import load_pool
    from embeval_analysis.a2eval.procedural import procedural_pool

    pc = section(cfg, "pool")
    if pc.files:
        return load_pool(pc.files)
    return procedural_pool(pc.procedural)


def make_subjects(cfg: dict[str, Any]) -> list[Any]:
    """The synthetic population (``subjects.population``; n = 0 or null: none) plus the ``specs`` subjects."""
    from embeval_analysis.a2eval.subjects import embedded_population

    sc = section(cfg, "subjects")
    subs = embedded_population(**asdict(sc.population)) if sc.population is not None else []
    for spec in sc.specs:
        from embeval.subjects.registry import load_subject

        subs.append(load_subject(spec))
    if len(subs) < 3:
        raise ConfigError(f"A2Eval needs at least 3 subjects to compare rankings, got {len(subs)}; add subjects.specs "
                          "or a population (subjects.population.n >= 3)")
    return subs


def data_agent_config(cfg: dict[str, Any]):
    defaults = {"seed": cfg.get("seed", 0)}
    if cfg.get("cache"):
        defaults["cache"] = cfg["cache"]
    return section(cfg, "data_agent", **defaults)


def eval_agent_config(cfg: dict[str, Any]):
    return section(cfg, "eval_agent", **({"cache": cfg["cache"]} if cfg.get("cache") else {}))


def embed_config(cfg: dict[str, Any]):
    return section(cfg, "embedding")


def report_config(cfg: dict[str, Any]) -> ReportConfig:
    return section(cfg, "report")


def measure_speedup(subjects: Sequence[Any], items: Sequence[Any], indices: Sequence[int],
                    seconds_full: float | None = None) -> tuple[float, float, Any]:
    """Wall-clock seconds of evaluating ``subjects`` with the reference harness on the whole pool and
    on the subset ``indices`` (each from a cold solver memo). ``seconds_full`` reuses a timing of the
    full run already made. Returns ``(seconds_full, seconds_subset, subset Results)``."""
    import time

    from embeval_analysis.a2eval.subjects import clear_memo, collect_results

    if seconds_full is None:
        clear_memo()
        t0 = time.perf_counter()
        collect_results(subjects, items)
        seconds_full = time.perf_counter() - t0
    clear_memo()
    t0 = time.perf_counter()
    sub = collect_results(subjects, [items[i] for i in indices])
    return float(seconds_full), time.perf_counter() - t0, sub


def agent_fidelity(ev: Any, reference: Any, items: Sequence[Any], dimensions: Sequence[str] | None = None) -> dict[str, Any]:
    """Score fidelity and inference fidelity (normalised edit similarity of outputs) of an Eval Agent evaluation
    ``ev`` against the reference harness's :class:`~.subjects.Results` ``reference`` on the same subjects and items.

    Default grouping, as the A2Eval paper's Table 6: per capability dimension (``dimensions``: the assigned
    dimension of each item, e.g. ``Selection.dimensions``; default each item's ``dimension`` field) plus the
    ``"final"`` score, the mean over dimensions (:func:`.fidelity.dimension_fidelity`). Beside it, per benchmark
    (item ``source``) with ``"all"`` = the item mean (:func:`.fidelity.final_score_fidelity`):
    ``score_by_benchmark`` / ``inference_by_benchmark``."""
    from embeval_analysis.a2eval import fidelity as F

    if list(reference.subjects) != list(ev.subjects) or list(reference.item_ids) != list(ev.item_ids):
        raise ConfigError("agent_fidelity: the reference harness ran other subjects or items than the Eval Agent")
    if dimensions is None:
        dimensions = [getattr(it, "dimension", None) or "unassigned" for it in items]
    dims = [str(d) for d in dimensions]
    if len(dims) != len(items):
        raise ConfigError(f"agent_fidelity: {len(dims)} dimension labels for {len(items)} items")
    groups = [it.source or "pool" for it in items]
    return {"grouping": "dimension",
            "score": F.dimension_fidelity(ev.synth_scores, reference.scores, dims, ev.subjects),
            "inference": F.inference_fidelity(ev.predictions, reference.predictions, dims),
            "score_by_benchmark": F.final_score_fidelity(ev.synth_scores, reference.scores, groups, ev.subjects),
            "inference_by_benchmark": F.inference_fidelity(ev.predictions, reference.predictions, groups),
            "scorer_agreement": ev.scorer_fidelity}


def format_agent_fidelity(fid: dict[str, Any]) -> str:
    """The fidelity tables of :func:`agent_fidelity`: per capability dimension with the final score (the paper's
    Table 6), then per benchmark."""
    head = f"{'score fidelity mean / median':>30}{'inference fidelity':>20}{'equal outputs':>15}"
    lines = [f"{'dimension':<16}{'items':>6}{head}"]
    for g, sc in fid["score"].items():
        inf = fid["inference"]["all" if g == "final" else g]
        lines.append(f"{g:<16}{sc['items']:>6}{sc['mean']:>22.3f} / {sc['median']:.3f}{inf['similarity']:>20.3f}"
                     f"{inf['exact']:>15.1%}")
    lines += ["", f"{'benchmark':<16}{'items':>6}{head}"]
    for g, sc in fid["score_by_benchmark"].items():
        inf = fid["inference_by_benchmark"][g]
        lines.append(f"{g:<16}{sc['items']:>6}{sc['mean']:>22.3f} / {sc['median']:.3f}{inf['similarity']:>20.3f}"
                     f"{inf['exact']:>15.1%}")
    lines.append("score fidelity = 1 - |S_agent - S_ref| / |S_ref| of each subject's score, over subjects: per dimension "
                 "(S = the dimension's item mean) and final (S = the mean over dimensions, the headline), as the paper's "
                 "Table 6; per benchmark (S = the item mean; 'all' over every item) beside it. Inference fidelity = 1 - "
                 "normalised edit distance of run_vlm_inference's outputs to the reference harness's; item-level scorer "
                 f"agreement {fid['scorer_agreement']:.1%}")
    return "\n".join(lines)


def fidelity_report(scores: np.ndarray, subjects: Sequence[str], selection: Any, X: np.ndarray, labels: Sequence[str],
                    n_random: int = 20, n_boot: int = 1000, n_kcenter: int = 5, seed: int = 0,
                    seconds_full: float | None = None, seconds_subset: float | None = None,
                    headline: str = "dimension_mean") -> dict[str, Any]:
    """Everything the fidelity report prints, as a JSON-able dict (see :mod:`.fidelity`).

    The headline row ``a2eval_balanced`` scores each subject on the balanced subset by ``headline``: by default
    the paper's definition (A2Eval Table 7 "Avg", "the mean across dimensions": the mean over the subset's
    dimensions of each dimension's item mean, :mod:`.headline`); ``"item_mean"`` (the option) by the mean over the
    subset's items. The other definition is the row ``a2eval_other`` beside it (``a2eval_item_mean`` /
    ``a2eval_dimension_mean`` name them by definition); the mass-weighted reconstruction is an extra row."""
    from embeval_analysis.a2eval import fidelity as F
    from embeval_analysis.a2eval.headline import check_method, headline_scores

    check_method(headline)
    n = len(selection.indices)
    dims = list(selection.dimensions)
    weighted = F.subset_fidelity(scores, selection.indices, selection.weights, subjects, n_boot, seed)
    by_dim = F.subset_fidelity(scores, selection.indices, None, subjects, n_boot, seed, groups=dims)
    by_item = F.subset_fidelity(scores, selection.indices, None, subjects, n_boot, seed)
    balanced, other = (by_dim, by_item) if headline == "dimension_mean" else (by_item, by_dim)
    rnd = F.random_baseline(scores, n, n_random, seed)
    kc = F.kcenter_baseline(scores, X, n, n_kcenter, seed)
    full = scores.mean(axis=1)
    sub = np.asarray(scores, float)[:, selection.indices]
    s_dim, s_item = headline_scores(sub, dims), headline_scores(sub, dims, "item_mean")
    return {
        "n_items": int(scores.shape[1]), "n_subset": n, "n_subjects": len(subjects), "headline": "a2eval_balanced",
        "headline_method": headline, "other_method": "item_mean" if headline == "dimension_mean" else "dimension_mean",
        "k_per_dim": dict(getattr(selection, "k_per_dim", {}) or {}), "k_rule": getattr(selection, "k_rule", ""),
        "a2eval_balanced": balanced.to_dict(), "a2eval_other": other.to_dict(),
        "a2eval_dimension_mean": by_dim.to_dict(), "a2eval_item_mean": by_item.to_dict(),
        "a2eval_weighted": weighted.to_dict(),
        "random": rnd.to_dict(), "kcenter": kc.to_dict(),
        "better_than_random": bool(balanced.spearman.value > rnd.spearman_mean.value),
        "redundancy": F.redundancy(X, labels),
        "cost": F.cost_summary(scores.shape[1], n, seconds_full, seconds_subset),
        "scores": {"subjects": list(subjects), "full": full.tolist(),
                   "subset_weighted": selection.estimate(scores).tolist(),
                   "subset_balanced": (s_dim if headline == "dimension_mean" else s_item).tolist(),
                   "subset_dimension_mean": s_dim.tolist(), "subset_item_mean": s_item.tolist()},
    }


#: row labels of the two headline definitions in the printed tables
HEADLINE_LABEL = {"dimension_mean": "mean over dimensions", "item_mean": "item mean"}


def format_report(rep: dict[str, Any]) -> str:
    """Readable tables for a :func:`fidelity_report` dict."""
    def iv(d):
        return f"{d['value']:.3f} [{d['lo']:.3f}, {d['hi']:.3f}]"

    c = rep["cost"]
    speed = (f"measured speed-up {c['speedup']:.1f}x ({c['seconds_full']:.2f} s full vs {c['seconds_subset']:.2f} s subset, "
             f"same subjects)" if np.isfinite(c["speedup"]) else "speed-up not measured")
    lines = [f"pool {rep['n_items']} items -> subset {rep['n_subset']} "
             f"({c['reduction']:.0%} smaller, {c['items_ratio']:.1f}x fewer items; {speed}), "
             f"{rep['n_subjects']} subjects"]
    if rep.get("k_rule"):
        lines.append(rep["k_rule"])
    method = rep.get("headline_method", "dimension_mean")
    other = rep.get("other_method", "item_mean")
    lines += ["", f"{'method':<36}{'Spearman [95% CI]':<26}{'Kendall tau-b [95% CI]':<26}{'score MAE':>10}  discordant pairs"]
    rows = [(f"A2Eval ({HEADLINE_LABEL[method]})", "a2eval_balanced")]
    if "a2eval_other" in rep:
        rows.append((f"  A2Eval ({HEADLINE_LABEL[other]}, option)", "a2eval_other"))
    rows.append(("  mass-weighted reconstruction", "a2eval_weighted"))
    for name, key in rows:
        r = rep[key]
        lines.append(f"{name:<36}{iv(r['spearman']):<26}{iv(r['kendall']):<26}{r['mae']:>10.3f}  {len(r['discordant'])}")
    for name, key in ((f"random x{rep['random']['n_seeds']} (mean)", "random"),
                      (f"k-center x{rep['kcenter']['n_seeds']} (mean)", "kcenter")):
        r = rep[key]
        lines.append(f"{name:<36}{iv(r['spearman_mean']):<26}{iv(r['kendall_mean']):<26}{r['mae_mean']:>10.3f}")
    lines += ["", f"{'dimension':<14}{'items':>6}{'nn cosine':>11}{'near-dup share':>16}"]
    for d, v in rep["redundancy"].items():
        lines.append(f"{d:<14}{int(v['items']):>6}{v['nn_cosine']:>11.3f}{v['dup_share']:>16.2f}")
    s = rep["scores"]
    w = max([14] + [len(n) + 2 for n in s["subjects"]])
    short = {"dimension_mean": "subset(dims)", "item_mean": "subset(items)"}
    lines += ["", f"{'subject':<{w}}{'full':>8}{short[method]:>14}{short[other] + '*':>15}{'subset(w)':>11}"]
    for k, name in enumerate(s["subjects"]):
        o = s.get(f"subset_{other}", [float("nan")] * len(s["subjects"]))[k]
        lines.append(f"{name:<{w}}{s['full'][k]:>8.3f}{s['subset_balanced'][k]:>14.3f}{o:>15.3f}{s['subset_weighted'][k]:>11.3f}")
    lines.append(f"full = the pool's item mean; headline = the subset's {HEADLINE_LABEL[method]} (report.headline: "
                 f"{method}); * the other definition, beside it; subset(w) = the mass-weighted reconstruction")
    return "\n".join(lines)


def save_json(obj: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def default(o):
        if hasattr(o, "tolist"):
            return o.tolist()
        if hasattr(o, "__dataclass_fields__"):
            return asdict(o)
        return str(o)

    path.write_text(json.dumps(obj, indent=2, default=default))
    return path
