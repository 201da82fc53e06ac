"""Act2Answer episodes on N environments at once (``embeval act2answer run --num-envs N``).

:func:`run_items_vector` is :func:`~embeval.act2answer.episode.run_items` with ``num_envs`` environments in
worker processes and ONE batched policy call per step (:mod:`embeval.sim.vector`: continuous batching, an
environment takes the next item x layout as soon as its episode ends). Every worker runs the backend's own
``run_episode`` with the same seeds (``derive_seed(seed, item id, layout)``), so the records come out as the
sequential run's, in the same order. ``exact=True`` asks the policy one episode at a time
(:class:`~embeval.subjects.protocols.LoopSlots`: batch-1 copies, bit-for-bit the sequential actions) instead of its
own batched forward, whose float rounding depends on the batch size (the tiny VLAs: ~1e-8 per action component).
The backend's privileged expert (``--policy expert``) runs in the workers, next to the simulator it reads.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from embeval.act2answer.episode import (
    BACKENDS,
    Backend,
    BackendExpert,
    Act2AnswerRecord,
    check_cameras,
    get_backend,
    item_error,
    obs_cameras_for,
    obs_size_for,
    render_only,
)
from embeval.act2answer.items import BinaryItem
from embeval.act2answer.scene import EpisodeSpec
from embeval.errors import EmbevalError, InvalidInputError, MissingFileError
from embeval.sim.vector import VectorProfile, check_num_envs, run_vectorised


def _picklable_backend(be: Backend) -> str | Backend:
    """The backend as its registered name when it is the registry's entry (workers look it up), else itself."""
    try:
        if be.name in BACKENDS.names() and BACKENDS.get(be.name) is be:
            return be.name
    except (EmbevalError, ImportError):  # a name the registry cannot load: pass the object itself
        return be
    return be


@dataclass(frozen=True)
class Act2AnswerTask:
    """What an environment worker needs to run Act2Answer episodes (pickled to it): the backend (a registered
    name or a picklable :class:`Backend`), the episode spec, the observation size (width, height), the cameras to
    render (None: all), camera aliases, whether records keep the actions, ``expert``: run the backend's
    privileged expert in the worker (bound to its environment) instead of the calling process's policy, and
    ``videos``: (policy, folder, policy id) of episode videos the workers write (None: none); units are
    ``(item, layout, seed, index)``, the index in run order deciding ``--record-video N``."""

    backend: str | Backend
    spec: EpisodeSpec
    obs_size: tuple[int, int]
    cameras: tuple[str, ...] | None = None
    aliases: dict[str, str] = field(default_factory=dict)
    keep_actions: bool = True
    expert: bool = False
    videos: tuple[Any, str, str] | None = None

    def _be(self) -> Backend:
        return get_backend(self.backend)

    def make_env(self):
        be = self._be()
        size = tuple(self.obs_size)
        env = be.make_env(size, aliases=dict(self.aliases)) if self.aliases else be.make_env(size)
        render_only(env, self.cameras)
        return env

    def local_policy(self, env):
        if not self.expert:
            return None
        pol = BackendExpert(self.spec)
        pol.bind(env, self._be())
        return pol

    def run(self, env, policy, unit) -> Act2AnswerRecord:
        from embeval.recording.video import EpisodeRecorder, maybe_episode

        item, layout, seed, index = unit
        videos = EpisodeRecorder(self.videos[0], self.videos[1]) if self.videos else None
        with maybe_episode(videos, f"{self.videos[2] if self.videos else ''}_{item.id}_{layout}", index) as video:
            try:
                res = self._be().run_episode(env, policy, item, layout, self.spec, seed, self.keep_actions)
            except (InvalidInputError, MissingFileError) as exc:  # name the item, as run_items does
                raise item_error(exc, item, layout) from None
            if video is not None:
                video.finish(res.success == 1.0, f"zone {res.zone} ({res.end_reason})")
        return res

    def close(self, env) -> None:
        self._be().close(env)

    def describe(self, unit) -> str:
        item, layout = unit[:2]
        return f"item {item.id!r} ({layout})"


