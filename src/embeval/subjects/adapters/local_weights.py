"""Checks for model weights on local disk (nothing can be downloaded here)."""
from __future__ import annotations

from pathlib import Path

from embeval.errors import MissingWeightsError

HF_WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.pt", "*.pth")


def require_hf_dir(path: str | Path | None, what: str = "model") -> Path:
    """The Hugging Face model folder ``path`` (config.json + weights), or :class:`MissingWeightsError`."""
    if not path:
        raise MissingWeightsError(f"field 'path' is required: the local folder of the {what} (config.json + *.safetensors); "
                                  "download it on a connected machine (huggingface-cli download ORG/NAME --local-dir DIR) and copy it here")
    p = Path(path).expanduser()
    if not p.is_dir():
        raise MissingWeightsError(f"{what} folder {p} does not exist; copy the downloaded model folder there "
                                  "(huggingface-cli download ORG/NAME --local-dir DIR on a connected machine)")
    if not (p / "config.json").is_file():
        raise MissingWeightsError(f"{p} has no config.json; point 'path' at the folder that holds config.json and the weights")
    if not any(any(p.glob(pat)) for pat in HF_WEIGHT_PATTERNS):
        raise MissingWeightsError(f"{p} has config.json but no weights (*.safetensors / *.bin); the download is incomplete: "
                                  "copy the weight files too")
    return p


def torch_dtype(name: str):
    import torch

    try:
        return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "auto": "auto"}[name]
    except KeyError:
        from embeval.errors import ConfigError

        raise ConfigError(f"field 'params.dtype': {name!r} is not float32, float16, bfloat16 or auto") from None
