"""``embeval graph``: run the ROS 2 node graph in one process from a ROS 2 parameter file.

A stand-in for ``ros2 launch`` (not installable in this environment): the same nodes, the same
parameter files, composed in one process, each node spun by its own executor thread.
"""
from __future__ import annotations

from pathlib import Path

EXAMPLE = """examples:
  embeval graph --params config/embeval_sim.yaml
  embeval graph --params config/embeval_hil.yaml --duration 20 --set embeval_camera.rate_hz=15
  embeval graph --params config/embeval_ur5.yaml --set embeval_arm.robot_ip=192.168.1.102   # dry run by default
  embeval graph --params config/embeval_act2answer.yaml    # Act2Answer units of runs/act2answer/scenes: one line per unit
"""


def register(sub) -> None:
    import argparse

    p = sub.add_parser(
        "graph",
        help="run the ROS 2 node graph (camera, distortion, policy, arm, scorer, recorder) in one process",
        description="Compose the embeval ROS 2 nodes in one process from a ROS 2 parameter YAML and run them until the "
                    "conductor has played every episode (or --duration). Prints per-stage latency at the end.",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--params", type=Path, required=True, help="ROS 2 parameter file (node_name: {ros__parameters: ...})")
    p.add_argument("--duration", type=float, default=None,
                   help="stop after this many seconds (default: when the conductor is done, else run until Ctrl-C)")
    p.add_argument("--nodes", nargs="+", metavar="NODE", help="start only these nodes (default: every node in the file)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NODE.PARAM=VALUE",
                   help="override one parameter (YAML value), e.g. embeval_policy.dry_run=false; repeatable")
    p.add_argument("--executor", choices=["per_node", "multi"], default="per_node",
                   help="per_node: one executor thread per node (default); multi: one MultiThreadedExecutor for all")
    p.set_defaults(func=_run)


def apply_overrides(params: dict, overrides: list[str]) -> dict:
    """Apply ``node.param=value`` strings (values parsed as YAML) to a parameter dict."""
    import difflib

    import yaml
    from embeval_ros.graph import NODE_CLASSES

    from embeval.errors import ConfigError
    from embeval.safe_yaml import loads

    for item in overrides:
        key, sep, value = item.partition("=")
        node, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise ConfigError(f"--set {item!r}: use NODE.PARAM=VALUE, e.g. embeval_policy.dry_run=false")
        node = node.strip("/")
        if node not in NODE_CLASSES:
            close = difflib.get_close_matches(node, list(NODE_CLASSES), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"--set {item!r}: unknown node {node!r}; {hint}nodes: {', '.join(NODE_CLASSES)}")
        try:
            params.setdefault(node, {})[name] = loads(value)  # bounded aliases, nesting and integers
        except yaml.YAMLError:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML; quote strings with special characters") from None
    return params


def act2answer_lines(records: list[dict], jsonl: str = "") -> list[str]:
    """What ``embeval graph`` prints after Act2Answer units: one line per unit (``<item>@<layout>``, zone, choice,
    end reason and steps, where the cube position came from) and where the records were appended."""
    lines = [f"\n{'unit':<30} {'zone':<14} {'choice':<7} {'end':<16} cube"]
    for r in records:
        lines.append(f"{r['item'] + '@' + r['layout']:<30} {r['zone']:<14} {r.get('choice') or '-':<7} "
                     f"{r['end_reason'] + ' ' + str(r['steps']):<16} {r.get('cube_source', '-')}")
    if jsonl:
        path = Path(jsonl).resolve()
        lines.append(f"episodes: {len(records)} appended to {path}  (embeval act2answer report {path})")
    else:
        lines.append("episodes: not written to a file (set embeval_scorer.episodes_jsonl); on /embeval/scores only")
    return lines


def _run(args) -> int:
    import sys
    import time

    from embeval_ros.graph import Graph, load_params

    from embeval.errors import ConfigError

    common: dict = {}
    params = load_params(args.params, common)
    if not params and not common:  # accepted: every node runs with its defaults (dry run on, mock arm), said once
        print(f"embeval graph: {args.params} sets no parameters; the nodes run with their defaults", file=sys.stderr)
    if not params and not args.nodes:
        raise ConfigError(f"{args.params} names no node; add node sections (see config/embeval_sim.yaml) or pass --nodes")
    # every node-specific parameter of the file and every --set must be one the node declares
    check = {node: [k for k in p if k not in common] for node, p in params.items()}
    params = apply_overrides(params, args.overrides)
    for item in args.overrides:
        node, _, name = item.partition("=")[0].partition(".")
        check.setdefault(node.strip("/"), []).append(name)
    with Graph(params, nodes=args.nodes, executor=args.executor, check=check) as g:
        names = ", ".join(g.names)
        print(f"embeval graph: {names} (Ctrl-C to stop)", flush=True)
        conductor = g.nodes.get("embeval_conductor")
        t0, interrupted = time.monotonic(), False
        try:
            spun = g.spin(args.duration, until=(lambda g: conductor.finished) if conductor and args.duration is None else None)
        except KeyboardInterrupt:  # the arm decelerates now, not after its move and the executors' shutdown
            spun, interrupted = time.monotonic() - t0, True
            halt_arm(g.nodes.get("embeval_arm"), "embeval graph interrupted (Ctrl-C)")
        scorer = g.nodes.get("embeval_scorer")
        print(f"\nran {spun:.1f} s" + (" (interrupted: Ctrl-C)" if interrupted else ""))
        print(f"{'node':<20} {'p50 ms':>8} {'p99 ms':>8} {'received':>9} {'published':>10}")
        for name, s in g.stage_latencies().items():
            if not (s["received"] or s["published"]):
                continue
            print(f"{name:<20} {s['p50_ms']:>8.2f} {s['p99_ms']:>8.2f} {s['received']:>9} {s['published']:>10}")
        if scorer is not None and scorer.book.records:
            print(f"\n{'item':<10} {'distortion':<16} {'level':>5} {'decision':>9} {'execution':>10}  success (source)")
            for r in scorer.book.records:
                sc = r["scores"]
                print(f"{r['item']:<10} {r['distortion']:<16} {r['level']:>5} {sc.get('decision', float('nan')):>9.3f} "
                      f"{sc['execution']:>10.2f}  {sc.get('execution_success', '-')} ({sc.get('execution_success_source', 'none')})")
        if scorer is not None and scorer.a2a_records:
            print("\n".join(act2answer_lines(scorer.a2a_records, scorer.jsonl)))
        elif conductor is not None and getattr(conductor, "a2a", None) is not None:
            print("\nno Act2Answer unit finished (see the log above; --duration too short?)")
        rec = g.nodes.get("embeval_recorder")
        fault = "" if interrupted else arm_fault(g.nodes.get("embeval_arm"))
    if rec is not None:  # after the graph stopped: the recorder has drained its queue and closed the bag
        print(f"\nbag: {rec.bag.path} ({rec.bag.message_count} messages)")
    if interrupted:
        print("embeval graph: interrupted (Ctrl-C): the arm was halted, the run is incomplete; exit 130", flush=True)
        return 130
    if fault:
        print(fault, flush=True)
        return 1
    return 0


def halt_arm(arm_node, reason: str) -> None:
    """Stop the arm's motion at once (Ctrl-C): a move in progress decelerates and later commands are refused, before
    the executors shut down (their join would wait out the move)."""
    halt = getattr(arm_node, "halt", None)
    if halt is not None:
        halt(reason)


def arm_fault(arm_node) -> str:
    """One line when a hardware arm (a backend with ``hardware = True``: ur_rtde) lost its controller, ended the run
    in a stop or stopped during it ('' otherwise): ``embeval graph`` then exits 1. A simulated arm's stops are
    episode outcomes."""
    backend = getattr(arm_node, "backend", None)
    if backend is None or not getattr(backend, "hardware", False):
        return ""
    try:
        safety = backend.state().safety
    except Exception as exc:  # noqa: BLE001 - a backend that cannot even report its state is a fault too
        return f"embeval graph: the arm's state could not be read at the end ({exc}); exit 1"
    if getattr(backend, "link_lost", False):
        return f"embeval graph: the arm LOST its controller ({safety.reason}); the run is incomplete, exit 1"
    if safety.stopped:
        return f"embeval graph: the arm ended in {safety.mode.value} ({safety.reason}); exit 1"
    stops = list(getattr(backend, "stop_history", []))
    if stops:
        return f"embeval graph: the arm protective-stopped during the run (first: {stops[0].reason}); exit 1"
    return ""
