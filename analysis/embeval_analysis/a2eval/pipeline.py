"""The A2Eval pipeline behind ``embeval a2eval`` and the demo: config, pool, curate, evaluate, report.

Config (YAML; every section optional, defaults in ``config/a2eval/default.yaml``)::

    seed: 0
    pool: {procedural: {n_items: 600, seed: 0}}     # or {files: [a.jsonl, b.parquet, task_dir/]}
    embedding: {text_encoder: minilm, image_encoder: pixels, text_weight: 0.5}
    data_agent: {proposer: rules, reviewer: rules, voters: [...], max_rounds: 5, k_per_dim: auto}
    eval_agent: {evaluator: rules, scorer: rules, max_attempts: 4}
    subjects: {population: {n: 10, seed: 0}, specs: []}   # specs: subject YAMLs (kind vlm)
    report: {n_random: 20, n_boot: 1000, n_kcenter: 5}
    cache: ~/.cache/embeval/a2eval_llm.sqlite          # LLM call cache for every role
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embeval.errors import ConfigError, MissingFileError, yaml_problem

CONFIG_DIR = Path(__file__).resolve().parents[3] / "config" / "a2eval"
_SECTIONS = {"seed", "pool", "embedding", "data_agent", "eval_agent", "subjects", "report", "cache"}


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read a YAML config (default: the shipped ``config/a2eval/default.yaml`` if present)."""
    import yaml

    cfg: dict[str, Any] = {}
    if path is None and (CONFIG_DIR / "default.yaml").exists():
        path = CONFIG_DIR / "default.yaml"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise MissingFileError(f"A2Eval config {p} does not exist; see config/a2eval/default.yaml")
        try:
            cfg = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML ({yaml_problem(exc)})") from None
    for k, v in (overrides or {}).items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    unknown = set(cfg) - _SECTIONS
    if unknown:
        raise ConfigError(f"A2Eval config: unknown section(s) {sorted(unknown)}; allowed: {sorted(_SECTIONS)}")
    if cfg.get("cache"):
        cfg["cache"] = os.path.expanduser(str(cfg["cache"]))
    return cfg


def make_pool(cfg: dict[str, Any]) -> list[Any]:
    from embeval_analysis.a2eval.pool import load_pool
    from embeval_analysis.a2eval.procedural import ProceduralConfig, procedural_pool

    pc = cfg.get("pool") or {"procedural": {}}
    if pc.get("files"):
        return load_pool(pc["files"])
    proc = pc.get("procedural") or {}
    bad = set(proc) - set(ProceduralConfig.__dataclass_fields__)
    if bad:
        raise ConfigError(f"pool.procedural: unknown field(s) {sorted(bad)}")
    return procedural_pool(ProceduralConfig(**proc))


def make_subjects(cfg: dict[str, Any]) -> list[Any]:
    from embeval_analysis.a2eval.subjects import embedded_population

    sc = cfg.get("subjects") or {}
    subs = embedded_population(**(sc.get("population") or {})) if sc.get("population", {}) is not None else []
    for spec in sc.get("specs") or []:
        from embeval.subjects.registry import load_subject

        subs.append(load_subject(spec))
    if len(subs) < 3:
        raise ConfigError("A2Eval needs at least 3 subjects to compare rankings; add subjects.specs or a population")
    return subs


def data_agent_config(cfg: dict[str, Any]):
    from embeval_analysis.a2eval.data_agent import DataAgentConfig

    d = dict(cfg.get("data_agent") or {})
    d.setdefault("seed", cfg.get("seed", 0))
    if cfg.get("cache"):
        d.setdefault("cache", cfg["cache"])
    return DataAgentConfig.from_dict(d)


def eval_agent_config(cfg: dict[str, Any]):
    from embeval_analysis.a2eval.eval_agent import EvalAgentConfig

    d = dict(cfg.get("eval_agent") or {})
    if cfg.get("cache"):
        d.setdefault("cache", cfg["cache"])
    return EvalAgentConfig.from_dict(d)


def embed_config(cfg: dict[str, Any]):
    from embeval_analysis.a2eval.sampling import EmbedConfig

    d = cfg.get("embedding") or {}
    bad = set(d) - set(EmbedConfig.__dataclass_fields__)
    if bad:
        raise ConfigError(f"embedding: unknown field(s) {sorted(bad)}")
    return EmbedConfig(**d)


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


def agent_fidelity(ev: Any, reference: Any, items: Sequence[Any]) -> dict[str, Any]:
    """Score fidelity (final score, per benchmark = item ``source``) and inference fidelity (normalised
    edit similarity of outputs) of an Eval Agent evaluation ``ev`` against the reference harness's
    :class:`~.subjects.Results` ``reference`` on the same subjects and items."""
    from embeval_analysis.a2eval import fidelity as F

    if list(reference.subjects) != list(ev.subjects) or list(reference.item_ids) != list(ev.item_ids):
        raise ConfigError("agent_fidelity: the reference harness ran other subjects or items than the Eval Agent")
    groups = [it.source or "pool" for it in items]
    return {"score": F.final_score_fidelity(ev.synth_scores, reference.scores, groups, ev.subjects),
            "inference": F.inference_fidelity(ev.predictions, reference.predictions, groups),
            "scorer_agreement": ev.scorer_fidelity}


