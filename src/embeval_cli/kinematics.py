"""``embeval kinematics``: UR forward / inverse kinematics and URDF generation from the shell."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from embeval_cli._util import add_group

_EPILOG_FK = """example:
  embeval kinematics fk 0 -1.57 1.57 0 0 0
  embeval kinematics fk 0 -1.57 1.57 0 1.57 0 --frame base --tool gripper --json"""
_EPILOG_IK = """example:
  embeval kinematics ik 0.4 0.1 0.3 3.1416 0 0                 # all solutions, pose in base_link
  embeval kinematics ik -0.4 -0.1 0.3 3.1416 0 0 --frame base --near 0 -1.57 1.57 -1.57 -1.57 0"""
_EPILOG_URDF = """example:
  embeval kinematics urdf --model ur5e --gripper -o ur5e_gripper.urdf
  embeval kinematics urdf --params my_calibration.yaml -o my_ur5.urdf
  embeval kinematics urdf --shipped                            # rewrite urdf/ur5*.urdf and urdf/table.urdf"""


def _arm_options(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", default="ur5", help="UR model preset: ur3, ur3e, ur5, ur5e, ur10, ur10e (default: ur5)")
    g.add_argument("--params", type=Path, help="kinematics YAML: a D-H table or ur_description default_kinematics.yaml")
    p.add_argument("--tool", default=None,
                   help="TCP offset: 'gripper' (the Robotiq-like gripper, 0.14 m along tool0 z) or "
                        "'x,y,z,rx,ry,rz' (metres, rotation vector); default: tool0")
    p.add_argument("--frame", choices=("base_link", "base"), default="base_link",
                   help="frame of the pose: base_link (ROS/URDF) or base (controller / ur_rtde); default base_link")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def register(sub) -> None:
    grp = add_group(sub, "kinematics", "UR arm kinematics: forward, inverse (all 8 branches), URDF generation")
    fk = grp.add_parser("fk", help="pose of tool0 / TCP for 6 joint angles (radians)",
                        description="Forward kinematics: print the pose for joint angles q1..q6 in radians.",
                        epilog=_EPILOG_FK, formatter_class=argparse.RawDescriptionHelpFormatter)
    fk.add_argument("q", nargs=6, type=float, metavar="Q",
                    help="joint angles q1..q6 (radians, within the joint limits: UR5 +/- 2 pi, elbow q3 +/- pi)")
    _arm_options(fk)
    fk.set_defaults(func=_fk)

    ik = grp.add_parser("ik", help="all joint solutions for a pose x y z rx ry rz (metres, rotation vector)",
                        description="Inverse kinematics: every closed-form solution (up to 8) for a UR pose "
                                    "[x, y, z, rx, ry, rz] (metres; rotation vector in radians, UR's convention).",
                        epilog=_EPILOG_IK, formatter_class=argparse.RawDescriptionHelpFormatter)
    ik.add_argument("pose", nargs=6, type=float, metavar="P", help="x y z (m) rx ry rz (rotation vector, rad)")
    ik.add_argument("--near", nargs=6, type=float, metavar="Q",
                    help="print only the solution nearest these joint angles (radians), trying +/- 2 pi per joint")
    ik.add_argument("--q6", type=float, default=0.0, help="q6 to use at the wrist singularity (radians, default 0)")
    _arm_options(ik)
    ik.set_defaults(func=_ik)

    ur = grp.add_parser("urdf", help="write a URDF whose chain reproduces a D-H table",
                        description="Generate a UR URDF (optionally with the 2-finger gripper and its tcp link).",
                        epilog=_EPILOG_URDF, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ur.add_mutually_exclusive_group()
    g.add_argument("--model", default="ur5", help="UR model preset (default: ur5)")
    g.add_argument("--params", type=Path, help="kinematics YAML (D-H table or default_kinematics.yaml)")
    ur.add_argument("--gripper", action="store_true", help="attach the Robotiq-like 2-finger gripper with a tcp link")
    ur.add_argument("-o", "--out", type=Path, help="output file (default: print to stdout)")
    ur.add_argument("--shipped", action="store_true", help="rewrite the repository's urdf/ur5.urdf, ur5_gripper.urdf, table.urdf")
    ur.set_defaults(func=_urdf)


def _params(args):
    from embeval.kinematics import DHParams, preset

    return DHParams.from_yaml(args.params) if args.params else preset(args.model)


def _arm(args):
    import numpy as np

    from embeval.errors import ConfigError
    from embeval.kinematics import UR, gripper_tcp, tcp_from_pose

    tool = None
    if args.tool == "gripper":
        tool = gripper_tcp()
    elif args.tool:
        try:
            vals = [float(v) for v in args.tool.split(",")]
        except ValueError as exc:
            raise ConfigError(f"--tool must be 'gripper' or 6 comma-separated numbers, got {args.tool!r}") from exc
        if len(vals) != 6:
            raise ConfigError(f"--tool needs x,y,z,rx,ry,rz (6 numbers), got {len(vals)}")
        tool = tcp_from_pose(np.array(vals))
    return UR(_params(args), tool=tool)


def _fk(args) -> int:
    import numpy as np

    from embeval.kinematics import matrix_to_pose, matrix_to_quat

    arm = _arm(args)
    arm.limits.check(args.q, f"joints ({arm.params.name})")  # as IK: no configuration outside the limits
    T = arm.fk(np.array(args.q), frame=args.frame)
    pose = matrix_to_pose(T)
    sing = arm.singularity(np.array(args.q))
    out = {
        "frame": args.frame, "model": arm.params.name, "q": list(args.q),
        "pose_xyz_rotvec": pose.round(6).tolist(), "quat_xyzw": matrix_to_quat(T[:3, :3]).round(6).tolist(),
        "matrix": T.round(6).tolist(), "near_singularities": sing.names(tol=1e-3),
    }
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{arm.params.name} {'TCP' if arm.tool is not None else 'tool0'} in {args.frame}")
    print("  xyz (m)          " + "  ".join(f"{v: .6f}" for v in pose[:3]))
    print("  rotvec (rad)     " + "  ".join(f"{v: .6f}" for v in pose[3:]))
    print("  quat xyzw        " + "  ".join(f"{v: .6f}" for v in out["quat_xyzw"]))
    print("  matrix\n" + "\n".join("    " + "  ".join(f"{v: .6f}" for v in row) for row in T))
    if out["near_singularities"]:
        print("  near singularities: " + ", ".join(out["near_singularities"]))
    return 0


def _ik(args) -> int:
    import numpy as np

    from embeval.kinematics import BRANCHES, pose_error, pose_to_matrix

    from embeval_cli._util import finite

    finite(args.q6, "--q6")
    if args.near is not None:
        finite(args.near, "--near")
    arm = _arm(args)
    T = pose_to_matrix(np.array(args.pose))
    Q, valid = arm.ik_batch(T[None], frame=args.frame, q6_preference=args.q6)
    rows = []
    for slot in np.flatnonzero(valid[0]):
        q = Q[0, slot]
        dp, dr = pose_error(arm.fk(q, frame=args.frame), T)
        rows.append({"branch": "shoulder{} wrist{} elbow{}".format(*BRANCHES[slot]), "q": q, "err_m": float(dp), "err_rad": float(dr)})
    if args.near is not None:
        best = arm.ik_closest(T, np.array(args.near), frame=args.frame)
        rows = []
        if best is not None:
            dp, dr = pose_error(arm.fk(best, frame=args.frame), T)
            rows = [{"branch": "closest", "q": best, "err_m": float(dp), "err_rad": float(dr)}]
    if args.json:
        print(json.dumps([{**r, "q": np.asarray(r["q"]).round(9).tolist()} for r in rows]))
        return 0 if rows else 1
    if not rows:
        print(f"unreachable: no joint solution for pose {args.pose} in {args.frame} ({arm.params.name})")
        return 1
    print(f"{len(rows)} solution(s), {arm.params.name}, pose in {args.frame}; joints in radians")
    print(f"  {'branch':30s} " + " ".join(f"{f'q{i + 1}':>9s}" for i in range(6)) + "   fk err (m / rad)")
    for r in rows:
        print(f"  {r['branch']:30s} " + " ".join(f"{v:9.5f}" for v in r["q"]) + f"   {r['err_m']:.1e} / {r['err_rad']:.1e}")
    return 0


def _urdf(args) -> int:
    from embeval.kinematics.urdf import ur_urdf, write_shipped

    if args.shipped:
        for path in write_shipped():
            print(f"wrote {path}")
        return 0
    text = ur_urdf(_params(args), gripper=args.gripper)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0
