"""``embeval iqa bench``: how well do quality metrics predict what a distortion does to robots?

For every target score (Decision, Cognition: means over subjects) and every split (8:2, ``n_splits``
repeats) the zero-shot metrics are evaluated on the test images and the trained metrics are fitted
on the training images and evaluated on the test images. Split protocols (``BenchConfig.split_by``,
:data:`embeval_analysis.iqa.export.SPLITS`): ``random`` (default, the Embodied-IQA paper's: image
pairs partitioned at random 8:2, ten times) and ``scene`` (disjoint by scene, stricter: no scene in
both parts); with ``compare_splits`` (default) the other protocol runs too and every table shows
both (column ``protocol``). Reported: SRCC, KRCC, PLCC (raw) and PLCC after the 4-parameter
logistic (:func:`embeval.scoring.stats.fit_logistic`), median over splits with the 2.5/97.5
percentiles over splits as interval, and the mean over splits (the paper's statistic), broken down by

- ``all``; ``dimension``: the target's parts (Decision: position / rotation / state; Cognition:
  BLEU / ROUGE-L / CIDEr-D), predicted by the metric trained on the total;
- ``jnd``: thirds of the images by the target score (mild / medium / severe), cut over all images of
  the database (``jnd_scope="all"``, default, the paper's) and evaluated on each test part, or cut
  within each test part (``jnd_scope="split"``, the earlier default);
- ``view`` (first / third person), ``source`` (simulated / real), ``level`` (1..5).

The quality gate (:func:`gate_over_splits`, :func:`save_gate`; not part of the paper) uses the
scene-disjoint splits when they were run: a live camera meets scenes the gate was not trained on.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from embeval.image_io import strict_decoding
from embeval_analysis.iqa.metric_registry import bench_defaults
from embeval_analysis.iqa.metrics import TrainConfig

Log = Callable[[str], None]
PARTS = {"decision": ["position", "rotation", "state"], "cognition": ["bleu", "rouge_l", "cider_d"]}


@dataclass
class BenchConfig:
    targets: list[str] = field(default_factory=lambda: ["decision", "cognition"])
    # the registered metrics marked bench=True (embeval_analysis.iqa.metric_registry), in registry order
    zero_shot: list[str] = field(default_factory=lambda: bench_defaults("zero-shot"))
    trained: list[str] = field(default_factory=lambda: bench_defaults("trained"))
    n_splits: int = 10
    test_size: float = 0.2
    seed: int = 0
    split_by: str = "random"  # "random" (paper: image pairs at random 8:2) or "scene" (disjoint by scene)
    compare_splits: bool = True  # also run the other split protocol and report it beside
    jnd_scope: str = "all"  # JND thirds cut over "all" images (paper) or within each test "split"
    cnniqa_splits: int | None = None  # train CNNIQA on the first k splits only (CPU time); None: all
    cnniqa_targets: list[str] | None = None  # train CNNIQA for these targets only; None: all
    min_group: int = 6  # smallest breakdown group that gets correlations
    train: TrainConfig = field(default_factory=TrainConfig)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BenchConfig":
        from embeval.errors import ConfigError

        d = dict(d)
        bad = sorted(set(d) - set(cls.__dataclass_fields__))
        if bad:
            raise ConfigError(f"iqa bench config: unknown field(s) {bad}; allowed: {sorted(cls.__dataclass_fields__)}")
        if "train" in d:
            d["train"] = TrainConfig(**d["train"])
        cfg = cls(**d)
        cfg.check()
        return cfg

    def check(self) -> None:
        """:class:`ConfigError` naming a bad split protocol, JND scope or trained metric."""
        from embeval.errors import ConfigError
        from embeval_analysis.iqa.export import SPLITS
        from embeval_analysis.iqa.metric_registry import get_metric

        for name in self.trained:
            if get_metric(name, "iqa bench trained").kind != "trained":
                raise ConfigError(f"iqa bench trained: {name!r} is a zero-shot metric; name it in zero_shot instead")

        if self.split_by not in SPLITS:
            raise ConfigError(f"iqa bench split_by: {self.split_by!r} is not a split protocol; choose one of "
                              f"{', '.join(SPLITS)} (random: the paper's 8:2 over image pairs; scene: disjoint by scene)")
        if self.jnd_scope not in JND_SCOPES:
            raise ConfigError(f"iqa bench jnd_scope: {self.jnd_scope!r}; choose one of {', '.join(JND_SCOPES)}")

    @property
    def protocols(self) -> list[str]:
        """The split protocols this benchmark runs, ``split_by`` first."""
        from embeval_analysis.iqa.export import SPLITS

        return [self.split_by] + ([p for p in SPLITS if p != self.split_by] if self.compare_splits else [])


#: where the JND thirds are cut: over all images of the database (the paper's) or within each test part
JND_SCOPES = ("all", "split")


@dataclass
class BenchResult:
    per_split: Any  # pandas DataFrame: one row per metric x target x breakdown group x split
    summary: Any  # median over splits with intervals
    unavailable: dict[str, str]
    metric_values: dict[str, np.ndarray]  # zero-shot values per image (all images)
    split0: dict[str, Any]  # test indices and predictions of split 0 (for the gate)
    seconds: float = 0.0
    features: dict[str, np.ndarray] = field(default_factory=dict)  # NR features per image and set (embeval.iqa.features)
    splits: list = field(default_factory=list)  # (train, test) row indices of every split
    preds: dict = field(default_factory=dict)  # (metric, target) -> {split: held-out predictions (aligned with the split's test)}
    protocol: str = "random"  # the split protocol of splits / preds / split0 (the first one run)
    by_protocol: dict = field(default_factory=dict)  # protocol -> {"splits", "preds", "split0"} of every protocol run

    @property
    def protocols(self) -> list[str]:
        """The split protocols run, the default one first."""
        return list(self.by_protocol) or [self.protocol]

    def view(self, protocol: str | None) -> "BenchResult":
        """This result seen through one split protocol: ``splits``, ``preds``, ``split0`` and the tables of
        ``protocol`` only (itself when that protocol was not run or ``protocol`` is None)."""
        if protocol is None or protocol not in self.by_protocol:
            return self
        import dataclasses

        p = self.by_protocol[protocol]

        def only(frame):
            return frame if frame is None or "protocol" not in frame else frame[frame["protocol"] == protocol]

        return dataclasses.replace(self, per_split=only(self.per_split), summary=only(self.summary), split0=p["split0"],
                                   splits=p["splits"], preds=p["preds"], protocol=protocol, by_protocol={protocol: p})


def _load_images(db: Path, scores) -> tuple[list[np.ndarray], list[np.ndarray]]:
    from PIL import Image

    def rd(p):
        with strict_decoding(), Image.open(db / p) as im:
            return np.asarray(im.convert("RGB"))

    refs = {p: rd(p) for p in scores["ref_path"].unique()}
    return [rd(p) for p in scores["path"]], [refs[p] for p in scores["ref_path"]]


def _groups(frame, y: np.ndarray, target: str, jnd: np.ndarray | None = None) -> list[tuple[str, str, np.ndarray, np.ndarray]]:
    """Breakdown groups of one test part; ``jnd``: the test images' JND labels cut over the whole
    database (None: cut the thirds within this test part)."""
    from embeval.scoring.jnd import GROUPS, jnd_split

    allidx = np.arange(len(frame))
    out = [("all", "all", allidx, y)]
    for part in PARTS.get(target, []):
        if part in frame:
            out.append(("dimension", part, allidx, frame[part].to_numpy(float)))
    thirds = jnd_split(y) if jnd is None else {g: np.flatnonzero(jnd == g) for g in GROUPS}
    for name, idx in thirds.items():
        out.append(("jnd", name, np.asarray(idx), y))
    for col in ("view", "source", "level"):
        if col in frame:
            vals = frame[col].to_numpy()
            for v in sorted(set(vals.tolist()), key=str):
                out.append((col, str(v), np.flatnonzero(vals == v), y))
    return out


def _corr(pred: np.ndarray, y: np.ndarray, hib: bool) -> dict[str, float]:
    """SRCC, KRCC (tau-b), PLCC raw and after the 4-parameter logistic (embeval.scoring.stats.fit_logistic);
    the 5PL fit of :func:`embeval.scoring.stats.correlations` is left out (the costliest part). Constant: 0."""
    from embeval.scoring.stats import corr, fit_logistic

    x = np.asarray(pred, float) if hib else -np.asarray(pred, float)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"srcc": 0.0, "krcc": 0.0, "plcc": 0.0, "plcc_4pl": 0.0}
    m4 = fit_logistic(x, y, "4pl")(x)
    return {"srcc": corr(x, y, "spearman"), "krcc": corr(x, y, "kendall"), "plcc": corr(x, y, "pearson"),
            "plcc_4pl": corr(m4, y, "pearson")}


def _rows(metric, mode, kind, target, split, pred, hib, frame, y, min_group, jnd=None, protocol="random") -> list[dict]:
    import warnings

    rows = []
    for bd, group, idx, yy in _groups(frame, y, target, jnd):
        if len(idx) < max(3, min_group):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overflow in the logistic while curve_fit explores
            c = _corr(pred[idx], yy[idx], hib)
        rows.append({"metric": metric, "mode": mode, "kind": kind, "target": target, "protocol": protocol, "breakdown": bd,
                     "group": group, "split": split, "n": len(idx), **c})
    return rows


def summarise(per_split):
    """Median over splits, the mean over splits (``*_mean``, what the Embodied-IQA paper reports) and the
    2.5/97.5 percentile interval of SRCC, per metric/target/split protocol/breakdown group."""
    keys = ["metric", "mode", "kind", "target"] + (["protocol"] if "protocol" in per_split else []) + ["breakdown", "group"]
    g = per_split.groupby(keys, sort=False)
    out = g[["srcc", "krcc", "plcc", "plcc_4pl", "n"]].median()
    for c in ("srcc", "krcc", "plcc", "plcc_4pl"):
        out[f"{c}_mean"] = g[c].mean()
    out["srcc_lo"] = g["srcc"].quantile(0.025)
    out["srcc_hi"] = g["srcc"].quantile(0.975)
    out["n_splits"] = g["split"].nunique()
    return out.reset_index()


def run_bench(db: str | Path, cfg: BenchConfig | None = None, log: Log | None = print) -> BenchResult:
    import pandas as pd

    from embeval.errors import MissingFileError
    from embeval.scoring.jnd import jnd_groups
    from embeval_analysis.iqa.export import make_splits
    from embeval.iqa.predictor import FeatureSVRPredictor
    from embeval_analysis.iqa.metric_registry import get_metric, zero_shot_record
    from embeval_analysis.iqa.metrics import FRFusion, train_cnniqa, zero_shot_scores

    cfg = cfg or BenchConfig()
    cfg.check()
    db = Path(db)
    t0 = time.perf_counter()
    from embeval_analysis.iqa.database import read_table

    scores = read_table(db)
    targets = [t for t in cfg.targets if t in scores and scores[t].notna().all()]
    if not targets:
        raise MissingFileError(f"{db}/scores.csv has none of the targets {cfg.targets} (no VLA/VLM subjects scored?)")
    dist, refs = _load_images(db, scores)
    if log:
        log(f"benchmark on {len(scores)} distorted images of {scores['ref_id'].nunique()} references "
            f"({scores['scene_id'].nunique()} scenes); zero-shot metrics:")
    trained = [get_metric(m) for m in cfg.trained]
    fusions = [m for m in trained if m.trainer == "fusion"]
    names = list(dict.fromkeys(cfg.zero_shot + [f for m in fusions for f in m.fusion_of]))
    values, missing, hib = zero_shot_scores(dist, refs, names, log)
    feats: dict[str, np.ndarray] = {}
    svr_kw = {m.name: m.feature_kwargs() for m in trained if m.trainer == "features"}
    cnn = [m.name for m in trained if m.trainer == "cnniqa"]
    size = None
    if svr_kw:
        from collections import Counter

        from embeval.iqa.features import nr_features, resize_to

        t1 = time.perf_counter()
        size = list(Counter(im.shape[:2] for im in dist).most_common(1)[0][0])  # the predictor resizes live frames to it
        small = resize_to(dist, size)
        feats = {f: nr_features(small, (f,)) for f in dict.fromkeys(f for kw in svr_kw.values() for f in kw["sets"])}
        if log:
            log(f"  NR features ({', '.join(feats)}) of {len(dist)} images at {size[1]}x{size[0]} in {time.perf_counter() - t1:.1f} s")
    rows: list[dict] = []
    by_protocol: dict[str, dict[str, Any]] = {}
    for protocol in cfg.protocols:
        if protocol != cfg.split_by and protocol == "scene" and scores["scene_id"].nunique() < 2:
            if log:
                log("  scene-disjoint splits skipped: the database has one scene")
            continue
        splits = make_splits(scores["scene_id"].to_numpy(), protocol, cfg.n_splits, cfg.test_size, cfg.seed)
        split0: dict[str, Any] = {"test": splits[0][1], "train": splits[0][0], "pred": {}, "predictor": {}}
        n_cnn = len(splits) if cfg.cnniqa_splits is None else min(cfg.cnniqa_splits, len(splits))
        all_preds: dict[tuple[str, str], dict[int, np.ndarray]] = {}
        for target in targets:
            y = scores[target].to_numpy(float)
            jnd_all = jnd_groups(y) if cfg.jnd_scope == "all" else None  # the paper's thirds: over every image
            for k, (tr, te) in enumerate(splits):
                frame = scores.iloc[te].reset_index(drop=True)
                preds: dict[str, tuple[np.ndarray, bool, str, str]] = {}
                for name, v in values.items():
                    if name in cfg.zero_shot:
                        rec = zero_shot_record(name)
                        preds[name] = (v[te], hib[name], rec.mode if rec is not None else "?", "zero-shot")
                for m in fusions:
                    if all(f in values for f in m.fusion_of):
                        fused = FRFusion(m.fusion_of, seed=cfg.seed + k).fit(values, tr, y[tr]).predict(values, te)
                        preds[m.name] = (fused, True, "FR", "trained")
                for m, kw in svr_kw.items():
                    X = np.concatenate([feats[f] for f in kw["sets"]], axis=1)
                    model = FeatureSVRPredictor(target=target, name=m, input_size=size, **kw).fit_features(X[tr], y[tr])
                    preds[m] = (model.predict_features(X[te]), True, "NR", "trained")
                    if k == 0:
                        split0["predictor"][(m, target)] = model
                for m in cnn:
                    if k >= n_cnn or (cfg.cnniqa_targets is not None and target not in cfg.cnniqa_targets):
                        continue
                    t1 = time.perf_counter()
                    model = train_cnniqa([dist[i] for i in tr], y[tr], cfg.train, seed=cfg.seed + k, target=target)
                    preds[m] = (model.predict([dist[i] for i in te]), True, "NR", "trained")
                    if k == 0:
                        split0["predictor"][(m, target)] = model
                    if log:
                        log(f"  {m} -> {target}, {protocol} split {k + 1}/{n_cnn}: trained in {time.perf_counter() - t1:.1f} s")
                for name, (p, h, mode, kind) in preds.items():
                    rows += _rows(name, mode, kind, target, k, p, h, frame, frame[target].to_numpy(float), cfg.min_group,
                                  None if jnd_all is None else jnd_all[te], protocol)
                    all_preds.setdefault((name, target), {})[k] = np.asarray(p, float)
                    if k == 0:
                        split0["pred"][(name, target)] = p
        by_protocol[protocol] = {"splits": splits, "preds": all_preds, "split0": split0}
    per_split = pd.DataFrame(rows)
    if per_split.empty:
        from embeval.errors import InvalidInputError

        raise InvalidInputError(f"every test set has fewer than {max(3, cfg.min_group)} images: build the database from more "
                                f"references (now {scores['ref_id'].nunique()}) or raise the test share (now {cfg.test_size})")
    first = by_protocol[cfg.split_by]
    return BenchResult(per_split, summarise(per_split), missing, values, first["split0"], time.perf_counter() - t0, feats,
                       first["splits"], first["preds"], cfg.split_by, by_protocol)


PROTOCOL_LABEL = {"random": "random 8:2 over images (the paper's)", "scene": "8:2 disjoint by scene"}


def main_table(res: BenchResult):
    """The headline table: breakdown ``all``, one row per metric, target and split protocol."""
    s = res.summary[res.summary["breakdown"] == "all"]
    cols = ["metric", "mode", "kind", "target"] + (["protocol"] if "protocol" in s else []) + [
        "srcc", "srcc_mean", "srcc_lo", "srcc_hi", "krcc", "krcc_mean", "plcc", "plcc_mean", "plcc_4pl", "n_splits"]
    return s[cols]


def _ordered(t, res: BenchResult):
    """Rows by target, then the metric's SRCC under the first protocol (descending), the protocols of a
    metric side by side (the default first)."""
    if "protocol" not in t:
        return t.sort_values(["target", "srcc"], ascending=[True, False])
    first = t[t["protocol"] == res.protocols[0]].set_index(["target", "metric"])["srcc"]
    order = {p: i for i, p in enumerate(res.protocols)}
    key = t.apply(lambda r: (r.target, -first.get((r.target, r.metric), -np.inf), r.metric, order.get(r.protocol, 9)), axis=1)
    return t.iloc[sorted(range(len(t)), key=lambda i: key.iloc[i])]


def print_table(res: BenchResult, out=print) -> None:
    """The headline table; with two split protocols each metric has a row per protocol, side by side."""
    t = main_table(res)
    two = "protocol" in t and t["protocol"].nunique() > 1
    if "protocol" in t:
        out("splits: " + "; ".join(f"{p} = {PROTOCOL_LABEL.get(p, p)}" for p in res.protocols if p in set(t["protocol"])))
    pc = f" {'splits':6s}" if "protocol" in t else ""
    out(f"{'metric':12s} {'mode':4s} {'kind':9s} {'target':9s}{pc} {'SRCC median [95% over splits]':>30s} {'mean':>6s} "
        f"{'KRCC':>6s} {'mean':>6s} {'PLCC':>6s} {'mean':>6s} {'PLCC4':>6s} {'splits':>6s}")
    for _, r in _ordered(t, res).iterrows():
        pv = f" {r.protocol:6s}" if "protocol" in t else ""
        out(f"{r.metric:12s} {r['mode']:4s} {r.kind:9s} {r.target:9s}{pv} {r.srcc:13.3f} [{r.srcc_lo:6.3f},{r.srcc_hi:6.3f}] "
            f"{r.srcc_mean:6.3f} {r.krcc:6.3f} {r.krcc_mean:6.3f} {r.plcc:6.3f} {r.plcc_mean:6.3f} {r.plcc_4pl:6.3f} "
            f"{int(r.n_splits):6d}")
    if two:
        out("  (random: images of one scene can fall in both parts; scene: every test scene is new to the trained metrics)")
    for k, v in res.unavailable.items():
        out(f"  unavailable: {k}: {v}")


def print_breakdowns(res: BenchResult, target: str = "decision", out=print, protocol: str | None = None) -> None:
    """SRCC per breakdown group under one split protocol (default: the first one run)."""
    protocol = protocol or res.protocol
    s = res.summary[(res.summary["target"] == target) & (res.summary["breakdown"] != "all")]
    if "protocol" in s:
        s = s[s["protocol"] == protocol]
    if s.empty:
        return
    piv = s.pivot_table(index=["breakdown", "group"], columns="metric", values="srcc", sort=False)
    out(f"\nSRCC by breakdown ({target}; splits: {PROTOCOL_LABEL.get(protocol, protocol)}; median over splits):")
    out(piv.to_string(float_format=lambda v: f"{v:6.3f}"))


def trained_vs_psnr(res: BenchResult, target: str = "decision", protocol: str | None = None) -> list[dict[str, Any]]:
    """Per trained metric: median SRCC against PSNR's on the same held-out splits of ``protocol`` (default:
    the first one run), and the number of splits in which it is higher."""
    protocol = protocol or res.protocol
    ps = res.per_split
    ps = ps[(ps["breakdown"] == "all") & (ps["target"] == target)]
    if "protocol" in ps:
        ps = ps[ps["protocol"] == protocol]
    base = ps[ps["metric"] == "psnr"].set_index("split")["srcc"]
    out = []
    for m in ps.loc[ps["kind"] == "trained", "metric"].unique():
        s = ps[ps["metric"] == m].set_index("split")["srcc"]
        common = s.index.intersection(base.index)
        out.append({"metric": m, "target": target, "protocol": protocol, "srcc": float(s[common].median()),
                    "psnr_srcc": float(base[common].median()),
                    "splits_better": int((s[common] > base[common]).sum()), "splits": len(common),
                    "better": bool(s[common].median() > base[common].median())})
    return out


def gate_comparison(pred: np.ndarray, psnr: np.ndarray, y: np.ndarray, rates=(0.1, 0.2, 0.3),
                    low_quantile: float = 1 / 3) -> list[dict[str, Any]]:
    """A predicted-score gate against a PSNR-threshold gate at the same withheld rate on one stream.

    "Low" frames: true score in the lowest ``low_quantile`` of the stream (the JND "severe" third).
    Per gate: precision = share of withheld frames that are low; recall = share of low frames
    withheld; mean true score of the frames passed to the policy."""
    from embeval.iqa.gate import threshold_for_rate

    y = np.asarray(y, float)
    low = y <= np.quantile(y, low_quantile)
    out = []
    for r in rates:
        row: dict[str, Any] = {"rate": r, "low_share": float(low.mean())}
        for name, s in (("gate", np.asarray(pred, float)), ("psnr", np.asarray(psnr, float))):
            k = int(round(r * len(y)))
            withheld = np.zeros(len(y), bool)
            withheld[np.argsort(s, kind="stable")[:k]] = True  # the k lowest: exactly the same rate for both gates
            row[f"{name}_threshold"] = threshold_for_rate(s, r)
            row[f"{name}_precision"] = float(low[withheld].mean()) if k else float("nan")
            row[f"{name}_recall"] = float(withheld[low].mean())
            row[f"{name}_passed_mean"] = float(y[~withheld].mean())
        out.append(row)
    return out


def _withheld_low_share(s: np.ndarray, w: np.ndarray, low: np.ndarray, rates) -> np.ndarray:
    """Share of low frames among the ``round(rate * sum(w))`` lowest-scoring frames, per rate; ``w``
    counts each frame's copies (1 = the stream as is; bootstrap weights otherwise). Ties: stable order."""
    o = np.argsort(s, kind="stable")
    wo, lo = w[o].astype(float), low[o].astype(float)
    before = np.cumsum(wo) - wo
    out = np.full(len(rates), np.nan)
    for i, r in enumerate(rates):
        k = int(round(r * wo.sum()))
        if k:
            out[i] = float((np.clip(k - before, 0.0, wo) * lo).sum() / k)
    return out