def format_agent_fidelity(fid: dict[str, Any]) -> str:
    """The fidelity table of :func:`agent_fidelity`."""
    lines = [f"{'benchmark':<16}{'items':>6}{'score fidelity mean / median':>30}{'inference fidelity':>20}{'equal outputs':>15}"]
    for g, sc in fid["score"].items():
        inf = fid["inference"][g]
        lines.append(f"{g:<16}{sc['items']:>6}{sc['mean']:>22.3f} / {sc['median']:.3f}{inf['similarity']:>20.3f}"
                     f"{inf['exact']:>15.1%}")
    lines.append("score fidelity = 1 - |S_agent - S_ref| / |S_ref| of each subject's final score, over subjects; inference "
                 "fidelity = 1 - normalised edit distance of run_vlm_inference's outputs to the reference harness's; "
                 f"item-level scorer agreement {fid['scorer_agreement']:.1%}")
    return "\n".join(lines)


def fidelity_report(scores: np.ndarray, subjects: Sequence[str], selection: Any, X: np.ndarray, labels: Sequence[str],
                    n_random: int = 20, n_boot: int = 1000, n_kcenter: int = 5, seed: int = 0,
                    seconds_full: float | None = None, seconds_subset: float | None = None) -> dict[str, Any]:
    """Everything the fidelity report prints, as a JSON-able dict (see :mod:`.fidelity`). The headline
    is the balanced subset mean (the paper's score); the mass-weighted reconstruction is an extra row."""
    from embeval_analysis.a2eval import fidelity as F

    n = len(selection.indices)
    weighted = F.subset_fidelity(scores, selection.indices, selection.weights, subjects, n_boot, seed)
    balanced = F.subset_fidelity(scores, selection.indices, None, subjects, n_boot, seed)
    rnd = F.random_baseline(scores, n, n_random, seed)
    kc = F.kcenter_baseline(scores, X, n, n_kcenter, seed)
    full = scores.mean(axis=1)
    return {
        "n_items": int(scores.shape[1]), "n_subset": n, "n_subjects": len(subjects), "headline": "a2eval_balanced",
        "k_per_dim": dict(getattr(selection, "k_per_dim", {}) or {}), "k_rule": getattr(selection, "k_rule", ""),
        "a2eval_balanced": balanced.to_dict(), "a2eval_weighted": weighted.to_dict(),
        "random": rnd.to_dict(), "kcenter": kc.to_dict(),
        "better_than_random": bool(balanced.spearman.value > rnd.spearman_mean.value),
        "redundancy": F.redundancy(X, labels),
        "cost": F.cost_summary(scores.shape[1], n, seconds_full, seconds_subset),
        "scores": {"subjects": list(subjects), "full": full.tolist(),
                   "subset_weighted": selection.estimate(scores).tolist(),
                   "subset_balanced": selection.estimate(scores, weighted=False).tolist()},
    }


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
    lines += ["", f"{'method':<32}{'Spearman [95% CI]':<26}{'Kendall tau-b [95% CI]':<26}{'score MAE':>10}  discordant pairs"]
    for name, key in (("A2Eval (balanced mean)", "a2eval_balanced"), ("  mass-weighted reconstruction", "a2eval_weighted")):
        r = rep[key]
        lines.append(f"{name:<32}{iv(r['spearman']):<26}{iv(r['kendall']):<26}{r['mae']:>10.3f}  {len(r['discordant'])}")
    for name, key in ((f"random x{rep['random']['n_seeds']} (mean)", "random"),
                      (f"k-center x{rep['kcenter']['n_seeds']} (mean)", "kcenter")):
        r = rep[key]
        lines.append(f"{name:<32}{iv(r['spearman_mean']):<26}{iv(r['kendall_mean']):<26}{r['mae_mean']:>10.3f}")
    lines += ["", f"{'dimension':<14}{'items':>6}{'nn cosine':>11}{'near-dup share':>16}"]
    for d, v in rep["redundancy"].items():
        lines.append(f"{d:<14}{int(v['items']):>6}{v['nn_cosine']:>11.3f}{v['dup_share']:>16.2f}")
    s = rep["scores"]
    w = max([14] + [len(n) + 2 for n in s["subjects"]])
    lines += ["", f"{'subject':<{w}}{'full':>8}{'subset(bal)':>13}{'subset(w)':>11}"]
    for k, name in enumerate(s["subjects"]):
        lines.append(f"{name:<{w}}{s['full'][k]:>8.3f}{s['subset_balanced'][k]:>13.3f}{s['subset_weighted'][k]:>11.3f}")
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
