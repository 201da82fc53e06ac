"""A trained no-reference (NR) quality predictor: pyiqa's CNNIQA architecture (Kang et al. 2014, RGB
variant) trained from scratch to predict an Embodied-IQA score (e.g. the Decision score, 0..5 summed
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

from embeval.errors import MissingWeightsError
from embeval.subjects.protocols import check_image


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
    import cv2
    import torch

    h, w = int(input_size[0]), int(input_size[1])
    out = []
    for i, im in enumerate(images):
        im = check_image(im, f"images[{i}]")
        if im.shape[:2] != (h, w):
            im = cv2.resize(im, (w, h), interpolation=cv2.INTER_AREA if im.shape[0] > h else cv2.INTER_LINEAR)
        out.append(im)
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).float().div_(255.0)


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
        cfg = PredictorConfig(**json.loads((p / "predictor.json").read_text()))
        net = build_net(cfg)
        net.load_state_dict(load_file(str(p / "model.safetensors")))
        return cls(net, cfg)