def gate_over_splits(res: BenchResult, scores, metric: str, target: str = "decision", rates=(0.1, 0.2, 1 / 3),
                     low_quantile: float = 1 / 3, n_boot: int = 1000, seed: int = 0, protocol: str | None = "scene"):
    """The no-reference gate (``metric``, trained on each split's training part) against a PSNR gate
    at the same withheld rate on every split's held-out stream; the splits of ``protocol`` (default
    ``scene``: held-out scenes, as a live camera meets them) when it was run, else the first protocol.

    Low frames: ``target`` in the database's lowest ``low_quantile`` (one fixed label per image).
    Per split and rate: share of withheld frames that are low, for each gate (each withholds the
    ``round(rate * n)`` lowest-scoring frames; PSNR needs the clean reference frame, the gate does not).
    Returns ``(summary, per_split)`` frames; summary per rate: median over splits of the gate's and
    PSNR's share and of their paired difference, each with a 95 % interval from a scene bootstrap
    (``n_boot`` resamples of the database's scenes with replacement; a split's stream keeps the
    drawn copies of its test scenes; the statistic is again the median over splits), and the
    number of splits in which the gate's share is higher / equal / lower."""
    import pandas as pd

    res = res.view(protocol)
    if (metric, target) not in res.preds:
        from embeval.errors import ConfigError

        raise ConfigError(f"no held-out predictions of {metric!r} for {target!r}; benchmarked: {sorted(res.preds)}")
    rates = tuple(float(r) for r in rates)
    y = scores[target].to_numpy(float)
    low = y <= np.quantile(y, low_quantile)
    psnr = res.metric_values["psnr"]
    _, scene_idx = np.unique(scores["scene_id"].to_numpy(), return_inverse=True)
    ks = sorted(res.preds[(metric, target)])
    streams = [(res.splits[k][1], res.preds[(metric, target)][k]) for k in ks]

    def shares(weights):  # (splits, 2 gates, rates)
        return np.stack([np.stack([_withheld_low_share(g, weights[te], low[te], rates),
                                   _withheld_low_share(psnr[te], weights[te], low[te], rates)]) for te, g in streams])

    point = shares(np.ones(len(y)))
    rng = np.random.default_rng(seed)
    n_sc = scene_idx.max() + 1
    boot = np.full((n_boot, 3, len(rates)), np.nan)
    for b in range(n_boot):
        sh = shares(rng.multinomial(n_sc, np.full(n_sc, 1.0 / n_sc))[scene_idx])
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a split whose test scenes were all left out
                boot[b] = [np.nanmedian(sh[:, 0], 0), np.nanmedian(sh[:, 1], 0), np.nanmedian(sh[:, 0] - sh[:, 1], 0)]
    lo, hi = np.nanpercentile(boot, 2.5, axis=0), np.nanpercentile(boot, 97.5, axis=0)
    rows, per = [], []
    for j, r in enumerate(rates):
        g, p = point[:, 0, j], point[:, 1, j]
        d = g - p
        rows.append({"metric": metric, "target": target, "rate": r, "n_splits": len(ks), "low_share": float(low.mean()),
                     "gate": float(np.median(g)), "gate_lo": lo[0, j], "gate_hi": hi[0, j],
                     "psnr": float(np.median(p)), "psnr_lo": lo[1, j], "psnr_hi": hi[1, j],
                     "diff": float(np.median(d)), "diff_lo": lo[2, j], "diff_hi": hi[2, j],
                     "splits_higher": int((d > 1e-12).sum()), "splits_equal": int((np.abs(d) <= 1e-12).sum()),
                     "splits_lower": int((d < -1e-12).sum())})
        per += [{"metric": metric, "target": target, "rate": r, "split": k, "n": len(streams[i][0]),
                 "gate": g[i], "psnr": p[i]} for i, k in enumerate(ks)]
    return pd.DataFrame(rows), pd.DataFrame(per)


