"""Units of work, their keys, results, and deterministic sharding over group keys."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

from embeval.provenance import derive_seed

#: The columns that identify a unit within a run (with the run id in the store).
KEY_FIELDS = ("subject", "item", "distortion", "level", "seed")

UnitKey = tuple  # (subject, item, distortion, level, seed)


@dataclass(frozen=True)
class Unit:
    """One unit of work: a subject on an item under a distortion at a level with a seed.

    ``group`` is the sharding key: units with the same group always land in the same shard
    (e.g. a reference image and all its distorted copies; the two halves of a swap pair).
    """

    subject: str
    item: str
    distortion: str = "none"
    level: int = 0
    seed: int = 0
    group: str = ""

    @property
    def key(self) -> UnitKey:
        return (self.subject, self.item, self.distortion, int(self.level), int(self.seed))

    def unit_seed(self, evaluator: str) -> int:
        """The per-unit seed: derived from the key (never from execution order or worker)."""
        return derive_seed(evaluator, *self.key)

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "item": self.item, "distortion": self.distortion,
                "level": int(self.level), "seed": int(self.seed), "group": self.group}


@dataclass
class UnitResult:
    """What running one unit produced. ``outputs`` is JSON-serialisable (the raw outputs)."""

    status: str  # "done" | "failed"
    outputs: dict[str, Any] | None = None
    error: str | None = None
    started: float = 0.0  # unix time, seconds
    finished: float = 0.0
    worker: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return max(0.0, self.finished - self.started)

    @property
    def ok(self) -> bool:
        return self.status == "done"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "outputs": self.outputs, "error": self.error,
                "started": self.started, "finished": self.finished, "worker": self.worker}


def outputs_json(outputs: Any) -> str:
    """Canonical JSON of a unit's outputs (sorted keys); numpy scalars/arrays become lists."""

    def default(o: Any):
        if hasattr(o, "tolist"):
            return o.tolist()
        if hasattr(o, "item"):
            return o.item()
        raise TypeError(f"unit outputs must be JSON-serialisable; got {type(o).__name__}")

    return json.dumps(outputs, sort_keys=True, default=default, allow_nan=True)


def _group_rank_key(group: str) -> tuple[str, str]:
    return (hashlib.sha256(group.encode()).hexdigest(), group)


def assign_shards(groups: Iterable[str], num_shards: int) -> dict[str, int]:
    """Group key -> shard index, deterministic and balanced.

    Groups are ordered by the sha256 of their key (ties broken by the key) and dealt round-robin,
    so every machine that plans the same spec computes the same assignment, shard sizes differ by
    at most one group, and no group is ever split.
    """
    if num_shards < 1:
        raise ValueError("num_shards must be >= 1")
    ordered = sorted(set(groups), key=_group_rank_key)
    return {g: i % num_shards for i, g in enumerate(ordered)}


def select_shard(units: Sequence[Unit], shard_index: int, num_shards: int) -> list[Unit]:
    """The units of shard ``shard_index`` of ``num_shards`` (order kept)."""
    from embeval.errors import ConfigError

    if num_shards < 1:
        raise ConfigError(f"--num-shards must be >= 1, got {num_shards}")
    if not 0 <= shard_index < num_shards:
        raise ConfigError(f"--shard-index must lie in 0..{num_shards - 1} for --num-shards {num_shards}, got {shard_index}")
    if num_shards == 1:
        return list(units)
    shard_of = assign_shards((u.group for u in units), num_shards)
    return [u for u in units if shard_of[u.group] == shard_index]


def batches(units: Sequence[Unit], size: int) -> list[list[Unit]]:
    """Consecutive batches of at most ``size`` units of the same subject (order kept)."""
    out: list[list[Unit]] = []
    for u in units:
        if out and len(out[-1]) < size and out[-1][0].subject == u.subject:
            out[-1].append(u)
        else:
            out.append([u])
    return out


def one_reference_unit(units: Iterable[Unit]) -> list[Unit]:
    """The units with every undistorted (``distortion == "none"``) unit at level 0, duplicates dropped in order:
    a reference does not depend on the level, so it is computed once per item, subject and seed."""
    seen, out = set(), []
    for unit in units:
        if unit.distortion == "none":
            unit = replace(unit, level=0)
        if unit.key not in seen:
            seen.add(unit.key)
            out.append(unit)
    return out
