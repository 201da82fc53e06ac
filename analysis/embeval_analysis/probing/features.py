"""Hidden states of a torch policy on Act2Answer items (the probing inputs).

For every item and layout the cell is reset to the item's scene and the policy sees the first
observation with the item's instruction; the hidden state of each selected layer (pooled to one
vector) is one probe sample, labelled with the correct side in that layout (0 = left, 1 = right).
Samples carry their item id as group, so cross-validation keeps an item's two layouts together.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from embeval.errors import ConfigError

#: Default layers: the fusion backbone and the action expert of the tiny VLA (regex on module names).
DEFAULT_LAYERS = r"(backbone|action_expert)\.\d+"


@dataclass
class Features:
    """``layers[name]``: (N, D) float32; ``labels``: (N,) int (0 left, 1 right); ``groups``: (N,) item ids."""

    layers: dict[str, np.ndarray]
    labels: np.ndarray
    groups: np.ndarray
    categories: np.ndarray
    subject: str = ""

    def __len__(self) -> int:
        return len(self.labels)


def collect_features(policy, items: Iterable, spec=None, layers: Sequence[str] | str | None = DEFAULT_LAYERS,
                     layouts: tuple[str, ...] = ("original", "swapped"), seed: int = 0, env=None,
                     obs_size: tuple[int, int] = (128, 96)) -> Features:
    """Run every item x layout to its first observation and capture ``policy.hidden_states``.

    ``policy`` must offer ``hidden_states(observation, layers=...)`` (see
    :class:`embeval.subjects.hidden.HiddenStateMixin`), e.g. the tiny VLA or a LeRobot adapter.
    """
    from embeval.act2answer.episode import sim_config
    from embeval.act2answer.scene import EpisodeSpec, build_scene
    from embeval.provenance import derive_seed
    from embeval.sim import SimEnv

    if not hasattr(policy, "hidden_states"):
        raise ConfigError(f"subject {getattr(policy, 'id', policy)!r} exposes no hidden_states(); probing needs a torch "
                          "subject with hidden-state capture (embedded tiny VLA, LeRobot, transformers adapters)")
    spec = spec or EpisodeSpec()
    own = env is None
    env = env or SimEnv(sim_config(*obs_size))
    feats: dict[str, list[np.ndarray]] = {}
    labels, groups, cats = [], [], []
    try:
        for item in items:
            for layout in layouts:
                scene, task = build_scene(item, layout, spec)
                obs = env.reset(derive_seed(seed, item.id, layout), task, scene)
                policy.reset(task.instruction)
                hs = policy.hidden_states(obs, layers=layers)
                for k, v in hs.items():
                    feats.setdefault(k, []).append(np.asarray(v, dtype=np.float32).reshape(-1))
                labels.append(0 if item.correct_side_in(layout) == "left" else 1)
                groups.append(item.id)
                cats.append(item.category)
    finally:
        if own:
            env.close()
    if not labels:
        raise ConfigError("no items to probe")
    return Features({k: np.stack(v) for k, v in feats.items()}, np.array(labels), np.array(groups), np.array(cats),
                    str(getattr(policy, "id", "")))
