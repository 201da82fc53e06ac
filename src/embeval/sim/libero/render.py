"""``embeval sim render --backend libero``: one camera image of a LIBERO task at an initial state."""
from __future__ import annotations

from embeval.errors import ConfigError
from embeval.sim.libero import CAMERAS, SETTLE_STEPS


def render_cli(args, perturb=None) -> int:
    """Write ``args.out``: camera ``args.camera`` (default agentview) of ``args.task`` (SUITE:TASK_ID, default
    libero_spatial:0) at initial state ``args.seed`` after LIBERO's settle steps, in the policy orientation, under
    ``perturb`` (scene perturbations drawn from ``args.seed``) when given."""
    from embeval.image_io import save_image
    from embeval.sim.libero.episodes import LiberoTask

    if args.scene:
        raise ConfigError("--scene is a UR5 cell scene; LIBERO scenes come from --task SUITE:TASK_ID and --seed")
    task, cam = args.task or "libero_spatial:0", args.camera or "agentview"
    if cam not in CAMERAS:
        raise ConfigError(f"--camera: LIBERO has cameras {', '.join(CAMERAS)}, got {cam!r}")
    env = LiberoTask(task, args.width, args.height, cameras=(cam,), max_steps=0, perturb=perturb)
    try:
        img = env.reset(args.seed, SETTLE_STEPS).images[cam]
        instruction = env.instruction
    finally:
        env.close()
    save_image(args.out, img, "--out")
    print(f"wrote {args.out} ({img.shape[1]}x{img.shape[0]}, LIBERO {task} initial state {args.seed}, camera {cam}, "
          f"policy orientation): {instruction!r}")
    return 0
