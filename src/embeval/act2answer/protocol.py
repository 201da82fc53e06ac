"""The Act2Answer reference protocol: the cube starts in the gripper, the board rule, intent metrics.

The Act2Answer authors' harness (``Act2AnswerV4-v1``) starts every episode with the cube already held
by the gripper and forces the gripper channel closed for the first ``init_grasp_steps + hold_cube_steps``
(10 + 15) policy steps while the arm follows the policy, so the measurement is the choice of card,
not the grasp. An :class:`~embeval.act2answer.scene.EpisodeSpec` names the start (``start``:
:data:`STARTS`), the held steps (``hold_steps``) and the success rule (``rule``: :data:`RULES`):

- ``board`` (the reference's): the cube centre lies within a card's extent grown by ``board_margin``
  in x and in y (an axis-aligned square, metres, frame base), and not below the card's top by more than
  1 cm less half the cube (:func:`board_answer`); ``is_answered``: on either card;
- ``disc`` (the paper's text, embeval's earlier rule): within ``eps`` of a card's centre
  (:func:`embeval.act2answer.zones.classify`).

:class:`IntentTracker` follows the TCP every step and reports the reference's intent metrics (dwell
over the correct card, first card entered, minimum distances, time on the correct side, progress,
release near the target). Everything here is pure arithmetic on positions: no simulator import.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from embeval.act2answer.zones import ZoneResult, classify

#: how the cube starts: ``grasped`` (in the closed gripper at the policy's first step, the reference's)
#: or ``table`` (resting at ``cube_xy``: the policy must pick it up)
STARTS = ("grasped", "table")
#: success rules: ``board`` (card extent + margin, the reference's) and ``disc`` (radius ``eps``)
RULES = ("board", "disc")
#: the reference's ``init_grasp_steps + hold_cube_steps`` (policy steps with the gripper forced closed)
REFERENCE_HOLD_STEPS = 10 + 15
#: the reference's ``episode_len`` (policy steps at 5 Hz)
REFERENCE_EPISODE_STEPS = 80
#: the reference's ``margin_xy`` (m)
REFERENCE_MARGIN = 0.08
#: height of a card's top above the table (m, frame base): the cells' cards are 3 mm slabs
CARD_TOP_M = 0.003
#: the TCP counts as over a card when this much (m) above its top (the reference's ``tcp_z_margin``)
TCP_Z_MARGIN = 0.02
#: m: a TCP within this of the line halfway between the cards is on neither side (and equally close to both)
SIDE_DEADBAND = 0.001
#: dwell that counts as intent (s; the reference's ``tcp_dwell_target_3s``)
DWELL_S = 3.0


def check_boards_apart(left_xy: Sequence[float], right_xy: Sequence[float], card_size: float, margin: float) -> None:
    """A ConfigError when the two cards' grown extents (edge ``card_size + 2 * margin``) overlap: a cube
    between them would answer both cards."""
    from embeval.errors import ConfigError

    reach = card_size / 2 + margin
    gap = max(abs(left_xy[0] - right_xy[0]), abs(left_xy[1] - right_xy[1]))
    if not margin >= 0 or 2 * reach >= gap:
        raise ConfigError(f"episode spec board_margin={margin} m: the cards' grown extents (half-edge {reach:.3f} m) "
                          f"overlap (centres {gap:.3f} m apart on the separating axis); give a board_margin below "
                          f"{max(gap / 2 - card_size / 2, 0):.3f} m")


def on_board(cube_xyz: Sequence[float], card_xy: Sequence[float], card_size: float, margin: float,
             cube_size: float) -> bool:
    """Whether a cube centred at ``cube_xyz`` (m, frame base; a 2-vector: resting on the table) counts as on the
    card centred at ``card_xy`` under the board rule."""
    reach = card_size / 2 + margin
    on_xy = abs(cube_xyz[0] - card_xy[0]) <= reach and abs(cube_xyz[1] - card_xy[1]) <= reach
    above = len(cube_xyz) < 3 or cube_xyz[2] >= CARD_TOP_M + cube_size / 2 - 0.01
    return bool(on_xy and above)


def board_answer(cube_xyz: Sequence[float], spec, correct_side: str) -> ZoneResult:
    """The board rule's zone of a cube at ``cube_xyz`` (``spec``: an EpisodeSpec): ``correct`` on the correct
    card, ``incorrect`` on the other, else ``out_of_bounds``; distances are to the card centres (m)."""
    d_left = math.dist(cube_xyz[:2], spec.left_card_xy)
    d_right = math.dist(cube_xyz[:2], spec.right_card_xy)
    on = {s: on_board(cube_xyz, spec.card_xy(s), spec.card_size, spec.board_margin, spec.cube_size)
          for s in ("left", "right")}
    other = "right" if correct_side == "left" else "left"
    choice = correct_side if on[correct_side] else other if on[other] else None
    zone = "out_of_bounds" if choice is None else "correct" if choice == correct_side else "incorrect"
    d_c, d_i = (d_left, d_right) if correct_side == "left" else (d_right, d_left)
    return ZoneResult(zone, choice, d_c, d_i)


@dataclass(frozen=True)
class Answer:
    """Both rules' reading of where the cube ended: ``zone``/``choice`` are the rule in force's."""

    zone: str
    choice: str | None
    distance_correct: float
    success_board: float
    success_disc: float
    is_answered: bool  # the cube on either card under the board rule


def answer(cube_xyz: Sequence[float], spec, correct_side: str) -> Answer:
    """Read the end position ``cube_xyz`` (m, frame base) under both rules; the zone is ``spec.rule``'s."""
    disc = classify(cube_xyz[:2], spec.left_card_xy, spec.right_card_xy, correct_side, spec.eps)
    board = board_answer(cube_xyz, spec, correct_side)
    z = board if spec.rule == "board" else disc
    return Answer(z.zone, z.choice, z.distance_correct, 1.0 if board.zone == "correct" else 0.0,
                  1.0 if disc.zone == "correct" else 0.0, board.choice is not None)