def print_gate_over_splits(summary, out=print) -> None:
    """The table of :func:`gate_over_splits` (shares of withheld frames that are low)."""
    if summary.empty:
        return
    r0 = summary.iloc[0]
    out(f"Quality gate ({r0.metric}, no reference, trained per split) vs PSNR gate (needs the clean reference) at the same "
        f"withheld rate, {int(r0.n_splits)} held-out splits; share of withheld frames whose {r0.target} lies in the "
        f"database's lowest third (base rate {r0.low_share:.2f}); median over splits [95% scene bootstrap]:")
    out(f"  {'withheld':>8s} {'NR gate':>19s} {'PSNR gate':>19s} {'gate - PSNR':>21s} {'splits +/=/-':>12s}")
    for _, r in summary.iterrows():
        out(f"  {r.rate:8.0%} {r.gate:5.2f} [{r.gate_lo:4.2f},{r.gate_hi:4.2f}] {r.psnr:5.2f} [{r.psnr_lo:4.2f},{r.psnr_hi:4.2f}] "
            f"{r['diff']:+6.2f} [{r.diff_lo:+5.2f},{r.diff_hi:+5.2f}] {r.splits_higher:4d}/{r.splits_equal}/{r.splits_lower}")


def report_gate(res: BenchResult, scores, out: str | Path | None = None, metric: str | None = None,
                target: str = "decision", rates=(0.1, 0.2, 1 / 3), log: Log | None = print, seed: int = 0,
                protocol: str | None = "scene"):
    """:func:`gate_over_splits` for ``metric`` (default: :func:`best_nr`) printed with ``log`` and written
    to ``out/gate_splits.csv`` (summary) and ``out/gate_per_split.csv``; None when no trained NR metric.
    Splits: ``protocol``'s (default scene-disjoint) when it was run."""
    res = res.view(protocol)
    metric = metric or best_nr(res, target)
    if metric is None or (metric, target) not in res.preds or "psnr" not in res.metric_values:
        if log:
            log("quality gate vs PSNR gate: not measured (needs a trained NR metric and psnr among the zero-shot metrics)")
        return None
    summary, per = gate_over_splits(res, scores, metric, target, rates, seed=seed, protocol=None)
    if log:
        if res.protocol != "scene":
            log(f"  (splits: {PROTOCOL_LABEL.get(res.protocol, res.protocol)}; the held-out frames may come from "
                f"training scenes)")
        print_gate_over_splits(summary, log)
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        summary.to_csv(Path(out) / "gate_splits.csv", index=False)
        per.to_csv(Path(out) / "gate_per_split.csv", index=False)
    return summary


