"""distractors: extra objects (blocks and cans of colours the task's objects do not have) placed on the table clear
of every object, of the task's goal and of the straight path between the task's target and its reference or goal,
so the task stays solvable. The count is the level's; a scene with no room for them is refused in one line.
One seed places the same objects at every level (a higher level adds to the lower one's)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from embeval.errors import NotApplicableError
from embeval.sim.perturb.axis import Axis, Quantity

COUNT = Quantity("extra objects", "objects", ((1, 1), (2, 2), (3, 3), (4, 5), (6, 7)))
#: where distractors go (m, frame base): the task area, a little wider, in view of the third-person camera
AREA = ((0.32, 0.72), (-0.34, 0.34))
CLEARANCE = 0.05  # m between a distractor's footprint and any object's (room for the open fingers)
PATH_CLEARANCE = 0.06  # m between a distractor's footprint and the target's path to its goal
RADIUS = 0.03  # m, a distractor's footprint radius
ROBOT_CLEARANCE = 0.25  # m from the robot base's axis
BLOCK = (0.03, 0.05, 0.03)  # m, a block's size (x, y, z)
CAN = (0.02, 0.05)  # m, a can's radius and height
#: footprint radius (m) of object kinds whose spec leaves ``size`` empty (their builders' defaults)
_DEFAULT_RADIUS = {"box": 0.03, "cylinder": 0.022, "plate": 0.06, "bowl": 0.05, "cup": 0.035, "button": 0.06,
                   "drawer": 0.13, "marker": 0.035, "peg": 0.015, "hole": 0.065, "knob": 0.03, "card": 0.05}


def footprint(o) -> float:
    """An object's footprint radius on the table (m), from its spec."""
    s = o.size
    if o.kind in ("box", "card", "peg", "drawer") and len(s) >= 2:
        return 0.5 * float(np.hypot(s[0], s[1]))
    if o.kind == "hole" and s:
        return float(s[0]) / np.sqrt(2.0)
    if o.kind == "button" and s:
        return 0.5 * float(s[0]) * np.sqrt(2.0)
    if s:
        return float(s[0])
    return _DEFAULT_RADIUS.get(o.kind, 0.06)


def _segment_distance(p, a, b) -> float:
    p, a, b = (np.asarray(v, float) for v in (p, a, b))
    ab = b - a
    t = 0.0 if not ab.any() else float(np.clip((p - a) @ ab / (ab @ ab), 0.0, 1.0))
    return float(np.linalg.norm(p - (a + t * ab)))


def _keep_clear(scene, task) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Segments (a, b, radius) a distractor must stay clear of: every object, the goal, the target's path."""
    segs = [(np.array(o.xy), np.array(o.xy), footprint(o) + CLEARANCE) for o in scene.objects]
    if task is not None:
        names = {o.name: o for o in scene.objects}
        t = names.get(task.target)
        ends = [np.array(task.goal[:2])] if len(task.goal) >= 2 else []
        if task.reference in names:
            ends.append(np.array(names[task.reference].xy))
        for end in ends:
            segs.append((end, end, task.tolerance + CLEARANCE))
            if t is not None:
                segs.append((np.array(t.xy), end, footprint(t) + PATH_CLEARANCE))
    segs.append((np.zeros(2), np.zeros(2), ROBOT_CLEARANCE))  # the robot base
    return segs


def nearest_color(rgb) -> str:
    """The colour name of :data:`embeval.sim.scene.COLORS` nearest ``rgb`` (0..1; Euclidean in RGB)."""
    from embeval.sim.scene import COLORS

    c = np.asarray(rgb, dtype=np.float64)[:3]
    return min(COLORS, key=lambda n: float(np.sum((np.asarray(COLORS[n][:3]) - c) ** 2)))


def place(rng, level: int, clear, used: set[str], area=AREA, where: str = "this scene") -> dict:
    """The level's distractors (kind, colour not in ``used``, place, yaw; seeded) inside ``area`` ((x0, x1), (y0, y1)
    m) clear of the segments ``clear`` ([(a, b, radius)], m); the same draws at every level. A one-line
    :class:`~embeval.errors.NotApplicableError` (a ConfigError) when fewer fit than the level asks."""
    from embeval.sim.scene_generators import pick_color

    n_max = int(COUNT.range(len(COUNT.ranges))[1])
    u = rng.uniform()
    n = round(COUNT.magnitude(level, u))
    clear, used = list(clear), set(used)
    placed: list[dict] = []
    (x0, x1), (y0, y1) = area
    for i in range(n_max):  # the same draws at every level: level n keeps the first n
        kind = "block" if rng.uniform() < 0.5 else "can"
        color = pick_color(rng, used) if len(used) < 6 else str(rng.choice(["white", "black"]))
        yaw = float(rng.uniform(-1.0, 1.0))
        spot = None
        for _ in range(400):
            xy = np.array([rng.uniform(x0, x1), rng.uniform(y0, y1)])
            if all(_segment_distance(xy, a, b) >= r + RADIUS for a, b, r in clear):
                spot = xy
                break
        if spot is None:
            break
        clear.append((spot, spot, RADIUS + CLEARANCE))
        placed.append({"kind": kind, "color": color, "xy": [round(float(v), 4) for v in spot], "yaw": round(yaw, 4)})
    if len(placed) < n:
        raise NotApplicableError(f"distractors:{level}: {where} has room for {len(placed)} distractor(s) clear of "
                          f"the task's objects and path, not {n}; the task would not stay solvable (use a lower level)")
    return {"count": n, "objects": placed[:n]}


def sample(rng, level, scene, task):
    used = {o.color_name for o in scene.objects if o.color_name}
    return place(rng, level, _keep_clear(scene, task), used, AREA, f"scene {scene.name!r}")


def apply(scene, task, params):
    from embeval.sim.scene import COLORS, ObjectSpec

    extra = []
    for i, d in enumerate(params["objects"]):
        c = d["color"]
        if d["kind"] == "block":
            extra.append(ObjectSpec(name=f"perturb_distractor{i}", kind="box", position=tuple(d["xy"]), yaw=d["yaw"],
                                    size=BLOCK, color=COLORS[c], color_name=c, category="block", mass=0.05))
        else:
            extra.append(ObjectSpec(name=f"perturb_distractor{i}", kind="cylinder", position=tuple(d["xy"]),
                                    size=CAN, color=COLORS[c], color_name=c, category="can", mass=0.05))
    return replace(scene, objects=[*scene.objects, *extra]), task


AXIS = Axis("distractors", (COUNT,), sample, scene=apply, changes="state",
            description="extra blocks and cans placed clear of the task's objects, goal and path (kind, colour, place seeded)",
            direction="number of objects on the table",
            note=lambda p: f"+{p['count']} objects")
