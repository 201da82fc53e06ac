"""Demo stage ``ros``: the ROS 2 graph in simulation, recorded, read back from the bag and plotted.
When the ``iqa`` stage saved a quality-gate predictor, the distortion node runs it in shadow mode
(every frame scored, none withheld) and the predicted Decision per episode is read from the bag.
When the ``act2answer`` stage fine-tuned ``tiny-vla-a2a``, a few of its items run as Act2Answer
units through the graph (the sim-to-real path) and are compared with that stage's in-process records."""
from __future__ import annotations

import json
import time

W, H, RATE_HZ = 160, 120, 8.0  # sim camera


def gate_params(ctx) -> dict:
    """Distortion-node parameters for the quality gate in shadow mode, or {} when no predictor was saved or it is
    too slow for the camera rate here (over 0.8 frame periods per frame: the node would fall behind the camera)."""
    from pathlib import Path

    from embeval.distortion.samples import synthetic_tabletop
    from embeval.errors import EmbevalError
    from embeval_ros.distortion_node import load_gate

    path = Path(ctx.shared.get("iqa_predictor") or ctx.out_dir / "iqa" / "predictor")
    if not (path / "gate.json").exists():
        print(f"quality gate: off (no predictor at {path}; the iqa stage saves one)")
        return {}
    try:
        gate = load_gate(str(path))
        frame = synthetic_tabletop(W, H, seed=0)
        costs = []
        for _ in range(4):  # the first call warms up
            t = time.perf_counter()
            gate.check(frame)
            costs.append(time.perf_counter() - t)
        cost = sorted(costs[1:])[1]  # median of 3
    except EmbevalError as exc:
        print(f"quality gate: off ({exc})")
        return {}
    if cost > 0.8 / RATE_HZ:
        print(f"quality gate: off ({gate.predictor.name} takes {cost * 1e3:.0f} ms per frame here, over 0.8 of the "
              f"{1e3 / RATE_HZ:.0f} ms frame period)")
        return {}
    print(f"quality gate: {gate.predictor.name} from {path}, threshold {gate.threshold:.3f}, {cost * 1e3:.1f} ms per frame; "
          "shadow mode (scored, none withheld)")
    return {"quality_gate": str(path), "quality_gate_withhold": False}


