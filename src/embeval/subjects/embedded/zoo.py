"""The shipped embedded models (``src/embeval/data/models/<name>/``) and how to load them.

Names: ``tiny-vla`` (the reference policy) and the population ``tiny-vla-*``/``tiny-vlm-*``
listed in ``src/embeval/data/models/population.json`` (written by ``embeval train population``).
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path

from embeval.env import PACKAGE_DIR
from embeval.errors import MissingWeightsError
from embeval.subjects.embedded.checkpoint import checkpoint_family

MODELS_DIR = PACKAGE_DIR / "data" / "models"
POPULATION_FILE = MODELS_DIR / "population.json"


def shipped_models(kind: str | None = None) -> list[str]:
    """Names of the shipped checkpoints (``kind``: "vla", "vlm" or None for all), sorted."""
    out = []
    if MODELS_DIR.is_dir():
        for d in sorted(MODELS_DIR.iterdir()):
            cfg = d / "config.json"
            if cfg.exists() and (kind is None or json.loads(cfg.read_text()).get("kind") == kind):
                out.append(d.name)
    return out


def resolve_model(name_or_path: str | Path, kind: str) -> Path:
    """A checkpoint folder from a shipped name (``"tiny-vla"``) or a path."""
    p = Path(str(name_or_path)).expanduser()
    if (p / "config.json").exists():
        return p
    q = MODELS_DIR / str(name_or_path)
    if (q / "config.json").exists():
        return q
    shipped = shipped_models(kind)
    group = str(name_or_path).split("/")[0] if "/" in str(name_or_path) else ""
    if group and (MODELS_DIR / group).is_dir() and not (MODELS_DIR / group / "config.json").exists():
        shipped = _group_members(group, kind) or shipped  # "a2eval/a2eval-nope": suggest the a2eval/* members
    close = difflib.get_close_matches(str(name_or_path), shipped, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    extra = " (or tiny-vla-untrained for random weights, a floor)" if kind == "vla" else ""
    raise MissingWeightsError(
        f"no embedded {kind} named or at {str(name_or_path)!r}; {hint}shipped: {', '.join(shipped) or '(none)'}{extra}; "
        f"give a shipped name, a checkpoint folder (config.json + model.safetensors) or train one with "
        f"`embeval train {kind} --out DIR`"
    )


def _group_members(group: str, kind: str) -> list[str]:
    """``group/<name>`` of the shipped checkpoints in the sub-folder ``group`` of kind ``kind`` (e.g. ``a2eval/*``)."""
    out = []
    base = MODELS_DIR / group
    if base.resolve().parent != MODELS_DIR.resolve():  # "../x": not a shipped group
        return out
    for d in sorted(base.iterdir()):
        cfg = d / "config.json"
        if cfg.is_file():
            try:
                ok = json.loads(cfg.read_text()).get("kind") == kind
            except (OSError, ValueError, AttributeError):
                ok = False
            if ok:
                out.append(f"{group}/{d.name}")
    return out


def known_names(kind: str) -> list[str]:
    """Every name of ``kind`` this checkout knows, shipped or not: the reference model and the population list."""
    extra = a2a_names() if kind == "vlm" else []
    return sorted({f"tiny-{kind}", *population_names(kind), *extra, *shipped_models(kind)})


def load_vla(name_or_path: str | Path = "tiny-vla", **kw):
    """Load a tiny VLA (:class:`~embeval.subjects.embedded.policy.TinyVLAPolicy`) or a VLA built on the
    two-card VLM (:class:`~embeval.subjects.embedded.choice_vla.ChoiceVLAPolicy`), by its checkpoint's family."""
    from embeval.subjects.embedded.choice_vla import FAMILY, ChoiceVLAPolicy
    from embeval.subjects.embedded.policy import TinyVLAPolicy

    path = resolve_model(name_or_path, "vla")
    family = checkpoint_family(path, "vla")
    return (ChoiceVLAPolicy if family == FAMILY else TinyVLAPolicy).load(path, **kw)


def _vlm_families() -> dict:
    """Checkpoint ``family`` (config.json; absent = "slots") -> loader class."""
    from embeval.subjects.embedded import scene_qa
    from embeval.subjects.embedded.choice import FAMILY, TinyChoiceVLM
    from embeval.subjects.embedded.vlm import TinyVLM

    return {"slots": TinyVLM, FAMILY: TinyChoiceVLM, scene_qa.FAMILY: scene_qa.TinySceneQA}


def load_vlm(name_or_path: str | Path = "tiny-vlm", **kw):
    """Load a tiny VLM: the slot decoder (:class:`~embeval.subjects.embedded.vlm.TinyVLM`) or the
    two-card chooser (:class:`~embeval.subjects.embedded.choice.TinyChoiceVLM`), by its checkpoint's family."""
    from embeval.errors import ConfigError
    from embeval.subjects.embedded.choice_vla import FAMILY as CHOICE_VLA

    if str(name_or_path) in known_names("vla") and str(name_or_path) not in known_names("vlm"):
        raise ConfigError(f"{name_or_path!r} is a policy (VLA), not a VLM; give it to --policy, or a VLM here: "
                          f"{', '.join(known_names('vlm'))}")
    path = resolve_model(name_or_path, "vlm")
    family = checkpoint_family(path, "vlm", "slots")
    families = _vlm_families()
    if family == CHOICE_VLA:
        raise ConfigError(f"{name_or_path!s} is a policy (a {family} VLA checkpoint), not a VLM; give it to --policy, "
                          f"or a VLM here: {', '.join(known_names('vlm'))}")
    if family not in families:
        raise MissingWeightsError(f"{path}: unknown VLM family {family!r}; this code loads {', '.join(families)}")
    return families[family].load(path, **kw)


def population_names(kind: str) -> list[str]:
    """Member names of the shipped population of ``kind`` ("vla" or "vlm")."""
    if POPULATION_FILE.exists():
        return list(json.loads(POPULATION_FILE.read_text()).get(kind, []))
    return shipped_models(kind)


def a2a_names(group: str = "vlm_a2a") -> list[str]:
    """Shipped VLMs that answer Act2Answer's binary questions from both cards (population.json ``"vlm_a2a"``),
    or with ``group="vla_a2a"`` the VLAs built on one of them."""
    if POPULATION_FILE.exists():
        return list(json.loads(POPULATION_FILE.read_text()).get(group, []))
    return []


def load_population(kind: str) -> list:
    """All shipped members of ``kind`` as subjects (policies for "vla", VLMs for "vlm")."""
    names = population_names(kind)
    if not names:
        raise MissingWeightsError(f"no shipped {kind} population under {MODELS_DIR}; run `embeval train population`")
    loader = load_vla if kind == "vla" else load_vlm
    return [loader(n) for n in names]


def subject_specs(kind: str) -> list[dict]:
    """Subject specs (for :func:`embeval.subjects.load_subject`) of the shipped population."""
    proto = "policy" if kind == "vla" else "vlm"
    return [{"id": n, "kind": proto, "adapter": "embedded", "path": n} for n in population_names(kind)]
