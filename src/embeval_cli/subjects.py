"""``embeval subjects list|check|doctor`` and ``embeval serve openvla|openai|vla-eval``: load, check and serve subjects."""
from __future__ import annotations

import argparse
from pathlib import Path

from embeval_cli._util import add_group, body_mb, float_in, int_in, port, positive_int, seed


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

    s = add_group(sub, "serve", "serve a subject on 127.0.0.1 under a standard protocol (OpenVLA REST, OpenAI chat, "
                                "vla-evaluation-harness)")
    for name, what, example in [
        ("openvla", "a policy under OpenVLA's REST protocol (POST /act)",
         "embeval serve openvla --subject config/subjects/image_stats_policy.yaml --port 8000"),
        ("openai", "an LLM or VLM as an OpenAI-compatible chat endpoint (POST /v1/chat/completions)",
         "embeval serve openai --subject config/subjects/scripted_llm.yaml --port 8001"),
        ("vla-eval", "a policy as a vla-evaluation-harness model server (WebSocket + msgpack on ws://HOST:PORT, "
                     "GET /health on the same port)",
         "embeval serve vla-eval config/subjects/tiny_vla.yaml --port 8765 --max-batch-size 8"),
    ]:
        ws = name == "vla-eval"  # its errors are messages on the socket, not HTTP statuses
        unit = "message" if ws else "request"
        p = s.add_parser(name, help=f"serve {what}", description=f"Serve {what}.", epilog=f"example: {example}",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
        if ws:
            p.add_argument("spec", type=Path, nargs="?", default=None, help="subject spec YAML of a policy")
        p.add_argument("--subject", type=Path, required=not ws, help="subject spec YAML")
        p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; anything else exposes the model on your network)")
        p.add_argument("--port", type=port, default=8000, help="TCP port, 1..65535 (default 8000)")
        p.add_argument("--max-body-mb", type=body_mb, default=None,
                       help=f"largest {unit} in MiB, in (0, 1024]; larger "
                            f"{'closes the connection with code 1009' if ws else 'gets HTTP 413'} (default: the spec's "
                            "serve.limits, else 32)")
        p.add_argument("--queue-size", type=positive_int, default=None,
                       help=f"model calls that may wait or run; more get {'an error message' if ws else 'HTTP 503 with Retry-After'} "
                            "(default: spec, else 256)")
        p.add_argument("--max-images", type=positive_int, default=None,
                       help=f"images in one {unit}; more get {'an error message' if ws else 'HTTP 400'} (default: the spec's "
                            "serve.limits, else 16)")
        p.add_argument("--max-request-mpixels", type=_mpixels, default=None,
                       help=f"decoded megapixels in all of one {unit}'s images, in (0, 1024], read from the image "
                            f"headers before decoding; more get {'an error message' if ws else 'HTTP 400'} (default: spec, "
                            "else 16.8 = 4096x4096)")
        if name == "openai":
            p.set_defaults(func=_serve, protocol=name)
            continue
        from embeval.serving.batching import MAX_BATCH_SIZE, MAX_WAIT_MS

        if ws:
            p.add_argument("--max-connections", type=positive_int, default=None,
                           help="connections served at once; one more gets an error and close code 1013 (default: "
                                "spec, else 64)")
        else:
            p.add_argument("--camera", default=None,
                           help="camera name the 'image' / 'full_image' field is given as (default third_person; a spec's "
                                "serve.cameras maps several fields, e.g. {full_image: third_person, wrist_image: wrist})")
        gripper_default = "open1: [0, 1], 1 = open" if ws else "open1, OpenVLA's"
        batch_of = ("episodes' observations", ")") if ws else (
            "/act requests", " = one policy.act per request); each request's episode is its 'episode' field, else its "
            "instruction")
        p.add_argument("--gripper", default=None, help=f"gripper convention of the replies (default {gripper_default})")
        p.add_argument("--max-batch-size", type=int_in(1, MAX_BATCH_SIZE, f"{unit}s per policy call"), default=None,
                       help=f"answer up to N concurrent {batch_of[0]} with one batched policy call, 1..1024 (default: the "
                            f"spec's serve.max_batch_size, else 1{batch_of[1]}")
        p.add_argument("--max-wait-ms", type=float_in(0.0, MAX_WAIT_MS), default=None,
                       help=f"milliseconds a batch waits for more {unit}s after its first, in [0, 10000] (default: "
                            "spec, else 5); only with --max-batch-size > 1")
        p.set_defaults(func=_serve, protocol=name)


def _mpixels(text: str) -> float:
    """argparse ``type=`` for ``--max-request-mpixels``: megapixels, finite, in (0, MAX_REQUEST_MPIXELS]."""
    from embeval.serving.limits import MAX_REQUEST_MPIXELS

    return float_in(0, MAX_REQUEST_MPIXELS, "megapixels", lo_open=True)(text)


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


def _serve(args) -> int:
    from embeval.serving.runner import app_from_spec, serve_forever
    from embeval.subjects.registry import read_spec

    path = getattr(args, "spec", None) or args.subject
    if path is None or (getattr(args, "spec", None) and args.subject and args.spec != args.subject):
        from embeval.errors import ConfigError

        raise ConfigError(f"`embeval serve {args.protocol}` needs one subject spec: give SPEC or --subject SPEC")
    spec = read_spec(path)
    over = {"max_body_mb": args.max_body_mb, "queue_size": args.queue_size, "max_images": args.max_images,
            "max_request_mpixels": args.max_request_mpixels}
    if args.protocol in ("openvla", "vla-eval"):
        over.update(gripper=args.gripper, max_batch_size=args.max_batch_size, max_wait_ms=args.max_wait_ms)
    if args.protocol == "openvla":
        over.update(camera=args.camera)
    if args.protocol == "vla-eval":
        from embeval.serving.vla_eval_server import serve_forever as serve_ws

        server = app_from_spec(spec, args.protocol, max_connections=args.max_connections, **over)
        batch = server.queue.max_batch
        serve_ws(server, host=args.host, port=args.port, announce=lambda port: print(
            f"serving policy {spec.id!r} as a vla-eval model server{f' (batches of up to {batch})' if batch > 1 else ''}: "
            f"ws://{args.host}:{port} (GET http://{args.host}:{port}/health)", flush=True))
        return 0
    app = app_from_spec(spec, args.protocol, **over)

    def announce(port: int) -> None:
        if args.protocol == "openvla":
            batch = app.state.queue.stats().get("max_batch_size", 1)
            how = f" (batches of up to {batch})" if batch > 1 else ""
            print(f"serving policy {spec.id!r} under the OpenVLA protocol{how}: POST http://{args.host}:{port}/act",
                  flush=True)
        else:
            print(f"serving {spec.kind} {spec.id!r}: base_url http://{args.host}:{port}/v1 (model {spec.id!r})", flush=True)

    serve_forever(app, host=args.host, port=args.port, announce=announce)
    return 0
