"""The subject servers' command line, defined once: ``embeval serve PROTOCOL`` and ``python -m embeval.serving
PROTOCOL`` (what :func:`embeval.serving.runner.start_serve_process` starts) parse the same arguments."""
from __future__ import annotations

import argparse
from pathlib import Path

from embeval.argtypes import adapt, float_in, int_in, port, positive_int
from embeval.entry import run_entry

HELP = "serve a subject on 127.0.0.1 under a standard protocol (OpenVLA REST, OpenAI chat, vla-evaluation-harness, openpi)"


def body_mb(text: str) -> float:
    """argparse ``type=`` for a request-body limit in MiB: a finite number > 0 and at most
    :data:`embeval.serving.limits.MAX_BODY_MB` (:func:`embeval.checks.mib`)."""
    from embeval import checks
    from embeval.serving.limits import MAX_BODY_MB

    return adapt(lambda v, where: checks.mib(v, where, MAX_BODY_MB), float)(text)


def mpixels(text: str) -> float:
    """argparse ``type=`` for ``--max-request-mpixels``: megapixels, finite, in (0, MAX_REQUEST_MPIXELS]."""
    from embeval.serving.limits import MAX_REQUEST_MPIXELS

    return float_in(0, MAX_REQUEST_MPIXELS, "megapixels", lo_open=True)(text)


def add_protocol_parsers(subparsers) -> None:
    """One sub-command per protocol (openvla, openai, vla-eval, openpi) on ``subparsers``, each with :func:`serve` as its
    ``func``."""
    for name, what, example in [
        ("openvla", "a policy under OpenVLA's REST protocol (POST /act)",
         "embeval serve openvla --subject config/subjects/image_stats_policy.yaml --port 8000"),
        ("openai", "an LLM or VLM as an OpenAI-compatible chat endpoint (POST /v1/chat/completions)",
         "embeval serve openai --subject config/subjects/scripted_llm.yaml --port 8001"),
        ("vla-eval", "a policy as a vla-evaluation-harness model server (WebSocket + msgpack on ws://HOST:PORT, "
                     "GET /health on the same port)",
         "embeval serve vla-eval config/subjects/tiny_vla.yaml --port 8765 --max-batch-size 8"),
        ("openpi", "a policy as an openpi policy server (WebSocket + msgpack_numpy on ws://HOST:PORT, the spec's "
                   "serve.openpi layout; GET /healthz on the same port)",
         "embeval serve openpi config/subjects/tiny_vla.yaml --port 8000"),
    ]:
        ws = name in ("vla-eval", "openpi")  # its errors are messages on the socket, not HTTP statuses
        unit = "message" if ws else "request"
        p = subparsers.add_parser(name, help=f"serve {what}", description=f"Serve {what}.", epilog=f"example: {example}",
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
        p.add_argument("--max-request-mpixels", type=mpixels, default=None,
                       help=f"decoded megapixels in all of one {unit}'s images, in (0, 1024], read from the image "
                            f"headers before decoding; more get {'an error message' if ws else 'HTTP 400'} (default: spec, "
                            "else 16.8 = 4096x4096)")
        if name == "openai":
            p.set_defaults(func=serve, protocol=name)
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
        if name != "openpi":  # openpi's replies are in its layout's convention (serve.openpi.convention)
            p.add_argument("--gripper", default=None, help=f"gripper convention of the replies (default {gripper_default})")
        p.add_argument("--max-batch-size", type=int_in(1, MAX_BATCH_SIZE, f"{unit}s per policy call"), default=None,
                       help=f"answer up to N concurrent {batch_of[0]} with one batched policy call, 1..1024 (default: the "
                            f"spec's serve.max_batch_size, else 1{batch_of[1]}")
        p.add_argument("--max-wait-ms", type=float_in(0.0, MAX_WAIT_MS), default=None,
                       help=f"milliseconds a batch waits for more {unit}s after its first, in [0, 10000] (default: "
                            "spec, else 5); only with --max-batch-size > 1")
        p.set_defaults(func=serve, protocol=name)


def serve(args) -> int:
    from embeval.serving.runner import app_from_spec, serve_forever
    from embeval.subjects.registry import read_spec

    path = getattr(args, "spec", None) or args.subject
    if path is None or (getattr(args, "spec", None) and args.subject and args.spec != args.subject):
        from embeval.errors import ConfigError

        raise ConfigError(f"`serve {args.protocol}` needs one subject spec: give SPEC or --subject SPEC")
    spec = read_spec(path)
    over = {"max_body_mb": args.max_body_mb, "queue_size": args.queue_size, "max_images": args.max_images,
            "max_request_mpixels": args.max_request_mpixels}
    if args.protocol in ("openvla", "vla-eval", "openpi"):
        over.update(gripper=getattr(args, "gripper", None), max_batch_size=args.max_batch_size,
                    max_wait_ms=args.max_wait_ms)
    if args.protocol == "openvla":
        over.update(camera=args.camera)
    if args.protocol in ("vla-eval", "openpi"):
        from embeval.serving.vla_eval_server import serve_forever as serve_ws

        server = app_from_spec(spec, args.protocol, max_connections=args.max_connections, **over)
        batch = server.queue.max_batch
        what, health = ("a vla-eval model server", "health") if args.protocol == "vla-eval" else (
            f"an openpi policy server (layout {server.layout.name}, chunks of {server.horizon})", "healthz")
        serve_ws(server, host=args.host, port=args.port, announce=lambda port: print(
            f"serving policy {spec.id!r} as {what}{f' (batches of up to {batch})' if batch > 1 else ''}: "
            f"ws://{args.host}:{port} (GET http://{args.host}:{port}/{health})", flush=True))
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


def build_parser(prog: str = "python -m embeval.serving") -> argparse.ArgumentParser:
    """The servers' own parser: ``PROG PROTOCOL [options]``."""
    parser = argparse.ArgumentParser(prog=prog, description=HELP)
    add_protocol_parsers(parser.add_subparsers(dest="protocol_command", metavar="PROTOCOL", required=True))
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m embeval.serving PROTOCOL ...``: exit 0, or 2 with one line on a user error."""
    return run_entry(build_parser(), argv)