def run(ctx) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    from embeval.camera.base import image_from_msg
    from embeval.recording import bag_info, read_bag
    from embeval_ros.diagnostics import diag_values
    from embeval_ros.graph import Graph, load_params

    out = ctx.out_dir / "ros"
    out.mkdir(parents=True, exist_ok=True)
    bag_dir = out / f"bag_seed{ctx.seed}"
    if bag_dir.exists():
        import shutil

        shutil.rmtree(bag_dir)
    subject, sparams = "image_stats", {"scale": 0.2}
    try:  # the embedded tiny VLA when it ships, else the image-dependent scripted stand-in
        from embeval.subjects.embedded.zoo import shipped_models

        if "tiny-vla" in shipped_models("vla"):
            subject, sparams = "embedded", {}
    except Exception:  # noqa: BLE001
        pass
    steps = 3 if ctx.quick else 6
    dists, levels = (["none", "gaussian_blur"], [0, 4]) if ctx.quick else (["none", "gaussian_blur", "darken"], [0, 4, 4])
    gate = gate_params(ctx)
    params = load_params({
        "embeval_camera": {"ros__parameters": {"source": "sim", "rate_hz": RATE_HZ, "width": W, "height": H}},
        "embeval_distortion": {"ros__parameters": {"distortion": "none", "seed": ctx.seed, **gate}},
        "embeval_policy": {"ros__parameters": {"subject": subject, "subject_params": json.dumps(sparams) if sparams else "",
                                               "dry_run": False, "rate_hz": 3.0, "max_steps": steps, "max_image_age_s": 3.0}},
        "embeval_arm": {"ros__parameters": {"backend": "sim", "sim_seed": ctx.seed, "max_command_age_s": 10.0,
                                            "tcp_speed": 0.2, "state_rate_hz": 10.0}},
        "embeval_scorer": {"ros__parameters": {"store": str(out / "results.sqlite"), "run_id": f"ros-demo-{ctx.seed}"}},
        "embeval_recorder": {"ros__parameters": {"bag_dir": str(bag_dir), "segment_s": 1.0}},
        "embeval_conductor": {"ros__parameters": {"items": ["cube"] * len(dists), "instructions": ["pick up the cube"] * len(dists),
                                                  "distortions": dists, "levels": levels, "steps_per_episode": steps,
                                                  "episode_timeout_s": 60.0}},
    })
    with Graph(params) as g:
        g.spin(240, until=lambda g: g.nodes["embeval_conductor"].finished)
        g.spin(1.0)
        stats = g.stage_latencies()
        records = list(g.nodes["embeval_scorer"].book.records)
    print(f"Graph: sim camera -> distortion -> policy ({subject}) -> sim arm (pybullet) -> scorer, recorder")
    print(f"\n{'node':<20} {'p50 ms':>8} {'p99 ms':>8} {'received':>9} {'published':>10}")
    for name, s in stats.items():
        if s["published"] or s["received"]:
            print(f"{name:<20} {s['p50_ms']:>8.2f} {s['p99_ms']:>8.2f} {s['received']:>9} {s['published']:>10}")
    print(f"\n{'distortion':<16} {'level':>5} {'decision':>9} {'execution':>10}  (vs the reference run)")
    for r in records:
        print(f"{r['distortion']:<16} {r['level']:>5} {r['scores'].get('decision', float('nan')):>9.3f} {r['scores']['execution']:>10.2f}")
    info = bag_info(bag_dir)
    print(f"\nbag {bag_dir}: {info['message_count']} messages in {len(info['topics'])} topics, {info['duration_s']:.1f} s")
    # read back: TCP path per episode and one distorted frame per episode
    episodes, cur, frames = [], None, {}
    for m in read_bag(bag_dir, ["/embeval/events", "/tcp_pose_broadcaster/pose", "/embeval/image_distorted",
                                "/embeval/quality_gate"]):
        if m.topic == "/embeval/events":
            ev = json.loads(m.msg.data)
            if ev["event"] == "episode_start":
                cur = {"label": f"{ev['distortion']} {ev['level']}".replace(" 0", ""), "xy": [], "gate": []}
                episodes.append(cur)
            elif ev["event"] == "episode_end":
                cur = None
        elif cur is not None and m.topic == "/tcp_pose_broadcaster/pose":
            cur["xy"].append((m.msg.pose.position.x, m.msg.pose.position.y))
        elif cur is not None and m.topic == "/embeval/quality_gate":
            v = diag_values(m.msg)
            cur["gate"].append((float(v["score"]), v["passed"] == "True"))
        elif cur is not None and cur["label"] not in frames:
            frames[cur["label"]] = image_from_msg(m.msg)
    if gate:
        print(f"\nquality gate (shadow mode) per episode, from the bag:\n{'episode':<18} {'frames':>6} "
              f"{'predicted decision':>18} {'below threshold':>15}")
        for ep in episodes:
            sc = np.asarray([s for s, _ in ep["gate"]])
            below = sum(not p for _, p in ep["gate"])
            print(f"{ep['label']:<18} {len(sc):>6} {sc.mean() if sc.size else float('nan'):>18.3f} "
                  f"{below / max(len(sc), 1):>15.0%}")
    fig, axes = plt.subplots(1, 1 + len(frames), figsize=(4 * (1 + len(frames)), 3.6))
    for ep in episodes:
        xy = np.asarray(ep["xy"]) if ep["xy"] else np.zeros((0, 2))
        axes[0].plot(xy[:, 1], xy[:, 0], marker=".", label=ep["label"])
    axes[0].set_xlabel("y (m, frame base)")
    axes[0].set_ylabel("x (m)")
    axes[0].set_title("TCP path per episode (from the bag)")
    axes[0].legend()
    for ax, (label, img) in zip(axes[1:], frames.items()):
        ax.imshow(img)
        ax.set_title(f"policy input: {label}")
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(out / "ros_graph.png", dpi=100)
    plt.close(fig)
    print(f"plot: {out / 'ros_graph.png'}")
    act2answer_sim2real(ctx, out)


