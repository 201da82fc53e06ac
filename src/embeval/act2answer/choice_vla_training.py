"""VLM -> VLA, as the field does it: the two-card VLM's backbone plus an action expert, fine-tuned on action data only.

Data (:func:`record_answer_demos`, :func:`record_pickplace_demos`): the privileged scripted expert
carrying the cube to the correct card on *training* items of a few knowledge categories (seed stream
:data:`DEMO_STREAM`, disjoint from the evaluation suite's ``"act2answer-item"`` and from the VLM's
``"act2answer-vlm-train"``), both layouts, plus ordinary Pick/Place demonstrations in generated
scenes (no cards). Observations are rendered at the policy's declared size; each episode keeps the
card crops of its first observation (the policy's cached prefix) and every frame its scene view,
state and the expert's 7-DoF delta.

Recipes (:class:`~embeval.subjects.embedded.choice_vla.ChoiceVLARecipe` ``mode``): ``frozen``
(stop-gradient into the VLM parts), ``full`` (every weight trains on the action loss) and
``cotrain`` (full plus the VLM's answer loss). The gated variants
(:data:`~embeval.subjects.embedded.population.A2A_VLA_VARIANTS`) train the same way on the same data; only
their control pathway differs (``arch``: no direct instruction input, answer features read once the cube is held).
Loss: MSE on the normalised deltas + BCE on the
gripper (as :func:`embeval.subjects.embedded.training.train_vla`, frames where the gripper command
switches weighted up). Deterministic for a seed (one torch thread, deterministic algorithms).
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from embeval.act2answer.items import BinaryItem
from embeval.act2answer.scene import EpisodeSpec
from embeval.errors import InvalidInputError
from embeval.subjects.embedded.choice_vla import (
    ChoiceVLAConfig,
    ChoiceVLAPolicy,
    ChoiceVLARecipe,
)

#: seed stream of the answer demonstrations' items
DEMO_STREAM = "act2answer-vla-train"
#: seed stream of the side-named placements' items (cards of every category, side named by the instruction)
SIDE_STREAM = "act2answer-vla-side"
#: instruction of a side-named placement
SIDE_INSTRUCTION = "put the cube on the {side} picture"


@dataclass
class ChoiceDemos:
    """Per episode: ``left``/``right`` (E, S, S, 3) uint8 card crops of the first observation,
    ``task`` (E,) index into ``tasks``, ``kind`` (E,) 0 = answer demo, 1 = pick/place, 2 = side-named
    placement; per frame:
    ``scene`` (N, h, w, 3) uint8, ``state`` (N, D) float32, ``action`` (N, 7), ``episode`` (N,)."""

    left: np.ndarray
    right: np.ndarray
    task: np.ndarray
    tasks: list[str]
    kind: np.ndarray
    scene: np.ndarray
    state: np.ndarray
    action: np.ndarray
    episode: np.ndarray

    def __len__(self) -> int:
        return len(self.action)

    def save(self, path: Path) -> Path:
        np.savez(path, left=self.left, right=self.right, task=self.task, tasks=np.array(self.tasks), kind=self.kind,
                 scene=self.scene, state=self.state, action=self.action, episode=self.episode)
        return path

    @classmethod
    def load(cls, path: Path) -> ChoiceDemos:
        with np.load(path) as z:
            return cls(z["left"], z["right"], z["task"], [str(t) for t in z["tasks"]], z["kind"], z["scene"], z["state"],
                       z["action"], z["episode"])

    def demonstrated_side(self, card_xy: Sequence[Sequence[float]], tol: float) -> np.ndarray:
        """(E,) int64 per episode: the card the demonstration carries the cube to, 0 = ``card_xy[0]`` (left),
        1 = right, -1 for pick/place episodes (no cards). Read from the TCP position (metres, frame base) of
        each episode's last frame, which must lie within ``tol`` metres of a card centre (the suite's zone rule,
        :func:`~embeval.act2answer.zones.classify`, with ``eps = tol``)."""
        from embeval.act2answer.zones import classify

        if np.bincount(self.episode, minlength=len(self.left)).min(initial=1) == 0:
            raise InvalidInputError("a demonstration episode has no frames; record the demonstrations again")
        ends = np.zeros(len(self.left), dtype=np.int64)
        np.maximum.at(ends, self.episode, np.arange(len(self.episode)))
        out = np.full(len(self.left), -1, dtype=np.int64)
        far = []
        for e in np.nonzero(self.kind != 1)[0]:  # pick/place episodes have no cards
            z = classify(self.state[ends[e], :2], card_xy[0], card_xy[1], "left", tol)
            if z.choice is None:  # off both cards (NaN positions too)
                far.append((int(e), min(z.distance_correct, z.distance_incorrect)))
            else:
                out[e] = 0 if z.choice == "left" else 1
        if far:
            e, d = far[0]
            raise InvalidInputError(f"{len(far)} card demonstrations end {d:.3f} m or more from both card centres "
                                    f"(episode {e}, allowed {tol} m); record the demonstrations again")
        return out

    @classmethod
    def concat(cls, parts: Sequence[ChoiceDemos]) -> ChoiceDemos:
        tasks: list[str] = []
        out = {k: [] for k in ("left", "right", "task", "kind", "scene", "state", "action", "episode")}
        ne = 0
        for p in parts:
            remap = []
            for t in p.tasks:
                if t not in tasks:
                    tasks.append(t)
                remap.append(tasks.index(t))
            for k in ("left", "right", "kind", "scene", "state", "action"):
                out[k].append(getattr(p, k))
            out["task"].append(np.asarray(remap, dtype=np.int64)[p.task])
            out["episode"].append(p.episode + ne)
            ne += len(p.left)
        return cls(*(np.concatenate(out[k]) for k in ("left", "right", "task")), tasks,
                   *(np.concatenate(out[k]) for k in ("kind", "scene", "state", "action", "episode")))


class _Recorder:
    def __init__(self, cfg: ChoiceVLAConfig):
        from embeval.subjects.embedded.card_crop import PinholeCamera

        self.camera = PinholeCamera.from_dict(cfg.camera)
        self.cfg = cfg
        self.ep: dict[str, list] = {"left": [], "right": [], "task": [], "kind": []}
        self.fr: dict[str, list] = {"scene": [], "state": [], "action": [], "episode": []}
        self.tasks: list[str] = []

    def episode(self, obs, instruction: str, kind: int, frames) -> None:
        from embeval.subjects.embedded.choice_vla import SCENE_CAMERA, card_crops

        if instruction not in self.tasks:
            self.tasks.append(instruction)
        left, right = card_crops(self.cfg, obs.images[SCENE_CAMERA], self.camera)
        e = len(self.ep["left"])
        self.ep["left"].append(left)
        self.ep["right"].append(right)
        self.ep["task"].append(self.tasks.index(instruction))
        self.ep["kind"].append(kind)
        for scene, state, action in frames:
            self.fr["scene"].append(scene)
            self.fr["state"].append(state)
            self.fr["action"].append(action)
            self.fr["episode"].append(e)

    def frame(self, obs, action):
        from embeval.subjects.embedded.choice_vla import SCENE_CAMERA, scene_view
        from embeval.subjects.embedded.preprocess import state_vector

        return (scene_view(self.cfg, obs.images[SCENE_CAMERA]), state_vector(obs.state, self.cfg.state_keys),
                np.asarray(action.vector, dtype=np.float64).copy())

    def result(self) -> ChoiceDemos:
        if not self.ep["left"]:
            raise InvalidInputError("no successful demonstration episode was recorded")
        return ChoiceDemos(np.stack(self.ep["left"]), np.stack(self.ep["right"]), np.array(self.ep["task"], dtype=np.int64),
                           self.tasks, np.array(self.ep["kind"], dtype=np.int64), np.stack(self.fr["scene"]),
                           np.stack(self.fr["state"]).astype(np.float32), np.stack(self.fr["action"]),
                           np.array(self.fr["episode"], dtype=np.int64))


def _env(cfg: ChoiceVLAConfig):
    from embeval.act2answer.episode import render_only, sim_config
    from embeval.sim import SimEnv

    h, w = cfg.image_size
    env = SimEnv(sim_config(w, h))
    render_only(env, tuple(cfg.cameras))
    return env


def record_answer_demos(items: Iterable[BinaryItem], cfg: ChoiceVLAConfig, spec: EpisodeSpec | None = None, seed: int = 0,
                        max_steps: int = 30, sides: Sequence[str] | None = None) -> ChoiceDemos:
    """The scripted expert putting the cube on the correct card of every item, both layouts
    (successful episodes only; each ends at the release after the lift). With ``sides`` (one per
    item x layout, "left"/"right"): ordinary placements on that card instead, instructed
    :data:`SIDE_INSTRUCTION` (the item's answer plays no part)."""
    from embeval.act2answer.episode import Termination, grasp_in_hand, held
    from embeval.act2answer.reference_policies import ExpertPolicy
    from embeval.act2answer.scene import build_scene
    from embeval.provenance import derive_seed

    spec = spec or EpisodeSpec()
    lift_rule = replace(spec, termination="release_after_lift")
    rec = _Recorder(cfg)
    with _env(cfg) as env:
        k = 0
        for item in items:
            for layout in ("original", "swapped"):
                scene, task = build_scene(item, layout, spec)
                if sides is not None:
                    side = sides[k]
                    task = replace(task, instruction=SIDE_INSTRUCTION.format(side=side), goal=spec.card_xy(side))
                k += 1
                expert = ExpertPolicy(env, "answer", spec)
                obs0 = obs = env.reset(derive_seed(seed, "choice-vla-demo", item.id, layout), task, scene)
                if spec.start == "grasped":
                    obs0 = obs = grasp_in_hand(env)
                expert.reset(task.instruction)
                frames, rule = [], Termination(lift_rule, float(env.cell.object_pose("cube")[0][2]),
                                               lifted=spec.start == "grasped")
                for _ in range(max_steps):
                    a = expert.act(obs)
                    frames.append(rec.frame(obs, a))
                    obs = env.step(held(a, len(frames) - 1, spec)).observation
                    if rule.update(float(env.cell.object_pose("cube")[0][2]), env.cell.gripper):
                        break
                pos = env.cell.object_pose("cube")[0]
                if np.hypot(pos[0] - task.goal[0], pos[1] - task.goal[1]) <= spec.eps:
                    rec.episode(obs0, task.instruction, 0 if sides is None else 2, frames)
    return rec.result()


def record_pickplace_demos(n: int, cfg: ChoiceVLAConfig, seed: int = 0, verbs: Sequence[str] = ("Pick", "Place"),
                           max_steps: int = 40) -> ChoiceDemos:
    """``n`` ordinary expert episodes (verbs in turn, scenes generated from seeds ``derive_seed(seed,
    "choice-vla-pickplace", k)``), successful ones only."""
    from embeval.provenance import derive_seed

    rec = _Recorder(cfg)
    with _env(cfg) as env:
        for k in range(n):
            obs0 = obs = env.reset(derive_seed(seed, "choice-vla-pickplace", k), verbs[k % len(verbs)])
            expert = env.expert()
            frames = []
            for _ in range(max_steps):
                a = expert.act(obs)
                frames.append(rec.frame(obs, a))
                res = env.step(a)
                obs = res.observation
                if res.done:
                    break
            if env.success():
                rec.episode(obs0, env.task.instruction, 1, frames)
    return rec.result()


def demo_items(recipe: ChoiceVLARecipe, folder: Path) -> list[BinaryItem]:
    from embeval.act2answer.generator import generate_items

    return generate_items(folder, recipe.demo_categories, recipe.demo_items, recipe.seed, stream=DEMO_STREAM)


def side_demos(recipe: ChoiceVLARecipe, cfg: ChoiceVLAConfig, work: Path) -> ChoiceDemos:
    """Side-named placements on cards of every category (``recipe.side_items`` per category, both
    layouts, the side drawn from ``derive_seed(seed, "choice-vla-side")``)."""
    from embeval.act2answer.generator import generate_items
    from embeval.provenance import derive_seed

    items = generate_items(work / f"choice-vla-side-items-{recipe.seed}", None, recipe.side_items, recipe.seed, stream=SIDE_STREAM)
    rng = np.random.default_rng(derive_seed(recipe.seed, "choice-vla-side"))
    sides = ["left" if b else "right" for b in rng.integers(0, 2, size=2 * len(items)) == 0]
    return record_answer_demos(items, cfg, recipe_spec(recipe), seed=recipe.seed, sides=sides)


def recipe_spec(recipe: ChoiceVLARecipe) -> EpisodeSpec:
    """The episode spec of the recipe's answer demonstrations and evaluation: the default (the reference protocol)
    for ``start: grasped``; the earlier protocol in full (table start, disc rule, 24 steps) for ``start: table``."""
    return EpisodeSpec() if recipe.start == "grasped" else EpisodeSpec(start="table", rule="disc", max_steps=24)


def recipe_demos(recipe: ChoiceVLARecipe, cfg: ChoiceVLAConfig, work: Path, log: Callable[[str], None] | None = None) -> ChoiceDemos:
    """The recipe's demonstrations, cached in ``work`` under a key of everything they depend on."""
    key = {"seed": recipe.seed, "cats": recipe.demo_categories, "items": recipe.demo_items,
           "pp": recipe.pickplace_episodes,
           # architecture-only fields do not change what is recorded (and keep earlier caches' keys)
           "cfg": {k: v for k, v in cfg.to_dict().items() if k not in ("vlm", "control_text", "answer_gate")}}
    if recipe.side_items:
        key["side"] = recipe.side_items
    if recipe.start != "table":  # a table start keeps the earlier caches' keys
        key["start"] = recipe.start
    key = json.dumps(key, sort_keys=True)
    path = work / f"choice-vla-demos-{hashlib.sha256(key.encode()).hexdigest()[:12]}.npz"
    if path.is_file():
        if log:
            log(f"reusing demonstrations {path}")
        return ChoiceDemos.load(path)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    parts = [record_answer_demos(demo_items(recipe, work / f"choice-vla-items-{recipe.seed}"), cfg, recipe_spec(recipe),
                                 seed=recipe.seed)]
    if recipe.pickplace_episodes > 0:
        parts.append(record_pickplace_demos(recipe.pickplace_episodes, cfg, seed=recipe.seed))
    if recipe.side_items > 0:
        parts.append(side_demos(recipe, cfg, work))
    demos = ChoiceDemos.concat(parts)
    if log:
        log(f"recorded {len(demos)} frames of {len(demos.left)} episodes ({int((demos.kind == 0).sum())} answer, "
            f"{int((demos.kind == 1).sum())} pick/place, {int((demos.kind == 2).sum())} side-named) in {time.perf_counter() - t0:.0f} s")
    demos.save(path)
    return demos


def train_choice_vla(demos: ChoiceDemos, vlm, cfg: ChoiceVLAConfig, recipe: ChoiceVLARecipe, train_cfg,
                     answer_data=None, log: Callable[[str], None] | None = None) -> tuple[ChoiceVLAPolicy, object]:
    """Initialise the VLM parts from ``vlm``, train per ``recipe.mode`` (see the module docstring).
    ``answer_data``: :class:`~embeval.act2answer.choice_training.ChoiceArrays` for ``cotrain``."""
    import torch
    import torch.nn.functional as F

    from embeval.subjects.embedded.choice_vla import build_net, init_from_vlm
    from embeval.subjects.embedded.training import (
        _loop,
        action_stats,
        deterministic,
        random_shift,
    )

    if len(demos) == 0:
        raise InvalidInputError("no demonstration frames to train the choice VLA on")
    with deterministic(recipe.seed, train_cfg.threads) as rng:
        enc = vlm._text
        cfg = replace(cfg, vlm=vlm.cfg.to_dict(), state_dim=int(demos.state.shape[1]))
        net = build_net(cfg)
        init_from_vlm(net, vlm)
        frozen = recipe.mode == "frozen"
        if frozen:
            for m in net.vlm_modules():
                m.requires_grad_(False)
        net.train()
        mean, std = action_stats(demos.action[:, :6])
        target = torch.from_numpy(((demos.action[:, :6] - mean) / std).astype(np.float32))
        grip = torch.from_numpy((np.asarray(demos.action)[:, 6] >= 0.5).astype(np.float32))
        switch = (grip.numpy() < 0.5) != (demos.state[:, -1] < 0.5)
        grip_w = torch.from_numpy(np.where(switch, train_cfg.gripper_switch_weight, 1.0).astype(np.float32))
        temb = torch.from_numpy(enc.encode(demos.tasks))
        ep_task = torch.from_numpy(demos.task)
        left = torch.from_numpy(demos.left).permute(0, 3, 1, 2).contiguous()
        right = torch.from_numpy(demos.right).permute(0, 3, 1, 2).contiguous()
        scene = torch.from_numpy(demos.scene)
        state = torch.from_numpy(demos.state)
        episode = torch.from_numpy(demos.episode)
        # teacher forcing: the card each demonstration carries to replaces the head's decision (recipe.teacher_side)
        ep_side = torch.from_numpy(demos.demonstrated_side(cfg.card_xy, cfg.card_size / 2)) if recipe.teacher_side else None
        cached = None
        if frozen:  # the VLM parts are constant: their prefix per episode once
            with torch.no_grad():
                t_ep = net.text_proj(temb[ep_task])
                cached = torch.cat([net.prefix(left[i:i + 256].float().div(255.0), right[i:i + 256].float().div(255.0),
                                               t_ep[i:i + 256]) for i in range(0, len(left), 256)])
        ans = None
        if recipe.mode == "cotrain":
            if answer_data is None:
                raise InvalidInputError("the cotrain recipe needs the VLM's answer items (answer_data)")
            from embeval.act2answer.choice_training import prompt_variants

            texts = [p for q in answer_data.questions for p in prompt_variants(q)] + list(answer_data.instructions)
            nv = 2
            ans = {"temb": torch.from_numpy(enc.encode(texts)), "nv": nv,
                   "left": torch.from_numpy(answer_data.left).permute(0, 3, 1, 2).contiguous(),
                   "right": torch.from_numpy(answer_data.right).permute(0, 3, 1, 2).contiguous(),
                   "q": torch.from_numpy(answer_data.question), "i": torch.from_numpy(answer_data.instruction),
                   "label": torch.from_numpy(answer_data.label), "nq": len(answer_data.questions)}

        def step_fn(idx):
            ii = torch.from_numpy(idx)
            ep = episode[ii]
            sc = random_shift(scene[ii].permute(0, 3, 1, 2).float().div_(255.0), train_cfg.shift_pixels, rng)
            t = net.text_proj(temb[ep_task[ep]])
            if cached is not None:
                p = cached[ep]
            else:
                p = net.prefix(left[ep].float().div_(255.0), right[ep].float().div_(255.0), t)
            out = net.expert(p, sc, t, state[ii], side=None if ep_side is None else ep_side[ep])
            loss = F.mse_loss(out[:, :6], target[ii]) + train_cfg.gripper_weight * F.binary_cross_entropy_with_logits(
                out[:, 6], grip[ii], weight=grip_w[ii])
            if ans is not None:  # the VLM's own answer loss, both layouts, question or instruction prompts
                jj = torch.from_numpy(rng.integers(0, len(ans["label"]), size=len(idx) // 2))
                k = torch.from_numpy(rng.integers(0, ans["nv"] + 1, size=len(jj)))
                ti = torch.where(k < ans["nv"], ans["q"][jj] * ans["nv"] + k.clamp(max=ans["nv"] - 1),
                                 ans["nv"] * ans["nq"] + ans["i"][jj])
                ta = net.text_proj(ans["temb"][ti])
                lf, rt = ans["left"][jj].float().div_(255.0), ans["right"][jj].float().div_(255.0)
                logits = net.head(net.prefix(torch.cat([lf, rt]), torch.cat([rt, lf]), torch.cat([ta, ta])))
                loss = loss + recipe.answer_weight * F.cross_entropy(logits, torch.cat([ans["label"][jj], 1 - ans["label"][jj]]))
            return loss

        params = [p for p in net.parameters() if p.requires_grad]
        t0 = time.perf_counter()
        res = _loop(params, len(demos), step_fn, train_cfg, rng, log)
    meta = {"seed": recipe.seed, "mode": recipe.mode, "vlm": vlm.id, "train": asdict(train_cfg), "frames": len(demos),
            "episodes": int(len(demos.left)), "answer_episodes": int((demos.kind == 0).sum()),
            "final_loss": res.losses[-1],
            "frames_per_second": train_cfg.batch_size * train_cfg.steps / (time.perf_counter() - t0)}
    return ChoiceVLAPolicy(net.eval(), mean, std, id=recipe.name, meta=meta, text_encoder=enc), res


def evaluate_in_cell(policy, items: Sequence[BinaryItem], spec: EpisodeSpec | None = None, seed: int = 0) -> dict:
    """Episodes of ``items`` in both layouts in the pybullet cell (:func:`~embeval.act2answer.episode.run_items`);
    per category and overall: SR, Wilson 95 % interval, regime, swap consistency, position bias."""
    from embeval.act2answer.aggregate import category_rates, swap_stats
    from embeval.act2answer.episode import run_items

    t0 = time.perf_counter()
    recs = [r.to_dict() for r in run_items(policy, items, spec, seed=seed, keep_actions=False)]
    out: dict = {"items": len(items), "episodes": len(recs), "seconds": time.perf_counter() - t0, "categories": {}}
    for cr in category_rates(recs):
        sub = recs if cr.category == "all" else [r for r in recs if r["category"] == cr.category]
        ss = swap_stats(sub)
        out["categories"][cr.category] = {
            "rate": cr.rate, "items": cr.n_items, "episodes": cr.n_episodes, "wilson95": [cr.ci_low, cr.ci_high],
            "regime": cr.regime, "consistency": ss.consistency, "position_bias": ss.position_bias,
            "out_of_bounds": float(np.mean([r["zone"] == "out_of_bounds" for r in sub]))}
    return out


def train_choice_vla_recipe(recipe: ChoiceVLARecipe, out: str | Path, work: str | Path | None = None,
                            log: Callable[[str], None] | None = print, models_dir: str | Path | None = None) -> dict:
    """Record (or reuse) the demonstrations, train, evaluate on the held-out suite in the cell, save
    to ``out``; returns the report (also ``out/report.json``). ``models_dir``: where the VLM is found
    (default: the shipped models)."""
    import tempfile

    from embeval.subjects.embedded.training import TrainConfig
    from embeval.subjects.embedded.zoo import load_vlm

    t0 = time.perf_counter()
    vlm = load_vlm(Path(models_dir) / recipe.vlm if models_dir else recipe.vlm)
    cfg = ChoiceVLAConfig.from_dict({**ChoiceVLAConfig().to_dict(), **recipe.arch, "vlm": vlm.cfg.to_dict()})
    tcfg = TrainConfig(**{**asdict(TrainConfig()), **recipe.train})
    with tempfile.TemporaryDirectory(prefix="choice-vla-") as tmp:
        wdir = Path(work) if work else Path(tmp)
        demos = recipe_demos(recipe, cfg, wdir, log)
        t_data = time.perf_counter() - t0
        answer_data = None
        if recipe.mode == "cotrain":
            from embeval.act2answer.choice_training import choice_arrays

            answer_data = choice_arrays(recipe.answer_per_category, recipe.seed, vlm.cfg.card_size)
        if log:
            log(f"{recipe.name} ({recipe.mode}): {len(demos)} frames, {len(demos.left)} episodes; training {tcfg.steps} steps x {tcfg.batch_size}")
        policy, res = train_choice_vla(demos, vlm, cfg, recipe, tcfg, answer_data=answer_data, log=log)
        report: dict = {"recipe": asdict(recipe), "train": res.to_dict(), "data_seconds": t_data,
                        "frames_per_second": policy.meta["frames_per_second"]}
        policy.meta["recipe"] = asdict(recipe)
        policy.save(out)  # usable while the evaluation runs; saved again with its results
        if recipe.eval_per_category > 0:
            import torch

            from embeval.act2answer.generator import generate_items

            torch.set_num_threads(1)
            items = generate_items(wdir / f"a2a-suite-{recipe.eval_seed}-{recipe.eval_per_category}", None,
                                   recipe.eval_per_category, recipe.eval_seed)
            ev = evaluate_in_cell(policy, items, recipe_spec(recipe), seed=recipe.eval_seed)
            ev["suite"] = {"seed": recipe.eval_seed, "per_category": recipe.eval_per_category}
            report["eval"] = ev
            policy.meta["eval"] = ev
    policy.meta["recipe"] = asdict(recipe)
    policy.save(out)
    report["seconds"] = time.perf_counter() - t0
    (Path(out) / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report


def format_cell_report(ev: dict, demo_categories: Sequence[str] = ()) -> str:
    """Text table of :func:`evaluate_in_cell`'s result (``*`` marks demonstrated categories)."""
    lines = [f"{'category':11s} {'SR %':>6s} {'Wilson 95% CI':>15s} {'consist.':>8s} {'pos.bias':>8s} {'OOB':>5s}  regime"]
    cats = ev["categories"]
    for c in sorted(cats, key=lambda c: (c == "all", c)):
        d = cats[c]
        lo, hi = d["wilson95"]
        mark = "*" if c in demo_categories else " "
        lines.append(f"{c + mark:11s} {100 * d['rate']:6.1f} [{100 * lo:5.1f}, {100 * hi:5.1f}] {d['consistency']:8.2f} "
                     f"{d['position_bias']:+8.2f} {d.get('out_of_bounds', 0.0):5.2f}  {d['regime']}")
    return "\n".join(lines)
