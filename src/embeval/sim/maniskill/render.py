"""``embeval sim render`` on ManiSkill3: one camera image of a seeded task (SimplerEnv's Bridge scenes included)."""
from __future__ import annotations

from embeval.errors import ConfigError


def render_cli(args, perturb=None) -> int:
    """Write ``args.out``: camera ``args.camera`` (default the task's first) of ``args.task`` (default
    PickCube-v1) at seed ``args.seed``, under ``perturb`` when given."""
    from embeval.image_io import save_image
    from embeval.sim.maniskill import bridge
    from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv
    from embeval.sim.maniskill.runtime import check_seed

    if args.scene:
        raise ConfigError("--scene is a UR5 cell scene; ManiSkill scenes come from --task and --seed")
    check_seed(args.seed, what="--seed")  # ManiSkill's 32-bit range, before the env is built

    task = args.task or "PickCube-v1"
    if bridge.is_bridge_env(task):  # SimplerEnv's Bridge scenes: the WidowX, its calibrated 640x480 camera
        env = bridge.BridgeEnv(bridge.BridgeConfig(task, obs_size=(args.width, args.height)))
        cameras = [bridge.CAMERA]
    else:
        env = ManiSkillEnv(ManiSkillConfig(task, width=args.width, height=args.height), perturb=perturb)
        cameras = list(env.cameras)
    with env:
        obs = env.reset(seed=args.seed)
        cam = args.camera or cameras[0]
        if cam not in obs.images:
            raise ConfigError(f"{task} has no camera {cam!r}; it has {', '.join(cameras)}")
        img = obs.images[cam]
    save_image(args.out, img, "--out")
    print(f"wrote {args.out} ({img.shape[1]}x{img.shape[0]}, ManiSkill {task} seed {args.seed}, camera {cam})")
    return 0
