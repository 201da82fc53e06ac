"""The shipped population of embedded subjects: VLAs and VLMs that differ in architecture, width,
seed and training subset, so that a "mean opinion" over them is not one model's opinion.

``embeval train population`` trains every recipe below from seeds, writes the checkpoints and
``population.json`` (member names, their evaluation, and pairwise agreement).
"""
from __future__ import annotations

import json
import time
from dataclasses import replace
from itertools import combinations
from pathlib import Path
from typing import Callable

import numpy as np

from embeval.action import GRIPPER_CLOSED_BELOW
from embeval.errors import ConfigError
from embeval.subjects.embedded.choice import ChoiceVLMRecipe
from embeval.subjects.embedded.choice_vla import ChoiceVLARecipe
from embeval.subjects.embedded.recipes import VLARecipe, VLMRecipe

#: VLA members: the reference ``tiny-vla`` first.
VLA_RECIPES: list[VLARecipe] = [
    VLARecipe("tiny-vla", seed=0),
    VLARecipe("tiny-vla-wide", seed=1, arch={"action_mode": "delta", "vision": {"width": 24}}, train={"steps": 1500}, eval_episodes=10),
    VLARecipe("tiny-vla-avgpool", seed=2, arch={"action_mode": "delta", "vision": {"pool": "avg"}}, train={"steps": 1500}, eval_episodes=10),
    VLARecipe("tiny-vla-nofilm", seed=3, arch={"action_mode": "delta", "vision": {"film": False}}, train={"steps": 1500}, eval_episodes=10),
    VLARecipe("tiny-vla-wrist", seed=4, arch={"action_mode": "delta", "cameras": ["wrist"]}, train={"steps": 1500}, eval_episodes=10),
    VLARecipe("tiny-vla-waypoint", seed=5, arch={"action_mode": "waypoint"}, train={"steps": 1500}, eval_episodes=10),
]
#: VLM members: the reference ``tiny-vlm`` first.
VLM_RECIPES: list[VLMRecipe] = [
    VLMRecipe("tiny-vlm", seed=0),
    VLMRecipe("tiny-vlm-avgpool", seed=1, arch={"vision": {"pool": "avg"}}),
    VLMRecipe("tiny-vlm-small", seed=2, arch={"image_size": [48, 64], "vision": {"width": 8}}),
    VLMRecipe("tiny-vlm-nofilm", seed=3, arch={"vision": {"film": False}}),
    VLMRecipe("tiny-vlm-half", seed=4, scene_fraction=0.4),
    VLMRecipe("tiny-vlm-deep", seed=5, arch={"backbone_dims": [128, 128]}),
]

#: VLMs that answer Act2Answer's binary questions from both cards ("left"/"right"): positive controls
#: that know the procedural categories. Listed under ``population.json``'s ``"vlm_a2a"`` (not ``"vlm"``:
#: the IQA database and the slot-answer agreement use that list, and these answer only binary questions).
A2A_RECIPES: list[ChoiceVLMRecipe] = [
    ChoiceVLMRecipe("tiny-vlm-a2a", seed=0),
    # the same model for the cell: also trained on the action instructions, cards degraded as the
    # third-person camera's rectified crops are (the backbone of the choice VLAs)
    ChoiceVLMRecipe("tiny-vlm-a2a-cell", seed=0, instructions=True, augment={"min_px": 14, "p": 0.75, "gain": 0.15}),
]

#: the control pathway of the Act2Answer VLAs (docs/act2answer.md, "Control that does not depend on the
#: question"): the instruction reaches the actions only through the VLM prefix (``control_text: False``) and the
#: action expert reads the prefix only while the gripper is closed (``answer_gate: True``), so reaching and
#: grasping are the same whatever the question. Before it, the unseen wording of the never-demonstrated categories
#: stopped the grasp, and which recipe came out ahead changed with the training seed.
A2A_GATED_ARCH = {"control_text": False, "answer_gate": True}
#: the gated pathway plus a committed carry (``answer_commit: True``): once the cube is held the action expert
#: reads the VLM head's left/right decision (one-hot) instead of the answer features, so a carry ends on one card
#: or the other. Shipped since the gated pathway alone still ended up to a third of some categories' episodes
#: between the cards (docs/act2answer.md, "A carry that commits to one card").
A2A_COMMIT_ARCH = {**A2A_GATED_ARCH, "answer_commit": True}