def best_nr(res: BenchResult, target: str = "decision", protocol: str | None = None) -> str | None:
    """The trained no-reference metric with the highest median SRCC on ``target`` (breakdown all) under
    split protocol ``protocol`` (default: the first one run)."""
    res = res.view(protocol)
    s = res.summary
    s = s[(s["breakdown"] == "all") & (s["target"] == target) & (s["kind"] == "trained") & (s["mode"] == "NR")]
    if "protocol" in s:
        s = s[s["protocol"] == res.protocol]
    s = s[[(m, target) in res.split0["predictor"] for m in s["metric"]]]
    return None if s.empty else str(s.sort_values("srcc", ascending=False)["metric"].iloc[0])


def save_gate(res: BenchResult, out: str | Path, rate: float = 0.2, target: str = "decision",
              metric: str | None = None, protocol: str | None = "scene") -> Path | None:
    """Save split 1's predictor of ``metric`` (default: :func:`best_nr`; trained on the training part
    only: the training scenes under the default ``protocol`` scene, when it was run) with ``gate.json``:
    the threshold that withholds ``rate`` of the held-out frames of split 1 by their predicted score."""
    import json

    res = res.view(protocol)
    metric = metric or best_nr(res, target)
    model = res.split0["predictor"].get((metric, target))
    if model is None:
        return None
    p = model.save(out)
    (p / "gate.json").write_text(json.dumps({"threshold": float(np.quantile(res.split0["pred"][(metric, target)], rate)),
                                             "rate": rate, "target": target, "metric": metric, "splits": res.protocol},
                                            indent=1))
    return p
