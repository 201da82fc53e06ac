"""``embeval bag``: inspect and recover rosbag2 (MCAP) bags written by the recorder."""
from __future__ import annotations

import argparse
from pathlib import Path


def register(sub) -> None:
    from embeval_cli._util import add_group, int_in

    g = add_group(sub, "bag", "inspect and recover rosbag2 (MCAP) bags (embeval bag info runs/bags/embeval_...)")
    p = g.add_parser("info", help="topics, types, message counts and duration of a bag",
                     description="Print a bag's topics, types, counts and duration.",
                     epilog="example:\n  embeval bag info runs/bags/embeval_20260101_120000",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bag", type=Path, help="bag folder (holds metadata.yaml) or a single .mcap file")
    p.set_defaults(func=_info)
    p = g.add_parser("recover", help="make a killed or damaged bag consistent (rebuild metadata.yaml, set bad segments aside)",
                     description="Read every MCAP segment in full, rebuild metadata.yaml from the good ones and move partial "
                     "or corrupt ones into BAG/damaged/ (never deleted).",
                     epilog="example:\n  embeval bag recover runs/bags/embeval_20260101_120000",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bag", type=Path, help="bag folder")
    p.set_defaults(func=_recover)
    p = g.add_parser("video", help="render a bag's image topic to an H.264 mp4",
                     description="Encode every sensor_msgs/Image of one topic (in bag order) into an mp4 (H.264, "
                     "yuv420p), each frame labelled with its index and time since the first; frames are encoded as "
                     "they are read (memory does not grow with the bag).",
                     epilog="example:\n  embeval bag video runs/bags/embeval_20260101_120000 --out episode.mp4\n"
                            "  embeval bag video bag/ --topic /camera/camera/color/image_raw --out cam.mp4 --fps 30",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bag", type=Path, help="bag folder (holds metadata.yaml) or a single .mcap file")
    p.add_argument("--out", type=Path, required=True, help="output video (.mp4)")
    p.add_argument("--topic", help="image topic (default: the camera topic, or the bag's only sensor_msgs/Image topic)")
    p.add_argument("--fps", type=int_in(1, 240, "frames per second of the video"),
                   help="frames per second of the video (default: the topic's own rate from its header stamps, "
                        "rounded, 1..240)")
    p.set_defaults(func=_video)


def _info(args) -> int:
    from embeval.recording import bag_info

    info = bag_info(args.bag)
    print(f"{info['path']}: {info['message_count']} messages, {info['duration_s']:.2f} s")
    for topic, t in sorted(info["topics"].items()):
        print(f"  {topic:<50} {t['type']:<36} {t['count']:>8}")
    return 0


def _recover(args) -> int:
    from embeval.recording import recover_bag

    from embeval.recording.bag import DAMAGED_DIR

    r = recover_bag(args.bag)
    aside = f"set aside in {Path(args.bag) / DAMAGED_DIR}: {', '.join(r.discarded)}" if r.discarded else "nothing set aside"
    print(f"kept {len(r.kept)} segment(s), {r.message_count} messages; {aside}")
    return 0


def _image_topic(bag: Path, topic: str | None) -> str:
    """``topic``, or the camera topic, or the bag's only image topic; a ConfigError naming the choices."""
    from embeval.camera.base import IMAGE_TOPIC
    from embeval.errors import ConfigError
    from embeval.recording import bag_info

    if topic:
        return topic  # BagSource checks that it is there and holds images
    images = sorted(t for t, v in bag_info(bag)["topics"].items() if v["type"] == "sensor_msgs/msg/Image")
    if IMAGE_TOPIC in images or len(images) == 1:
        return IMAGE_TOPIC if IMAGE_TOPIC in images else images[0]
    raise ConfigError(f"bag {bag} has {'no' if not images else len(images)} sensor_msgs/Image topics"
                      f"{': ' + ', '.join(images) if images else ''}; "
                      f"{'record a camera topic' if not images else 'choose one with --topic'}")


def _video(args) -> int:
    from embeval.camera.bag import BagSource
    from embeval.errors import ConfigError, check_out_file
    from embeval.recording.bag import bag_info
    from embeval.recording.video import FPS, EpisodeVideoWriter, compose_frame

    if args.out.suffix.lower() != ".mp4":
        raise ConfigError(f"--out {args.out}: write an .mp4 file (H.264)")
    check_out_file(args.out, "--out")
    topic = _image_topic(args.bag, args.topic)
    fps = args.fps
    if fps is None:  # the topic's rate: (messages - 1) / span of the receive times
        info = bag_info(args.bag)
        n, span = info["topics"].get(topic, {}).get("count", 0), info["duration_s"]
        fps = min(240, max(1, round((n - 1) / span))) if n > 1 and span > 0 else FPS
    src = BagSource(args.bag, topic, restamp=False)
    t0, n = None, 0
    with EpisodeVideoWriter(args.out, fps=fps, outcome_frames=0) as writer:
        while (frame := src.read()) is not None:
            t0 = frame.stamp_ns if t0 is None else t0
            try:
                writer.add(compose_frame([(topic, frame.image)], [f"frame {frame.index}  t {(frame.stamp_ns - t0) / 1e9:.2f} s"],
                                         n_lines=1))
            except ValueError as exc:  # the image size changed mid-topic
                raise ConfigError(f"{exc}; write one video per image size") from None
            n += 1
        path = writer.finish()
    if path is None:
        raise ConfigError(f"--out {args.out}: not written ({writer.error or 'no frames'})")
    print(f"wrote {path}: {n} frames of {topic} at {fps} fps ({n / fps:.1f} s)")
    return 0