#: VLAs built on ``tiny-vlm-a2a-cell``'s backbone plus an action expert, fine-tuned on action data only
#: (answer demonstrations of four categories + Pick/Place), in recipes that differ in what they
#: preserve. Listed under ``population.json``'s ``"vla_a2a"`` (not ``"vla"``: the VLA agreement and
#: the Pick/Place evaluation read that list; these act in the Act2Answer cell). The frozen recipe's head cannot
#: learn from the action loss, so its expert is trained on the demonstrated card (``teacher_side``) and executes
#: whatever its VLM decides; the full recipe learns its decision from the action loss (straight-through).
A2A_VLA_RECIPES: list[ChoiceVLARecipe] = [
    ChoiceVLARecipe("tiny-vla-a2a-frozen", mode="frozen", seed=0, teacher_side=True, arch=dict(A2A_COMMIT_ARCH)),
    ChoiceVLARecipe("tiny-vla-a2a-full", mode="full", seed=0, arch=dict(A2A_COMMIT_ARCH)),
]

#: earlier versions of the two recipes, trainable by name (``embeval train vla / seeds``) to reproduce the numbers
#: docs/act2answer.md records for them; not population members, not shipped (their seed-0 checkpoints are in git
#: history; training is deterministic for a seed). All were measured on the table start (``start="table"``: the
#: policy picks the cube up first), the protocol before the reference one.
A2A_VLA_VARIANTS: list[ChoiceVLARecipe] = [
    # the two shipped recipes on the table start
    ChoiceVLARecipe("tiny-vla-a2a-frozen-table", mode="frozen", seed=0, teacher_side=True, arch=dict(A2A_COMMIT_ARCH),
                    start="table"),
    ChoiceVLARecipe("tiny-vla-a2a-full-table", mode="full", seed=0, arch=dict(A2A_COMMIT_ARCH), start="table"),
    # shipped before the gated pathway: the instruction also drives the control pathway, the answer features reach the
    # action expert from the first step
    ChoiceVLARecipe("tiny-vla-a2a-frozen-ungated", mode="frozen", seed=0, start="table"),
    ChoiceVLARecipe("tiny-vla-a2a-full-ungated", mode="full", seed=0, start="table"),
    # gated, the expert reading the 128 answer features (shipped in between)
    ChoiceVLARecipe("tiny-vla-a2a-frozen-gated", mode="frozen", seed=0, arch=dict(A2A_GATED_ARCH), start="table"),
    ChoiceVLARecipe("tiny-vla-a2a-full-gated", mode="full", seed=0, arch=dict(A2A_GATED_ARCH), start="table"),
    # committed carry without teacher forcing: the frozen expert, trained on the head's own decision, learns to
    # hedge where the frozen head disagrees with the demonstrations (counting) and is cut by the step cap
    ChoiceVLARecipe("tiny-vla-a2a-frozen-commit", mode="frozen", seed=0, arch=dict(A2A_COMMIT_ARCH), start="table"),
]


def _find(recipes, name):
    for r in recipes:
        if r.name == name:
            return replace(r)
    raise ConfigError(f"unknown recipe {name!r}; choose from {', '.join(r.name for r in recipes)}")


def vla_recipe(name: str = "tiny-vla") -> VLARecipe:
    return _find(VLA_RECIPES, name)


def a2a_vla_recipe(name: str) -> ChoiceVLARecipe:
    """A choice-VLA recipe (:data:`A2A_VLA_RECIPES` or :data:`A2A_VLA_VARIANTS`) by name."""
    return _find(A2A_VLA_RECIPES + A2A_VLA_VARIANTS, name)


def a2a_vla_names() -> list[str]:
    """Names :func:`a2a_vla_recipe` knows (the population's choice VLAs, then the variants)."""
    return [r.name for r in A2A_VLA_RECIPES + A2A_VLA_VARIANTS]


def vlm_recipe(name: str = "tiny-vlm") -> VLMRecipe | ChoiceVLMRecipe:
    """A slot-VLM recipe (:data:`VLM_RECIPES`) or a two-card answerer's (:data:`A2A_RECIPES`) by name."""
    return _find(VLM_RECIPES + A2A_RECIPES, name)


def describe(r) -> str:
    if isinstance(r, ChoiceVLARecipe):
        return (f"{r.vlm} backbone + action expert, {r.mode} fine-tune on answer demos of {', '.join(r.demo_categories)} "
                f"({r.demo_items} items each, both layouts) + {r.pickplace_episodes} Pick/Place demos, "
                f"{r.train.get('steps')} steps" + (f", {r.arch}" if r.arch else "")
                + (", expert trained on the demonstrated card (teacher_side)" if r.teacher_side else ""))
    if isinstance(r, ChoiceVLMRecipe):
        cats = len(r.categories) or "all"
        return (f"two cards + question -> left/right; {cats} procedural categories x {r.per_category} items "
                f"(both layouts), {r.train.get('steps')} steps" + (f", {r.arch}" if r.arch else "")
                + (", + action-instruction prompts" if r.instructions else "")
                + (f", render-like augmentation {r.augment}" if r.augment else ""))
    parts = [f"{k}={v}" for k, v in r.arch.items()]
    if r.train.get("steps") and r.train != type(r)().train:
        parts.append(f"steps={r.train['steps']}")
    frac = getattr(r, "episode_fraction", getattr(r, "scene_fraction", 1.0))
    if frac < 1.0:
        parts.append(f"data={frac:.0%}")
    return ", ".join(parts) or "reference architecture"


