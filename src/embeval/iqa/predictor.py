"""Trained no-reference (NR) quality predictors.

:class:`NRPredictor`: pyiqa's CNNIQA architecture (Kang et al. 2014, RGB variant) trained from
scratch to predict an Embodied-IQA score (e.g. the Decision score, 0..5 summed
over 5 tasks, higher = less degraded) from the distorted image alone.

Input: RGB uint8 (H, W, 3) images, resized to ``input_size`` = [height, width] and scaled to [0, 1].
Output: the predicted score in the training target's units (the net predicts the z-score; the
target mean/std are stored with the weights).

Files: ``<path>/predictor.json`` (architecture, input size, target name and normalisation) and
``<path>/model.safetensors`` (weights). ``NRPredictor.load(path)`` needs no network access.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from embeval.errors import ConfigError, MissingWeightsError, read_json

#: the fix for a predictor folder that cannot be read
_FIX = "train one with `embeval iqa bench --db DB --save-predictor DIR` or copy the folder again"


@dataclass
class PredictorConfig:
    arch: str = "cnniqa"
    input_size: list[int] = field(default_factory=lambda: [96, 128])  # [height, width]
    n_kers: int = 50
    n_nodes: int = 800
    target: str = "decision"
    target_mean: float = 0.0
    target_std: float = 1.0


def build_net(cfg: PredictorConfig):
    """pyiqa's CNNIQA (no weights downloaded: ``pretrained=None``)."""
    from pyiqa.archs.cnniqa_arch import CNNIQA

    return CNNIQA(n_kers=cfg.n_kers, n1_nodes=cfg.n_nodes, n2_nodes=cfg.n_nodes, pretrained=None)


def to_tensor(images: Sequence[np.ndarray], input_size) -> "torch.Tensor":  # noqa: F821
    """RGB uint8 images -> float (N, 3, h, w) in [0, 1] at ``input_size`` = [h, w] (area resize)."""
    import torch

    from embeval.iqa.features import resize_to

    return torch.from_numpy(np.stack(resize_to(images, input_size))).permute(0, 3, 1, 2).float().div_(255.0)


class NRPredictor:
    """Predicts a score from one distorted image (no reference)."""

    def __init__(self, net, cfg: PredictorConfig):
        self.net = net.eval()
        self.cfg = cfg

    @property
    def name(self) -> str:
        return f"{self.cfg.arch}->{self.cfg.target}"

    def predict(self, images: Sequence[np.ndarray], batch_size: int = 64) -> np.ndarray:
        """Predicted scores (N,), in the target's units."""
        import torch

        out = []
        with torch.no_grad():
            for i in range(0, len(images), batch_size):
                z = self.net(to_tensor(images[i:i + batch_size], self.cfg.input_size)).reshape(-1).numpy()
                out.append(z * self.cfg.target_std + self.cfg.target_mean)
        return np.concatenate(out) if out else np.zeros(0)

    def __call__(self, image: np.ndarray) -> float:
        return float(self.predict([image])[0])

    def save(self, path: str | Path) -> Path:
        from safetensors.torch import save_file

        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, str(p / "model.safetensors"))
        (p / "predictor.json").write_text(json.dumps(asdict(self.cfg), indent=1))
        return p

    @classmethod
    def load(cls, path: str | Path) -> "NRPredictor":
        from safetensors.torch import load_file

        p = Path(path).expanduser()
        if not (p / "predictor.json").exists() or not (p / "model.safetensors").exists():
            raise MissingWeightsError(f"no quality predictor at {p} (predictor.json + model.safetensors); train one with "
                                      "`embeval iqa bench --db DB --save-predictor DIR`")
        doc = read_json(p / "predictor.json", "predictor config", _FIX)
        try:
            cfg = PredictorConfig(**doc)
            net = build_net(cfg)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"predictor config {p / 'predictor.json'} does not fit this embeval ({exc}); {_FIX}") from None
        weights = p / "model.safetensors"
        _weights_file(weights)
        try:  # safetensors holds plain tensors only (no pickle)
            net.load_state_dict(load_file(str(weights)))
        except Exception as exc:  # safetensors' own error type (torn header) or a shape mismatch (RuntimeError)
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise ConfigError(f"predictor weights {weights} cannot be read or do not fit its predictor.json ({why}); "
                              f"{_FIX}") from None
        return cls(net, cfg)


