"""The ``libero`` image source of an Embodied-IQA database: LIBERO's agent-view renders at its own initial states.

``embeval iqa build --source libero --path libero_spatial`` (every task of the suite) or ``--path
libero_spatial:0,libero_goal:3`` (a task list). Reference ``i`` is task ``tasks[i % len(tasks)]`` at LIBERO initial
state ``seed + i // len(tasks)`` (after LIBERO's settle steps, :data:`embeval.sim.libero.SETTLE_STEPS`), rendered in
the policy orientation (:mod:`embeval.sim.libero`); the task's language instruction is the first of its 5 tasks.
State: the end-effector pose (LIBERO's world frame = its robot's base axes; xyz m + quaternion xyzw) and the gripper
opening. ``sim`` records backend, task, initial state, camera and the LIBERO options, so the build's Execution runs
the task closed loop on LIBERO from that same state (:func:`embeval_analysis.iqa.database.execution_scores`).
"""
from __future__ import annotations

from typing import Any

from embeval.errors import ConfigError
from embeval.scoring.decision import DEFAULT_TASKS

#: LIBERO camera -> the reference's view
VIEWS = {"agentview": "third_person", "wrist": "first_person"}


def parse_tasks(path: str | list[str]) -> list[str]:
    """``"libero_spatial"`` (a whole suite, kept bare: its task count is LIBERO's) or ``"SUITE:ID,SUITE:ID"`` (or a
    list of them) -> the entries, each checked; a :class:`ConfigError` naming ``--path`` otherwise."""
    from embeval.sim.libero import parse_task

    items = [p.strip() for p in (path.split(",") if isinstance(path, str) else list(path))]
    if not items or not all(isinstance(p, str) and p for p in items):
        raise ConfigError(f"libero source --path: a suite (libero_spatial) or tasks SUITE:TASK_ID separated by commas "
                          f"(libero_spatial:0,libero_goal:3), got {path!r}")
    for p in items:
        if ":" in p:
            parse_task(p)
        elif not p.replace("_", "").isalnum():
            raise ConfigError(f"libero source --path: {p!r} is neither a suite name (libero_spatial) nor SUITE:TASK_ID")
    return items


def libero_source(path: str | list[str], n: int | None = None, seed: int = 0, size: tuple[int, int] = (128, 128),
                  camera: str = "agentview", render_mode: str = "default", hard_reset: bool = True,
                  **_) -> list:
    """``n`` (default: one per task) references of the LIBERO tasks ``path`` (see module docstring); ``size`` = (W, H)
    pixels rendered by LIBERO itself; ``render_mode`` / ``hard_reset`` as ``sim.options`` of the LIBERO backend
    (recorded in each reference's ``sim`` so Execution runs the same way)."""
    from embeval.sim.libero import CAMERAS, SETTLE_STEPS
    from embeval.sim.libero.episodes import LiberoTask
    from embeval_analysis.iqa.reference import IQAReference, _tasks5

    if camera not in CAMERAS:
        raise ConfigError(f"libero source camera: choose from {', '.join(CAMERAS)}, got {camera!r}")
    w, h = (int(v) for v in size)
    envs: dict[str, LiberoTask] = {}

    def env(task: str) -> LiberoTask:
        if task not in envs:
            envs[task] = LiberoTask(task, w, h, cameras=(camera,), max_steps=0, render_mode=render_mode,
                                    hard_reset=hard_reset)
        return envs[task]

    try:
        tasks: list[str] = []
        for p in parse_tasks(path):  # a bare suite: its task count from its first task's worker
            tasks += [p] if ":" in p else [f"{p}:{k}" for k in range(env(f"{p}:0").info["n_tasks"])]
        count = len(tasks) if n is None else int(n)
        out: list[IQAReference] = []
        for i in range(count):
            task = tasks[i % len(tasks)]
            e, init = env(task), int(seed) + i // len(tasks)
            obs = e.reset(init, SETTLE_STEPS)
            extra = [t for t in DEFAULT_TASKS if t != obs.instruction]
            suite, tid = task.split(":")
            out.append(IQAReference(
                f"libero_{suite}_{tid}_s{init:04d}", obs.images[camera].copy(), _tasks5([obs.instruction] + extra, task),
                f"libero_{suite}_{tid}_s{init}", VIEWS[camera], "simulated",
                {"tcp_pose": obs.state["tcp_pose"].tolist(), "gripper": obs.state["gripper"].tolist()},
                sim={"backend": "libero", "env": task, "seed": init, "camera": camera,
                     "options": {"render_mode": render_mode, "hard_reset": bool(hard_reset)}}))
        return out
    finally:
        for e in envs.values():
            e.close()


def episode_spec(ref: dict[str, Any], cameras: list[str], max_steps: int | None, render: bool = True) -> dict[str, Any]:
    """The ``sim:`` mapping that replays database reference ``ref`` (its ``sim`` record, any episode backend): its
    size, step limit and options, every name in ``cameras`` showing the reference's camera."""
    sim = ref["sim"]
    cam = sim.get("camera")
    spec = {"backend": sim["backend"], "env": sim["env"], "render": render, "max_steps": max_steps,
            "options": dict(sim.get("options") or {})}
    if render:
        spec.update(width=int(ref["width"]), height=int(ref["height"]),
                    aliases={c: cam for c in cameras if cam and c != cam})
    return spec
