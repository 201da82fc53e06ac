"""``embeval distort``: list the distortion types, apply them to an image folder or a rosbag topic,
and draw a contact sheet of all types x levels."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from embeval_cli._util import add_group, seed

_IMAGE_TOPIC = "/camera/camera/color/image_raw"


def register(sub) -> None:
    g = add_group(sub, "distort", "image distortions: 30 types x 5 levels (list, apply to a folder or a bag, contact sheet)")
    fmt = argparse.RawDescriptionHelpFormatter

    p = g.add_parser("list", help="list the distortion types with their category and level parameters",
                     description="List the registered distortion types.",
                     epilog="example:\n  embeval distort list\n  embeval distort list --category noise", formatter_class=fmt)
    p.add_argument("--category", help="only this category (blur, luminance, chrominance, noise, compression, spatial, other)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_list)

    p = g.add_parser("apply", help="distort every image of a folder (or one image file)",
                     description="Distort every image in a folder (or one image file); writes OUT/<type>/L<level>/<name>.png and "
                                 "OUT/manifest.jsonl (source, output, type, level, per-image seed). Existing outputs are "
                                 "kept, so an interrupted run resumes.",
                     epilog="examples:\n  embeval distort apply --in photos/ --out distorted/ --type jpeg --level 3 --seed 0\n"
                            "  embeval distort apply --in photos/ --out distorted/ --all\n"
                            "  embeval distort apply --in frame.png --out distorted/ --type jpeg", formatter_class=fmt)
    p.add_argument("--in", dest="in_dir", type=Path, required=True, help="folder of input images (png/jpg/...), or one image file")
    p.add_argument("--out", dest="out_dir", type=Path, required=True, help="output folder (created)")
    p.add_argument("--type", nargs="+", metavar="NAME", help="distortion type(s); see `embeval distort list`")
    p.add_argument("--level", nargs="+", type=int, metavar="L", help="level(s) 1..5 (default: all five)")
    p.add_argument("--all", action="store_true", help="every type (x every level unless --level is given)")
    p.add_argument("--seed", type=seed, default=0, help="master seed; per-image seeds derive from it (default: 0)")
    p.add_argument("--overwrite", action="store_true", help="re-create outputs that exist already")
    p.set_defaults(func=_apply)

    p = g.add_parser("bag", help="distort an image topic of a rosbag2 (MCAP) bag into a new bag",
                     description="Copy a rosbag2 bag (a folder with metadata.yaml and MCAP files) to a new bag with every "
                                 "sensor_msgs/msg/Image on --topic distorted (rgb8, original header and receive time); "
                                 "other topics are copied unchanged unless --only-topic.",
                     epilog=f"example:\n  embeval distort bag runs/bag1 runs/bag1_jpeg3 --topic {_IMAGE_TOPIC} --type jpeg --level 3",
                     formatter_class=fmt)
    p.add_argument("in_bag", type=Path, help="input bag folder")
    p.add_argument("out_bag", type=Path, help="output bag folder (must not exist)")
    p.add_argument("--topic", default=_IMAGE_TOPIC, help=f"image topic (default: {_IMAGE_TOPIC})")
    p.add_argument("--type", required=True, help="distortion type; see `embeval distort list`")
    p.add_argument("--level", type=int, required=True, help="level 1..5")
    p.add_argument("--seed", type=seed, default=0, help="master seed; per-frame seeds derive from it (default: 0)")
    p.add_argument("--only-topic", action="store_true", help="write only the distorted topic")
    p.set_defaults(func=_bag)

    p = g.add_parser("grid", help="contact sheet PNG of all types x levels on one image",
                     description="Draw every distortion type (rows) at levels 1..5 (columns) with PSNR labels. Without "
                                 "--image it uses a synthetic robot tabletop scene (or --sample PHOTO from scikit-image).",
                     epilog="examples:\n  embeval distort grid --out grid.png\n  embeval distort grid --image frame.png --out grid.png"
                            "\n  embeval distort grid --sample astronaut --out grid.png --type jpeg jpeg2000",
                     formatter_class=fmt)
    p.add_argument("--out", type=Path, default=Path("distortion_grid.png"), help="output PNG (default: distortion_grid.png)")
    p.add_argument("--image", type=Path, help="reference image file")
    p.add_argument("--sample", help="a scikit-image photo instead: astronaut, chelsea, coffee, rocket")
    p.add_argument("--type", nargs="+", metavar="NAME", help="only these types (default: all 30)")
    p.add_argument("--width", type=int, default=640, help="resize the reference to this width first (default: 640)")
    p.add_argument("--thumb", type=int, default=160, help="thumbnail width in pixels (default: 160)")
    p.add_argument("--seed", type=seed, default=0, help="seed (default: 0)")
    p.set_defaults(func=_grid)


def _list(args) -> int:
    import json

    from embeval.distortion import DISTORTIONS, list_distortions

    names = list_distortions(args.category)
    if args.json:
        print(json.dumps([{"name": n, "category": DISTORTIONS[n].category, "levels": list(DISTORTIONS[n].levels),
                           "param": DISTORTIONS[n].param, "description": DISTORTIONS[n].description,
                           "kadid": DISTORTIONS[n].kadid} for n in names], indent=1))
        return 0
    rows = [(n, DISTORTIONS[n].category, " ".join(f"{v:g}" for v in DISTORTIONS[n].levels),
             DISTORTIONS[n].description) for n in names]
    widths = [max(len(r[i]) for r in rows + [("name", "category", "levels 1..5", "")]) for i in range(3)]
    print(f"{'name':<{widths[0]}}  {'category':<{widths[1]}}  {'levels 1..5':<{widths[2]}}  description")
    for r in rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}")
    print(f"\n{len(rows)} types; parameters and units: embeval distort list --json")
    return 0


def _apply(args) -> int:
    from embeval.distortion import list_distortions
    from embeval.distortion.batch import distort_folder
    from embeval.errors import ConfigError

    if args.all and args.type:
        raise ConfigError("give either --type NAME... or --all, not both")
    types = list_distortions() if args.all else (args.type or [])
    if not types:
        raise ConfigError("choose distortion types with --type NAME (see `embeval distort list`) or use --all")
    levels = args.level or [1, 2, 3, 4, 5]
    unreadable: list[str] = []
    recs = distort_folder(args.in_dir, args.out_dir, types, levels, seed=args.seed, progress=True, overwrite=args.overwrite,
                          unreadable=unreadable)
    print(f"{len(recs)} images in {args.out_dir}/ (manifest: {args.out_dir / 'manifest.jsonl'})")
    if unreadable:
        for msg in unreadable:
            print(f"embeval: skipped: {msg}", file=sys.stderr)
        print(f"embeval: error: {len(unreadable)} input file(s) are not readable images and were skipped; remove or "
              f"replace them and run the same command again (finished outputs are kept)", file=sys.stderr)
        return 1
    return 0


def _bag(args) -> int:
    from embeval.distortion.batch import distort_bag

    r = distort_bag(args.in_bag, args.out_bag, args.topic, args.type, args.level, seed=args.seed,
                    other_topics=not args.only_topic, progress=True)
    print(f"{r.images} images on {r.topic} distorted ({r.distortion}, level {r.level}), {r.copied} other messages "
          f"copied -> {r.output}")
    return 0


def _grid(args) -> int:
    from embeval.distortion.batch import read_rgb
    from embeval.distortion.grid import save_contact_sheet
    from embeval.distortion.samples import photo, synthetic_tabletop
    from embeval.errors import ConfigError, MissingFileError
    from embeval.image_io import check_image_path
    from embeval.resize import resize

    check_image_path(args.out, "--out")  # before the contact sheet is computed
    if args.image and args.sample:
        raise ConfigError("give either --image FILE or --sample NAME, not both")
    if args.image:
        if not args.image.exists():
            raise MissingFileError(f"image {args.image} does not exist")
        img = read_rgb(args.image)
    elif args.sample:
        img = photo(args.sample, size=None)
    else:
        img = synthetic_tabletop(args.width, args.width * 3 // 4, seed=args.seed)
    if img.shape[1] != args.width:
        img = resize(img, max(8, round(img.shape[0] * args.width / img.shape[1])), args.width, "cv2_area")
    out = save_contact_sheet(args.out, img, names=args.type, seed=args.seed, thumb_width=args.thumb)
    print(f"contact sheet written to {out}")
    return 0