class FeatureSVRPredictor:
    """An RBF support-vector regressor on :func:`embeval.iqa.features.nr_features` (standardised):
    ``sets=("nss",)`` is BRISQUE retrained on the target; ``nr-fusion`` adds colour moments, image
    and signal statistics.

    ``input_size`` = [height, width]: frames are resized to it before the features are computed (the
    size of the training images; features such as sharpness depend on it; None: as they come).
    ``target_transform="rank"``: the SVR is fitted to the normal scores of the training target's ranks
    (the Decision score is heavy-tailed: most frames lie near its maximum) and its output is mapped
    back to target units through the training target's quantiles (monotone, so a gate's ordering is
    that of the SVR); ``"none"``: fitted to the target itself.

    Fitted with scikit-learn; saved as plain arrays (``model.npz``, no pickle) and evaluated with
    numpy: ``f(x) = sum_i a_i exp(-gamma |z - s_i|^2) + b`` with ``z`` the standardised features.
    """

    def __init__(self, sets=("nss", "colour", "stats", "signal"), target: str = "decision", C: float = 3.0,
                 epsilon: float = 0.05, name: str | None = None, target_transform: str = "none",
                 input_size: Sequence[int] | None = None):
        if target_transform not in ("none", "rank"):
            from embeval.errors import ConfigError

            raise ConfigError(f"target_transform must be 'none' or 'rank', got {target_transform!r}")
        self.sets, self.target, self.C, self.epsilon = tuple(sets), target, float(C), float(epsilon)
        self.arch = name or ("brisque-svr" if self.sets == ("nss",) else "nr-fusion")
        self.target_transform = target_transform
        self.input_size = None if input_size is None else [int(input_size[0]), int(input_size[1])]
        self.params: dict[str, np.ndarray] = {}

    @property
    def name(self) -> str:
        return f"{self.arch}->{self.target}"

    def features(self, images) -> np.ndarray:
        from embeval.iqa.features import nr_features, resize_to

        return nr_features(resize_to(images, self.input_size), self.sets)

    def fit_features(self, X: np.ndarray, y: np.ndarray) -> "FeatureSVRPredictor":
        from scipy.special import ndtri
        from scipy.stats import rankdata
        from sklearn.svm import SVR

        y = np.asarray(y, float)
        mu, sd = X.mean(0), X.std(0)
        sd[sd == 0] = 1.0
        Z = (X - mu) / sd
        gamma = 1.0 / (Z.shape[1] * max(float(Z.var()), 1e-12))  # scikit-learn's gamma="scale"
        t = ndtri((rankdata(y) - 0.5) / len(y)) if self.target_transform == "rank" else y
        svr = SVR(C=self.C, epsilon=self.epsilon, gamma=gamma).fit(Z, t)
        self.params = {"mean": mu, "scale": sd, "support": svr.support_vectors_, "dual": svr.dual_coef_.reshape(-1),
                       "intercept": np.asarray(svr.intercept_, float).reshape(1), "gamma": np.array([gamma])}
        if self.target_transform == "rank":  # normal score -> target units
            self.params["quantiles"] = np.quantile(y, np.linspace(0.0, 1.0, 201))
        return self

    def predict_features(self, X: np.ndarray) -> np.ndarray:
        p = self.params
        X = np.asarray(X, float)
        if X.ndim != 2 or X.shape[1] != len(p["mean"]):
            raise ConfigError(f"predictor {self.name} was saved for {len(p['mean'])} features but its feature sets "
                              f"{', '.join(self.sets)} give {X.shape[-1]}; the folder is damaged: {_FIX}")
        Z = (X - p["mean"]) / p["scale"]
        d2 = ((Z[:, None, :] - p["support"][None]) ** 2).sum(-1)
        f = np.exp(-p["gamma"][0] * d2) @ p["dual"] + p["intercept"][0]
        if "quantiles" in p:
            from scipy.special import ndtr

            q = p["quantiles"]
            f = np.interp(ndtr(f), np.linspace(0.0, 1.0, len(q)), q)
        return f

    def predict(self, images, batch_size: int = 64) -> np.ndarray:
        return self.predict_features(self.features(images))

    def __call__(self, image: np.ndarray) -> float:
        return float(self.predict([image])[0])

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        np.savez(p / "model.npz", **self.params)
        (p / "predictor.json").write_text(json.dumps({"arch": self.arch, "sets": list(self.sets), "target": self.target,
                                                      "C": self.C, "epsilon": self.epsilon,
                                                      "target_transform": self.target_transform,
                                                      "input_size": self.input_size}, indent=1))
        return p

    @classmethod
    def load(cls, path: str | Path) -> "FeatureSVRPredictor":
        p = Path(path).expanduser()
        if not (p / "predictor.json").exists() or not (p / "model.npz").exists():
            raise MissingWeightsError(f"no feature predictor at {p} (predictor.json + model.npz)")
        doc = read_json(p / "predictor.json", "predictor config", _FIX)
        m = cls(**_svr_config(doc, p / "predictor.json"))
        m.params = _svr_params(read_npz(p / "model.npz"), p / "model.npz", with_quantiles=m.target_transform == "rank")
        return m


#: the largest predictor weights file read (a feature SVR is a few MiB, CNNIQA about 2 MiB)
MAX_WEIGHTS_BYTES = 512 << 20


