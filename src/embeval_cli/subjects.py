"""``embeval subjects list|check|doctor`` and ``embeval serve openvla|openai|vla-eval``: load, check and serve subjects."""
from __future__ import annotations

import argparse
from pathlib import Path

from embeval.serving.command import HELP, add_protocol_parsers
from embeval_cli._util import add_group, int_in, seed


def register(sub) -> None:
    g = add_group(sub, "subjects", "list subject adapters and check a subject spec (a model behind a YAML file)")
    p = g.add_parser(
        "list", help="list the registered adapters (kind, name, implementation)",
        description="List every registered subject adapter.",
        epilog="example: embeval subjects list --kind policy",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--kind", choices=["vlm", "policy", "llm"], help="show only this kind")
    p.set_defaults(func=_list)

    p = g.add_parser(
        "check", help="load a subject from its YAML spec and run one call",
        description="Load the subject a spec describes and run one call: an LLM chats and chooses, a VLM answers "
                    "about an image, a policy acts on an observation. Prints the output and the time taken.",
        epilog="example: embeval subjects check config/subjects/scripted_llm.yaml --prompt 'ready?'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("spec", type=Path, help="subject spec YAML (see config/subjects/)")
    p.add_argument("--prompt", default=None, help="prompt (LLM/VLM) or instruction (policy); a default is used if omitted")
    p.add_argument("--image", type=Path, default=None,
                   help="RGB image file for a VLM or policy (default: a synthetic 224x224 test image; a policy gets it "
                        "as cameras third_person and wrist, with zero joint positions)")
    p.set_defaults(func=_check)

    p = g.add_parser(
        "doctor", help="check a policy's conventions (gripper, axes, units, frame, cameras, image flip) against the expert",
        description="Drive short probe episodes with the scripted expert in the pybullet cell, ask the policy on every "
                    "step and report in plain words what looks wrong (inverted gripper, swapped axes, degrees, mm, a "
                    "constant action, NaN, an unread camera, an upside-down image). Exit 0: all pass; 1: a check failed; "
                    "2: usage error. See docs/subjects.md#doctor.",
        epilog="example: embeval subjects doctor config/subjects/tiny_vla.yaml --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("spec", type=Path, help="subject spec YAML of a policy (see config/subjects/)")
    p.add_argument("--task", default="Pick", help="sim task verb of the probe episodes (default Pick)")
    p.add_argument("--episodes", type=int_in(1, 200, "probe episodes"), default=8, help="probe episodes, 1..200 (default 8)")
    p.add_argument("--max-steps", type=int_in(2, 400, "steps per probe episode"), default=16,
                   help="steps per probe episode at most, 2..400 (default 16)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the first probe episode (default 0)")
    p.add_argument("--cameras", default=None, help="comma-separated cameras the policy must read (default: those it "
                                                   "declares, else all)")
    p.add_argument("--checks", default=None, help="comma-separated checks to run (default all)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_doctor)

    s = add_group(sub, "serve", HELP)
    add_protocol_parsers(s)


def _list(args) -> int:
    from embeval.subjects.registry import list_adapters

    rows = [r for r in list_adapters() if args.kind is None or r[0] == args.kind]
    print(f"{'kind':<8} {'adapter':<16} implementation")
    for kind, name, desc in rows:
        print(f"{kind:<8} {name:<16} {desc}")
    return 0


def _test_image(path: Path | None):
    import numpy as np

    if path is None:
        yy, xx = np.mgrid[0:224, 0:224]
        img = np.stack([xx, yy, np.full_like(xx, 96)], axis=-1).astype(np.uint8)
        img[80:144, 80:144] = (200, 30, 30)  # a red "cube"
        return img
    from embeval.distortion.batch import read_rgb
    from embeval.errors import MissingFileError

    if not path.is_file():
        raise MissingFileError(f"image {path} is a folder; give an image file" if path.is_dir() else f"image {path} does not exist")
    return read_rgb(path)  # InvalidInputError naming the file when it is not an image


def _check(args) -> int:
    import time

    from embeval.action import Observation
    from embeval.subjects.registry import load_subject, read_spec

    spec = read_spec(args.spec)
    img = _test_image(args.image) if spec.kind != "llm" else None  # a bad --image fails before a slow model load
    t0 = time.perf_counter()
    subject = load_subject(spec)
    t_load = time.perf_counter() - t0
    print(f"loaded {spec.kind} {subject.id!r} (adapter {spec.adapter}) in {t_load:.2f} s")
    t0 = time.perf_counter()
    if spec.kind == "llm":
        prompt = args.prompt or "Reply with one word: are you ready?"
        print("chat   ->", repr(subject.chat([{"role": "user", "content": prompt}])))
        print("choose ->", repr(subject.choose("Is a cube a round object?", ["yes", "no"])))
    elif spec.kind == "vlm":
        prompt = args.prompt or "Pick up the red cube. Answer in about 10 words."
        print("generate ->", repr(subject.generate([img], prompt)))
    else:
        subject.reset(args.prompt or "pick up the red cube")
        import numpy as np

        obs = Observation(images={"third_person": img, "wrist": img}, instruction=args.prompt or "pick up the red cube",
                          state={"joint_positions": np.zeros(6), "tcp_pose": np.array([0.4, 0.0, 0.3, 0, 0, 0, 1.0])})
        action = subject.act(obs)
        print("action [dx dy dz droll dpitch dyaw gripper] ->", " ".join(f"{x:+.4f}" for x in action.vector))
        print("action spec ->", subject.action_spec)
    print(f"one call in {time.perf_counter() - t0:.2f} s")
    return 0


def _doctor(args) -> int:
    from embeval.subjects.doctor import run_cli

    return run_cli(args)