def vla_agreement(policies, observations) -> dict:
    """Pairwise agreement of policies on the same observations: mean cosine of the translation
    steps, and the share of equal gripper commands."""
    acts = {}
    for p in policies:
        out = []
        for instr, obs in observations:
            p.reset(instr)
            out.append(p.act(obs).vector)
        acts[p.id] = np.asarray(out)
    pairs = {}
    for a, b in combinations(acts, 2):
        x, y = acts[a][:, :3], acts[b][:, :3]
        cos = (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1) + 1e-9)
        pairs[f"{a}|{b}"] = {"translation_cosine": float(cos.mean()),
                             "gripper_agreement": float(np.mean((acts[a][:, 6] < GRIPPER_CLOSED_BELOW) == (acts[b][:, 6] < GRIPPER_CLOSED_BELOW)))}
    return pairs


def vlm_agreement(vlms, images, prompts) -> dict:
    """Pairwise share of identical answers on the same (image, prompt) pairs."""
    ans = {v.id: [v.generate([im], p) for im, p in zip(images, prompts)] for v in vlms}
    return {f"{a}|{b}": float(np.mean([x == y for x, y in zip(ans[a], ans[b])])) for a, b in combinations(ans, 2)}


def train_population(out: str | Path | None = None, only=None, kind: str | None = None,
                     log: Callable[[str], None] | None = print, vla_steps: int | None = None,
                     vlm_steps: int | None = None, eval_episodes: int | None = None,
                     train_choice_recipe: Callable[..., dict] | None = None,
                     train_choice_vla_recipe: Callable[..., dict] | None = None) -> dict:
    """Train the population into ``out`` (default: the shipped models folder); returns the report
    also written to ``out/population.json``. Demonstrations go to ``<out>_work/`` next to ``out``
    (``runs/embedded_work/`` when ``out`` is the shipped folder) and are reused when present.

    The two-card Act2Answer members (:data:`A2A_RECIPES`) are trained by ``train_choice_recipe``
    (:func:`embeval.act2answer.choice_training.train_choice_recipe`, passed in by ``embeval train
    population``: their data come from the Act2Answer layer above this one); without it they are skipped.
    Likewise the choice VLAs (:data:`A2A_VLA_RECIPES`, after the VLMs: they start from ``out``'s
    ``tiny-vlm-a2a-cell``) by ``train_choice_vla_recipe``
    (:func:`embeval.act2answer.choice_vla_training.train_choice_vla_recipe`)."""
    from embeval.subjects.embedded.recipes import train_vla_recipe, train_vlm_recipe
    from embeval.subjects.embedded.zoo import MODELS_DIR

    out = Path(out) if out else MODELS_DIR
    out.mkdir(parents=True, exist_ok=True)
    pop_file = out / "population.json"
    report = json.loads(pop_file.read_text()) if pop_file.exists() else {"vla": [], "vlm": [], "members": {}}
    t0 = time.perf_counter()
    # recorded demonstrations are large: keep them out of the package folder
    work = Path("runs") / "embedded_work" if out.resolve() == MODELS_DIR.resolve() else out.parent / (out.name + "_work")
    if kind in (None, "vla"):
        for r in VLA_RECIPES:
            if only and r.name not in only:
                continue
            r = replace(r)
            if vla_steps:
                r.train = {**r.train, "steps": vla_steps}
            if eval_episodes is not None:
                r.eval_episodes = eval_episodes
            rep = train_vla_recipe(r, out / r.name, work=work, log=log)
            report["members"][r.name] = {"kind": "vla", "describe": describe(r), **{k: rep[k] for k in ("eval", "seconds") if k in rep}}
            if r.name not in report["vla"]:
                report["vla"].append(r.name)
            pop_file.write_text(json.dumps(report, indent=1, default=str))
    if kind in (None, "vlm"):
        cache: dict = {}
        for r in VLM_RECIPES + (A2A_RECIPES if train_choice_recipe is not None else []):
            if only and r.name not in only:
                continue
            r = replace(r)
            if vlm_steps:
                r.train = {**r.train, "steps": vlm_steps}
            if isinstance(r, ChoiceVLMRecipe):
                rep = train_choice_recipe(r, out / r.name, work=work, log=log)
                group, ev = "vlm_a2a", a2a_summary(rep["eval"]) if "eval" in rep else None
            else:
                rep = train_vlm_recipe(r, out / r.name, log=log, data_cache=cache)
                group, ev = "vlm", rep["eval"]
            add_member(report, group, r.name, {"kind": "vlm", "describe": describe(r), "eval": ev, "seconds": rep["seconds"]})
            pop_file.write_text(json.dumps(report, indent=1, default=str))
    if kind in (None, "vla") and train_choice_vla_recipe is not None:
        for r in A2A_VLA_RECIPES:
            if only and r.name not in only:
                continue
            r = replace(r)
            if vla_steps:
                r.train = {**r.train, "steps": vla_steps}
            rep = train_choice_vla_recipe(r, out / r.name, work=work, log=log, models_dir=out)
            add_member(report, "vla_a2a", r.name, {"kind": "vla", "describe": describe(r), "seconds": rep["seconds"],
                                                   "eval": a2a_summary(rep["eval"]) if "eval" in rep else None})
            pop_file.write_text(json.dumps(report, indent=1, default=str))
    report["agreement"] = population_agreement(out, report)
    report["seconds"] = time.perf_counter() - t0
    pop_file.write_text(json.dumps(report, indent=1, default=str))
    return report