def act2answer_sim2real(ctx, out) -> None:
    """A few Act2Answer units of the act2answer stage through the graph with the tiny VLA that stage ran (its
    own fine-tune or the shipped one; two cameras, step-synchronous), zone by zone against that stage's
    in-process episodes. A MissingFileError when the act2answer stage has not run (the demo fails, saying so)."""
    from embeval.act2answer.episode import read_results
    from embeval.act2answer.items import read_items
    from embeval.act2answer.scene import export_scenes
    from embeval_ros.graph import Graph, load_params

    from embeval.act2answer.scene import EpisodeSpec
    from embeval.errors import MissingFileError
    from embeval_demo.act2answer import finetune_folder

    a2a = ctx.out_dir / "act2answer"
    spec = EpisodeSpec()  # the act2answer stage's
    model, suite, local_file = finetune_folder(a2a, ctx, spec), a2a / "suite" / "items.jsonl", a2a / "episodes_tiny-vla-a2a.jsonl"
    missing = [str(p) for p in (suite, local_file) if not p.exists()] + ([] if model else ["the tiny-vla-a2a checkpoint"])
    if missing:  # a demo part that cannot run fails the demo, with its reason
        raise MissingFileError(f"Act2Answer through the graph needs the act2answer stage's {', '.join(missing)}: run "
                               "`embeval demo --only act2answer` first (or the whole demo)")
    items = read_items(suite)
    cats = sorted({i.category for i in items})[: 1 if ctx.quick else 3]
    chosen = [next(i for i in items if i.category == c) for c in cats]
    scenes = export_scenes(chosen, out / "act2answer_scenes", spec)
    (out / "tiny-vla-a2a.yaml").write_text(f"id: tiny-vla-a2a\nkind: policy\nadapter: embedded\npath: {model.resolve()}\n")
    wrist = "/embeval/camera/wrist/image_raw"
    params = load_params({
        "embeval_camera": {"ros__parameters": {"source": "sim", "rate_hz": 10.0, "width": 64, "height": 48,
                                               "extra_cameras": ["wrist"]}},
        "embeval_distortion": {"ros__parameters": {"distortion": "none"}},
        "embeval_policy": {"ros__parameters": {"subject": str(out / "tiny-vla-a2a.yaml"), "camera_topics": [f"wrist={wrist}"],
                                               "sync_to_arm": True, "dry_run": False, "rate_hz": 10.0, "max_steps": spec.max_steps,
                                               "max_image_age_s": 3.0}},
        "embeval_arm": {"ros__parameters": {"backend": "sim", "max_command_age_s": 10.0, "tcp_speed": 0.25,
                                            "state_rate_hz": 20.0}},
        "embeval_scorer": {"ros__parameters": {"episodes_jsonl": "", "run_id": "act2answer-sim2real"}},
        "embeval_conductor": {"ros__parameters": {"act2answer_scenes": str(scenes), "episode_timeout_s": 60.0, "settle_s": 0.5,
                                                  "wait_for_nodes": ["embeval_arm", "embeval_policy", "embeval_scorer"]}},
    })
    t0 = time.perf_counter()
    with Graph(params) as g:
        g.spin(300, until=lambda g: g.nodes["embeval_conductor"].finished)
        finished, ros = g.nodes["embeval_conductor"].finished, list(g.nodes["embeval_scorer"].a2a_records)
    if not finished or len(ros) != 2 * len(chosen):
        from embeval.errors import EmbevalError

        raise EmbevalError(f"Act2Answer through the graph: {len(ros)} of {2 * len(chosen)} units scored in "
                           f"{time.perf_counter() - t0:.0f} s (conductor finished: {finished}); see the ROS log above")
    local = {(r["item"], r["layout"]): r for r in read_results(local_file)}
    print(f"\nAct2Answer through the graph (sim side of sim-to-real): tiny-vla-a2a, {len(ros)} units in "
          f"{time.perf_counter() - t0:.0f} s, vs the act2answer stage's in-process episodes")
    print(f"{'unit':<26} {'graph zone':<14} {'in-process zone':<16} {'graph end':<16} {'in-process end':<16}")
    same = 0
    for r in ros:
        lo = local.get((r["item"], r["layout"]), {})
        same += r["zone"] == lo.get("zone")
        print(f"{r['item'] + '@' + r['layout']:<26} {r['zone']:<14} {lo.get('zone', '-'):<16} "
              f"{r['end_reason'] + ' ' + str(r['steps']):<16} {lo.get('end_reason', '-') + ' ' + str(lo.get('steps', '')):<16}")
    print(f"same zone in {same} of {len(ros)} units (the graph's timing differs from the in-process loop; see "
          "docs/act2answer.md#sim-to-real)")