def intent_from_dict(d: Any) -> dict[str, Any]:
    """The intent metrics in ``d`` (e.g. an event another process sent): only :meth:`IntentTracker.metrics`'s keys
    with a boolean, finite number or None value; anything else is dropped."""
    if not isinstance(d, dict):
        return {}
    keys = IntentTracker.KEYS
    return {k: v for k, v in d.items() if k in keys and (v is None or isinstance(v, bool)
                                                          or (isinstance(v, (int, float)) and math.isfinite(v)))}


class IntentTracker:
    """The reference's TCP intent metrics of one episode (frame base, metres; steps are policy steps).

    ``update(tcp_xyz, holding)`` after every executed step (``holding``: the gripper holds the cube);
    :meth:`metrics` at the end. Over a card: the TCP inside the card's grown extent (board rule) and at
    least :data:`TCP_Z_MARGIN` above its top. Correct side: the TCP on the correct card's side of the
    line halfway between the cards. ``control_hz``: policy steps per second (for the 3 s dwell)."""

    KEYS = frozenset({"tcp_dwell_target_steps", "tcp_dwell_target_consec_max", "tcp_dwell_target_3s",
                      "tcp_first_enter_target_t", "tcp_first_enter_wrong_t", "tcp_first_choice_correct",
                      "tcp_min_dist_target_xy", "tcp_min_dist_wrong_xy", "tcp_closer_to_target_than_wrong",
                      "tcp_correct_side_frac", "tcp_vel_align_mean", "tcp_vel_align_pos_frac", "tcp_progress_frac",
                      "tcp_net_progress", "release_near_target", "released"})  #: the names :meth:`metrics` returns

    def __init__(self, spec, correct_side: str, control_hz: float):
        self.spec, self.correct = spec, correct_side
        self.wrong = "right" if correct_side == "left" else "left"
        self.dwell_steps_needed = max(1, int(round(DWELL_S * float(control_hz))))
        self.t = 0
        self.dwell = self.consec = self.consec_max = 0
        self.first_target: int | None = None
        self.first_wrong: int | None = None
        self.min_target = self.min_wrong = math.inf
        self.side_steps = 0
        self.prev_xy: tuple[float, float] | None = None
        self.prev_d: float | None = None
        self.d0: float | None = None
        self.vel_sum, self.vel_pos, self.vel_n = 0.0, 0, 0
        self.prog, self.prog_n = 0, 0
        self.was_holding: bool | None = None
        self.release_near: bool | None = None  # None: never released

    def _over(self, tcp, side: str) -> bool:
        s = self.spec
        return on_board(tcp[:2], s.card_xy(side), s.card_size, s.board_margin, s.cube_size) and \
            tcp[2] >= CARD_TOP_M + TCP_Z_MARGIN

    def update(self, tcp_xyz: Sequence[float], holding: bool) -> None:
        tcp = [float(v) for v in tcp_xyz[:3]]
        self.t += 1
        s = self.spec
        tx, ty = s.card_xy(self.correct)
        over = self._over(tcp, self.correct)
        if over:
            self.dwell += 1
            self.consec += 1
            self.consec_max = max(self.consec_max, self.consec)
        else:
            self.consec = 0
        if over and self.first_target is None:
            self.first_target = self.t
        if self._over(tcp, self.wrong) and self.first_wrong is None:
            self.first_wrong = self.t
        d_t = math.dist(tcp[:2], (tx, ty))
        self.min_target = min(self.min_target, d_t)
        self.min_wrong = min(self.min_wrong, math.dist(tcp[:2], s.card_xy(self.wrong)))
        mid = [(a + b) / 2 for a, b in zip(s.left_card_xy, s.right_card_xy)]
        axis = [a - m for a, m in zip((tx, ty), mid)]
        if (tcp[0] - mid[0]) * axis[0] + (tcp[1] - mid[1]) * axis[1] > SIDE_DEADBAND * math.hypot(*axis):
            self.side_steps += 1
        if self.prev_xy is not None:
            v = (tcp[0] - self.prev_xy[0], tcp[1] - self.prev_xy[1])
            n = math.hypot(tx - tcp[0], ty - tcp[1]) + 1e-8
            along = (v[0] * (tx - tcp[0]) + v[1] * (ty - tcp[1])) / n
            self.vel_sum += along
            self.vel_n += 1
            self.vel_pos += along > 0
        if self.d0 is None:
            self.d0 = d_t
        if self.prev_d is not None:
            self.prog_n += 1
            self.prog += d_t < self.prev_d
        self.prev_xy, self.prev_d = (tcp[0], tcp[1]), d_t
        if self.was_holding and not holding and self.release_near is None:
            self.release_near = over
        self.was_holding = bool(holding)

    def metrics(self) -> dict[str, Any]:
        """The metrics (steps counted from 1; ``None``: never happened; distances m, rounded to 0.1 mm)."""
        ft, fw = self.first_target, self.first_wrong
        entered = ft is not None or fw is not None
        r = lambda v: None if v is None or not math.isfinite(v) else round(float(v), 4)  # noqa: E731
        return {
            "tcp_dwell_target_steps": self.dwell, "tcp_dwell_target_consec_max": self.consec_max,
            "tcp_dwell_target_3s": bool(max(self.dwell, self.consec_max) >= self.dwell_steps_needed),
            "tcp_first_enter_target_t": ft, "tcp_first_enter_wrong_t": fw,
            "tcp_first_choice_correct": bool(entered and ft is not None and (fw is None or ft < fw)),
            "tcp_min_dist_target_xy": r(self.min_target), "tcp_min_dist_wrong_xy": r(self.min_wrong),
            "tcp_closer_to_target_than_wrong": bool(self.min_target < self.min_wrong - SIDE_DEADBAND),
            "tcp_correct_side_frac": round(self.side_steps / max(self.t, 1), 4),
            "tcp_vel_align_mean": round(self.vel_sum / max(self.vel_n, 1), 5),
            "tcp_vel_align_pos_frac": round(self.vel_pos / max(self.vel_n, 1), 4),
            "tcp_progress_frac": round(self.prog / max(self.prog_n, 1), 4),
            "tcp_net_progress": r(max(0.0, self.d0 - self.min_target) if self.d0 is not None else None),
            "release_near_target": bool(self.release_near),
            "released": self.release_near is not None,
        }


def held_action(vector: Sequence[float], step: int, spec) -> list[float] | None:
    """The 7-DoF action to execute at policy step ``step`` (0-based) instead of ``vector``: the gripper
    channel forced closed (0.0) while a grasped-start episode is in its first ``spec.hold_steps``
    steps; None when the policy's own action runs."""
    if spec.start != "grasped" or step >= spec.hold_steps or float(vector[6]) < 0.5:
        return None
    return [float(v) for v in vector[:6]] + [0.0]