def add_member(report: dict, group: str, name: str, entry: dict) -> dict:
    """Record ``name`` in ``report["members"]`` and the ``group`` list ("vla", "vlm", "vlm_a2a", "vla_a2a")."""
    report.setdefault("members", {})[name] = entry
    names = report.setdefault(group, [])
    if name not in names:
        names.append(name)
    return report


def a2a_summary(ev: dict) -> dict:
    """The population-file summary of a two-card answerer's held-out evaluation: per category the
    swap-averaged rate, Wilson 95 % interval, swap consistency and position bias."""
    return {"suite": ev.get("suite"), "items": ev["items"],
            "categories": {c: {k: d[k] for k in ("rate", "wilson95", "consistency", "position_bias", "regime")}
                           for c, d in ev["categories"].items()}}


def population_agreement(folder: Path, report: dict, n_obs: int = 40, n_vqa: int = 100, seed: int = 0) -> dict:
    """Agreement matrices of the population members found in ``folder``."""
    from embeval.subjects.embedded.evaluate import probe_observations
    from embeval.subjects.embedded.recipes import render_vqa
    from embeval.subjects.embedded.zoo import load_vla, load_vlm

    agree: dict = {}
    vlas = [load_vla(folder / n) for n in report.get("vla", []) if (folder / n / "config.json").exists()]
    if len(vlas) >= 2:
        agree["vla"] = vla_agreement(vlas, probe_observations(n_obs, seed))
    vlms = [load_vlm(folder / n) for n in report.get("vlm", []) if (folder / n / "config.json").exists()]
    if len(vlms) >= 2:
        rows, images, prompts, pidx, _ = render_vqa(max(1, n_vqa // 5), seed, "agreement")
        agree["vlm"] = vlm_agreement(vlms, list(images), [prompts[i] for i in pidx])
    return agree


def print_population_report(rep: dict) -> None:
    """Readable tables of a population report."""
    print(f"{'member':24s} {'kind':4s} result")
    for name, m in rep.get("members", {}).items():
        ev = m.get("eval") or {}
        if m["kind"] == "vla" and ev and "categories" not in ev:
            res = f"success {ev['successes']}/{ev['episodes']} ({ev['rate']:.0%})"
        elif ev and "categories" in ev:
            cats = ev["categories"]
            res = "Act2Answer " + ", ".join(f"{c} {d['rate']:.2f}" for c, d in cats.items()) + \
                f"; consistency {cats['all']['consistency']:.2f}, position bias {cats['all']['position_bias']:+.2f}"
        elif ev:
            res = f"exact answers {ev['exact_answer_accuracy']:.2f}, " + ", ".join(
                f"{k} {v:.2f}" for k, v in ev["slot_accuracy"].items())
        else:
            res = ""
        print(f"{name:24s} {m['kind']:4s} {res}   [{m.get('describe', '')}]")
    ag = rep.get("agreement", {})
    if "vla" in ag:
        print("\nVLA pairwise agreement (translation cosine / gripper agreement):")
        for pair, v in ag["vla"].items():
            print(f"  {pair:45s} {v['translation_cosine']:.2f} / {v['gripper_agreement']:.2f}")
    if "vlm" in ag:
        print("\nVLM pairwise identical-answer rate:")
        for pair, v in ag["vlm"].items():
            print(f"  {pair:45s} {v:.2f}")