def _weights_file(path: Path) -> None:
    """:class:`ConfigError` when the weights file ``path`` is empty or larger than :data:`MAX_WEIGHTS_BYTES`."""
    size = path.stat().st_size
    if size == 0:
        raise ConfigError(f"predictor weights {path} are empty (0 bytes); {_FIX}")
    if size > MAX_WEIGHTS_BYTES:
        raise ConfigError(f"predictor weights {path} are {size >> 20} MiB, over the {MAX_WEIGHTS_BYTES >> 20} MiB a "
                          f"predictor can be; it is not a predictor's file: {_FIX}")


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, never unpickling (``allow_pickle=False``): :class:`ConfigError` in one line
    naming the file when it is empty, too large, truncated, not an npz archive, or holds Python objects."""
    import zipfile
    import zlib

    _weights_file(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic not in (b"PK\x03\x04", b"PK\x05\x06"):  # a zip archive's local header / empty archive's end record
        what = "a single .npy array" if magic == b"\x93NUM" else f"bytes starting {magic!r}"
        raise ConfigError(f"predictor weights {path} are {what}, not an .npz archive saved by embeval; {_FIX}")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except ValueError as exc:
        if "pickle" in str(exc):
            raise ConfigError(f"predictor weights {path} hold pickled Python objects, which embeval never loads "
                              f"(unpickling can run code); {_FIX}") from None
        raise ConfigError(f"predictor weights {path} cannot be read ({exc}); {_FIX}") from None
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, KeyError) as exc:
        why = str(exc) or type(exc).__name__
        raise ConfigError(f"predictor weights {path} are truncated or not an .npz archive ({why}); {_FIX}") from None


def _svr_config(doc: dict, where: Path) -> dict:
    """The :class:`FeatureSVRPredictor` arguments in a ``predictor.json``, checked: :class:`ConfigError` naming the
    field for a missing one or a wrong type."""
    from embeval.iqa.features import FEATURE_SETS

    def need(key, ok, want):
        if key not in doc:
            raise ConfigError(f"predictor config {where} misses field {key!r}; {_FIX}")
        v = doc[key]
        if not ok(v):
            raise ConfigError(f"predictor config {where}: field {key!r} must be {want}, got {json.dumps(v)[:60]}; {_FIX}")
        return v

    def num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) and v > 0

    sets = need("sets", lambda v: isinstance(v, list) and v and all(x in FEATURE_SETS for x in v),
                f"a list of feature sets from {', '.join(FEATURE_SETS)}")
    size = doc.get("input_size")
    if size is not None and not (isinstance(size, list) and len(size) == 2
                                 and all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 8192 for x in size)):
        raise ConfigError(f"predictor config {where}: field 'input_size' must be [height, width] in pixels (1..8192) "
                          f"or null, got {json.dumps(size)[:60]}; {_FIX}")
    return {"sets": sets, "target": need("target", lambda v: isinstance(v, str), "a string"),
            "C": need("C", num, "a positive number"), "epsilon": need("epsilon", num, "a positive number"),
            "name": need("arch", lambda v: isinstance(v, str), "a string"),
            "target_transform": doc.get("target_transform", "none"), "input_size": size}


def _svr_params(arrays: dict[str, np.ndarray], where: Path, with_quantiles: bool) -> dict[str, np.ndarray]:
    """The SVR's arrays checked for presence, shape and finite float values (see :meth:`FeatureSVRPredictor.fit_features`)."""
    shapes = {"mean": "F", "scale": "F", "support": "SF", "dual": "S", "intercept": "1", "gamma": "1"}
    if with_quantiles:
        shapes["quantiles"] = "Q"
    missing = [k for k in shapes if k not in arrays]
    if missing:
        raise ConfigError(f"predictor weights {where} miss array(s) {', '.join(missing)}; {_FIX}")
    dims: dict[str, int] = {"1": 1}
    out = {}
    for k, axes in shapes.items():
        a = arrays[k]
        if a.dtype.kind not in "fiu" or a.ndim != len(axes) or not np.isfinite(a).all():
            raise ConfigError(f"predictor weights {where}: array {k!r} must be {len(axes)}-D finite numbers, got "
                              f"{a.dtype} of shape {a.shape}; {_FIX}")
        for ax, n in zip(axes, a.shape):
            if dims.setdefault(ax, n) != n or n == 0:
                raise ConfigError(f"predictor weights {where}: array {k!r} has shape {a.shape}, which does not fit "
                                  f"the others (features {dims.get('F')}, support vectors {dims.get('S')}); {_FIX}")
        out[k] = a.astype(float, copy=False)
    return out


def load_predictor(path: str | Path):
    """Any saved predictor (CNNIQA :class:`NRPredictor` or :class:`FeatureSVRPredictor`)."""
    p = Path(path).expanduser()
    if not (p / "predictor.json").exists():
        raise MissingWeightsError(f"no quality predictor at {p} (predictor.json missing); train one with "
                                  "`embeval iqa bench --db DB --save-predictor DIR`")
    arch = read_json(p / "predictor.json", "predictor config", _FIX).get("arch", "cnniqa")
    return NRPredictor.load(p) if arch == "cnniqa" else FeatureSVRPredictor.load(p)
