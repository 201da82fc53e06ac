"""``embeval sim render`` on the pybullet cell: one still of a seeded task scene (or a scene YAML)."""
from __future__ import annotations


def load_perturbed(cell, scene, args, perturb) -> None:
    """Load ``scene`` into ``cell``, under ``perturb`` when given (the task of ``--task``/``--seed``, or none for
    ``--scene``), seeded from ``--seed``."""
    if not perturb:
        cell.load(scene)
        return
    from embeval.sim.perturb import load
    from embeval.sim.tasks import make_task, resolve_verb

    task = None if getattr(args, "scene", None) else make_task(resolve_verb(args.task), args.seed)[1]
    load(cell, scene, task, args.seed, perturb)


def load_scene(args):
    """The scene of ``--scene`` (a YAML) or of ``--task``/``--seed``."""
    from embeval.sim.scene import SceneSpec
    from embeval.sim.tasks import make_task, resolve_verb

    if getattr(args, "scene", None):
        return SceneSpec.from_yaml(args.scene)
    return make_task(resolve_verb(args.task), args.seed)[0]


def render_cli(args, perturb=None) -> int:
    """Write ``args.out``: camera ``args.camera`` (default third_person) of the scene, ``args.width`` x
    ``args.height`` pixels."""
    from embeval.image_io import save_image
    from embeval.sim.workcell import Workcell

    args.task = args.task or "Pick"
    args.camera = args.camera or "third_person"
    scene = load_scene(args)
    with Workcell() as cell:
        load_perturbed(cell, scene, args, perturb)
        img = cell.render(args.camera, args.width, args.height)
    save_image(args.out, img, "--out")
    print(f"wrote {args.out} ({img.shape[1]}x{img.shape[0]}, scene {scene.name}, camera {args.camera})")
    return 0