def convert_textures_first(items: Iterable[BinaryItem]) -> int:
    """Write the simulator-loadable copies of the items' card images that are not 8-bit RGB PNGs
    (:func:`embeval.sim.textures.loadable`) in this process, before any worker starts: two workers loading one
    card at once (an item's two layouts) would otherwise both write its copy and one could read it half-written.
    Reads 26 header bytes of a PNG to skip it; a missing or unreadable image is left for its episode to report,
    in order. Returns how many were converted."""
    from embeval.sim.textures import loadable

    done, n = set(), 0
    for item in items:
        for path in (item.left_image, item.right_image, item.context_image):
            if not path or path in done:
                continue
            done.add(path)
            try:
                with open(path, "rb") as f:
                    head = f.read(26)
                if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) == 26 and head[24] == 8 and head[25] == 2:
                    continue  # used as is
                loadable(path, f"item {item.id!r}: card image")
                n += 1
            except (OSError, EmbevalError):
                continue
    return n


def run_items_vector(policy, items: Iterable[BinaryItem], spec: EpisodeSpec | None = None, seed: int = 0,
                     layouts: tuple[str, ...] = ("original", "swapped"), keep_actions: bool = True,
                     obs_size: tuple[int, int] | None = None, backend: str | Backend = "pybullet",
                     aliases: dict[str, str] | None = None, num_envs: int = 8, exact: bool = False,
                     workers: int | None = None, start_method: str = "spawn", groups: int = 1,
                     profile: VectorProfile | None = None, videos=None) -> Iterator[Act2AnswerRecord]:
    """:func:`~embeval.act2answer.episode.run_items` on ``num_envs`` environments (1..64) in ``workers`` processes
    (default ``min(num_envs, CPU count)``), the policy asked once per step for all of them; same records, same order.

    ``exact``: ask the policy through :class:`~embeval.subjects.protocols.LoopSlots` (one batch-1 copy per
    environment, bit-for-bit the sequential actions) rather than its own batched forward. ``groups``: 2 alternates two
    halves of the environments (:func:`~embeval.sim.vector.run_vectorised`). ``profile``: a
    :class:`~embeval.sim.vector.VectorProfile` to fill in (simulation, rendering, model, transport seconds).
    ``videos``: an :class:`~embeval.recording.video.EpisodeRecorder` whose policy and folder the workers use (they
    write the same files as :func:`~embeval.act2answer.episode.run_items`; ``videos.written`` stays empty here)."""
    from embeval.provenance import derive_seed
    from embeval.subjects.protocols import LoopSlots, batched

    num_envs = check_num_envs(num_envs)
    be = get_backend(backend)
    check_cameras(policy, be, aliases)
    spec = spec or EpisodeSpec()
    expert = isinstance(policy, BackendExpert)
    task = Act2AnswerTask(_picklable_backend(be), spec, tuple(obs_size or obs_size_for(policy)), obs_cameras_for(policy),
                          dict(aliases or {}), keep_actions, expert,
                          (videos.policy, str(videos.out_dir), str(getattr(policy, "id", "policy"))) if videos else None)
    items = list(items)
    units = [(item, layout, derive_seed(seed, item.id, layout)) for item in items for layout in layouts]
    base = videos.count if videos else 0  # episode indices continue the recorder's count (--record-video N)
    units = [(*u, base + i) for i, u in enumerate(units)]
    if videos:
        videos.count += len(units)
    convert_textures_first(items)
    if expert:
        slots = None
    else:
        slots = LoopSlots(policy) if exact else batched(policy)
    for _, rec in run_vectorised(slots, units, task, num_envs, workers=workers, start_method=start_method,
                                 profile=profile, groups=groups):
        yield rec


def records_equal(a: Iterable[Act2AnswerRecord | dict[str, Any]], b: Iterable[Act2AnswerRecord | dict[str, Any]]) -> bool:
    """Whether two runs' records are identical, field by field and in order."""
    da = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in a]
    db = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in b]
    return da == db
