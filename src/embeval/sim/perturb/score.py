"""Closed-loop sensitivity runs: each seed once unperturbed (the reference) and once under every scene
perturbation and image distortion, scored as ``sim episodes --distortion`` scores a distortion.

Decision (0..1, first action vs the reference's first action, per-pair normalisation) and Execution (0..100, final
TCP vs the reference's) of :func:`embeval.sim.backends.score_runs`. With ``keep_frames`` each row also carries the
first frame of one camera, reference and perturbed (uint8 HxWx3), for image-quality metrics: for a scene axis the
reference is the unperturbed render of the same seed (pixel-aligned only where the camera did not move), for a
distortion the clean frame it distorted.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from embeval.errors import ConfigError
from embeval.sim.perturb.compose import Perturbations

#: row ``kind``: a scene-level axis, or one of the 30 image distortions
SCENE, IMAGE = "scene", "distortion"


def score_grid(env, policy, seeds: Iterable[int], perturbations: Sequence[Perturbations] = (),
               distortions: Sequence[tuple[str, int]] = (), keep_frames: bool = False, camera: str | None = None,
               progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """One row per (seed, single-axis perturbation or (distortion, level)): ``kind``, ``axis`` (axis or distortion
    name), ``level``, ``seed``, ``decision``, ``execution``, ``reference_success``, ``success``, ``perturbation``
    (what the axis drew; {} for a distortion) and with ``keep_frames`` ``reference_frame``/``frame`` of ``camera``
    (default the env's first camera). ``env``: a pybullet :class:`~embeval.sim.backends.EpisodeEnv`."""
    from embeval.sim.backends import run_episode, score_episode, score_runs

    for p in perturbations:
        if len(p) != 1:
            raise ConfigError(f"score_grid scores one axis at a time, got {len(p)} in {p}")
    cams = tuple(getattr(env, "cameras", ()) or ())
    if keep_frames:
        camera = camera or (cams[0] if cams else None)
        if camera not in cams:
            raise ConfigError(f"camera {camera!r} is not rendered by this env (cameras: {', '.join(cams) or 'none'})")
    rows: list[dict[str, Any]] = []

    def frames(ref, dis) -> dict[str, Any]:
        if not keep_frames:
            return {}
        return {"reference_frame": ref.first_observation.images[camera], "frame": dis.first_observation.images[camera]}

    for s in seeds:
        env.env.perturb = None
        ref = run_episode(env, policy, s)
        for pert in perturbations:
            env.env.perturb = pert
            dis = run_episode(env, policy, s)
            sc = score_runs(ref, dis)
            rows.append({"kind": SCENE, "axis": pert[0].axis, "level": pert[0].level, "seed": s,
                         "decision": sc.decision, "execution": sc.execution.score,
                         "reference_success": bool(ref.outcome.success), "success": bool(dis.outcome.success),
                         "perturbation": dict(env.env.perturbation), **frames(ref, dis)})
            if progress:
                progress(f"seed {s} {pert[0].axis}:{pert[0].level}")
        env.env.perturb = None
        for name, level in distortions:
            sc, _, dis = score_episode(env, policy, s, (name, level, s), reference=ref)
            rows.append({"kind": IMAGE, "axis": name, "level": level, "seed": s, "decision": sc.decision,
                         "execution": sc.execution.score, "reference_success": bool(ref.outcome.success),
                         "success": bool(dis.outcome.success), "perturbation": {}, **frames(ref, dis)})
            if progress:
                progress(f"seed {s} {name}:{level}")
    return rows
