"""Batched subjects: many episodes per policy call, each in its own slot.

The shipped embedded VLAs answer a batch of slots with one forward pass; their actions must equal what a
batch-1 copy gives for the same episode (reset, then act per step) within 1e-5, with slots that start, end and
restart at different steps. Every other policy gets the calls from :func:`~embeval.subjects.protocols.batched`
(one weight-sharing copy per slot), the tiny VLMs answer a batch with ``generate_batch``, and the embedded
models take ``device``.
"""
from __future__ import annotations

import collections
import threading

import numpy as np
import pytest

from embeval.action import Action, ActionSpec, Observation
from embeval.errors import ConfigError, InvalidInputError
from embeval.subjects.protocols import BatchedPolicy, LoopSlots, Policy, batched, fork_policy, generate_batch

INSTRUCTIONS = ["pick up the red cube", "put the cube on the left picture", "place the blue block on the plate",
                "pick the green cylinder", "put the cube on the card with the sad face", "push the yellow cube"]

#: (step, slot, event): "reset" starts the slot's next episode at that step, "end" frees the slot; between them
#: the slot acts at every step, except where SKIP says it waits (a slower environment)
SCHEDULE = {0: [(0, "reset"), (1, "reset"), (2, "reset")],
            2: [(3, "reset")],
            4: [(1, "reset")],  # slot 1 restarts mid-way with a new instruction, the others go on
            5: [(2, "end")],
            6: [(4, "reset")],
            7: [(2, "reset")]}  # a freed slot id takes a new episode
SKIP = {(3, 0), (5, 3)}  # (step, slot): this slot does not act at this step
STEPS = 10


def _observation(rng: np.random.Generator, shape: tuple[int, int], cameras: list[str]) -> Observation:
    pose = np.r_[rng.uniform(0.35, 0.6), rng.uniform(-0.2, 0.2), rng.uniform(0.03, 0.3), 0.0, 0.0, 0.0, 1.0]
    return Observation(images={c: rng.integers(0, 256, (*shape, 3), dtype=np.uint8) for c in cameras},
                       state={"tcp_pose": pose, "gripper": np.array([float(rng.integers(0, 2))])})


def _run_schedule(policy: BatchedPolicy, make_obs):
    """Drive ``policy`` through SCHEDULE; returns {episode: (instruction, [observation], [action])}."""
    episodes: dict[int, tuple[str, list, list]] = {}
    live: dict[int, int] = {}  # slot -> episode
    for step in range(STEPS):
        starts = []
        for slot, event in SCHEDULE.get(step, []):
            if event == "end":
                policy.end_slots([slot])
                live.pop(slot)
            else:
                ep = len(episodes)
                episodes[ep] = (INSTRUCTIONS[ep % len(INSTRUCTIONS)], [], [])
                live[slot] = ep
                starts.append(slot)
        if starts:
            policy.reset_slots(starts, [episodes[live[s]][0] for s in starts])
        slots = [s for s in sorted(live, reverse=step % 2 == 1) if (step, s) not in SKIP]  # the order varies too
        obs = [make_obs() for _ in slots]
        for s, o, a in zip(slots, obs, policy.act_slots(slots, obs)):
            assert isinstance(a, Action)
            episodes[live[s]][1].append(o)
            episodes[live[s]][2].append(a.vector)
    return episodes


def _batch1_difference(policy, episodes) -> float:
    """Largest |batched - batch-1| over every action: each episode replayed on a fresh batch-1 copy."""
    worst = 0.0
    for instruction, obs, acts in episodes.values():
        ref = fork_policy(policy)
        ref.reset(instruction)
        for o, a in zip(obs, acts):
            b = ref.act(o).vector
            assert a[6] == b[6]  # the gripper command is the same
            worst = max(worst, float(np.abs(a - b).max()))
    return worst


@pytest.mark.parametrize("name, shape", [("tiny-vla", (96, 128)), ("tiny-vla-waypoint", (96, 128)),
                                         ("tiny-vla-wrist", (96, 128)), ("tiny-vla-a2a-frozen", (240, 320))])
def test_embedded_slots_equal_batch1_actions(name, shape):
    from embeval.subjects.embedded.zoo import load_vla

    policy = load_vla(name)
    assert batched(policy) is policy  # its own one-forward implementation, not the loop
    rng = np.random.default_rng(7)
    calls = []
    forward = policy.net.forward

    def counting_forward(*a, **k):
        calls.append(1)
        return forward(*a, **k)

    if name.startswith("tiny-vla-a2a"):  # prefix + expert: count the expert passes
        expert = policy.net.expert

        def counting_expert(*a, **k):
            calls.append(1)
            return expert(*a, **k)

        policy.net.expert = counting_expert
    else:
        policy.net.forward = counting_forward
    episodes = _run_schedule(policy, lambda: _observation(rng, shape, ["third_person", "wrist"]))
    assert len(calls) == STEPS  # one network pass per step, whatever the number of slots
    if name.startswith("tiny-vla-a2a"):
        del policy.net.expert
    else:
        del policy.net.forward
    assert len(episodes) == 7 and sum(len(e[2]) for e in episodes.values()) == 38
    assert _batch1_difference(policy, episodes) < 1e-5


def test_choice_vla_slot_caches_its_own_prefix():
    """The choice VLA computes an episode's VLM prefix at its first step only: a slot restarted mid-way gets a
    new prefix from its new first observation, the other slots keep theirs."""
    from embeval.subjects.embedded.zoo import load_vla

    pol = load_vla("tiny-vla-a2a-frozen")
    rng = np.random.default_rng(1)
    obs = [_observation(rng, (240, 320), ["third_person"]) for _ in range(4)]
    pol.reset_slots([0, 1], INSTRUCTIONS[:2])
    pol.act_slots([0, 1], obs[:2])
    p0, p1 = pol._slots[0].prefix.clone(), pol._slots[1].prefix.clone()
    pol.act_slots([0, 1], obs[2:])  # later steps: the prefixes stay
    assert pol._slots[0].prefix.equal(p0) and pol._slots[1].prefix.equal(p1)
    pol.reset_slots([1], [INSTRUCTIONS[1]])
    assert pol._slots[1].prefix is None and pol._slots[0].prefix.equal(p0)
    pol.act_slots([1], [obs[3]])
    assert not pol._slots[1].prefix.equal(p1)  # from the new first observation's cards


class ChunkPolicy:
    """A stateful batch-1 policy as the adapters are: an action queue refilled with a 3-action chunk, cleared in
    place by reset (as OpenVLARestPolicy does), a torch weight, a lock and a step counter."""

    def __init__(self):
        import torch

        self.id = "chunk-policy"
        self.action_spec = ActionSpec(chunk_size=3)
        self.net = torch.nn.Linear(3, 3)
        self._lock = threading.Lock()
        self._queue: collections.deque = collections.deque()
        self.instruction = ""
        self.steps = 0

    def reset(self, instruction: str) -> None:
        self.instruction = instruction
        self._queue.clear()
        self.steps = 0

    def act(self, observation: Observation) -> Action:
        import torch

        with self._lock:
            self.steps += 1
            if not self._queue:
                x = torch.tensor([float(len(self.instruction)), float(self.steps), float(observation.images["third_person"].mean())], dtype=torch.float32)
                with torch.no_grad():
                    y = torch.tanh(self.net(x)).numpy() * 0.01
                for k in range(3):
                    self._queue.append(np.r_[y * (k + 1), 0, 0, 0, float(k % 2)])
            return Action(self._queue.popleft())


def test_loop_slots_keep_each_episode_apart():
    """The default for any policy: one copy per slot (weights and lock shared, queue and counters not), so the
    interleaved episodes give exactly the sequential actions; freed copies are reused."""
    pol = ChunkPolicy()
    wrapped = batched(pol)
    assert isinstance(wrapped, LoopSlots) and isinstance(wrapped, BatchedPolicy) and wrapped.id == "chunk-policy"
    rng = np.random.default_rng(3)
    episodes = _run_schedule(wrapped, lambda: _observation(rng, (8, 8), ["third_person"]))
    assert _batch1_difference(pol, episodes) == 0.0
    assert wrapped.copies == 5  # 7 episodes, at most 5 at once: slot 4 took the copy slot 2 freed at step 5
    copy = next(iter(wrapped._active.values()))
    assert copy.net.weight is pol.net.weight and copy._lock is pol._lock  # shared, not copied
    assert copy._queue is not pol._queue
    assert pol.steps == 0 and pol.instruction == "" and not pol._queue  # the policy itself never stepped


def test_scripted_policies_work_through_batched():
    from embeval.subjects.scripted import ConstantPolicy, SequencePolicy

    seq = batched(SequencePolicy(actions=[[0.01, 0, 0, 0, 0, 0, 1], [0.02, 0, 0, 0, 0, 0, 0]]))
    ob = Observation(images={"third_person": np.zeros((4, 4, 3), np.uint8)})
    seq.reset_slots(["a", "b"], ["x", "y"])
    assert seq.act_slots(["a"], [ob])[0].vector[0] == 0.01
    assert [a.vector[0] for a in seq.act_slots(["a", "b"], [ob, ob])] == [0.02, 0.01]  # each slot has its own index
    const = ConstantPolicy()
    assert isinstance(const, Policy) and isinstance(batched(const), LoopSlots)


@pytest.mark.parametrize("make", ["tiny-vla", "loop"])
def test_slot_calls_refuse_bad_input(make):
    from embeval.subjects.embedded.zoo import load_vla

    pol = load_vla("tiny-vla") if make == "tiny-vla" else batched(ChunkPolicy())
    ob = _observation(np.random.default_rng(0), (96, 128), ["third_person", "wrist"])
    with pytest.raises(InvalidInputError, match=r"2 slots for 1 instructions; give one slot per instruction"):
        pol.reset_slots([0, 1], ["a"])
    with pytest.raises(InvalidInputError, match=r"slot 0 appears twice in one call; one episode per slot"):
        pol.reset_slots([0, 0], ["a", "b"])
    with pytest.raises(InvalidInputError, match=r"slots must be hashable"):
        pol.reset_slots([[0]], ["a"])
    with pytest.raises(InvalidInputError, match=r"slot 5 has no episode; call reset_slots\(\[5\], \[instruction\]\) first"):
        pol.act_slots([5], [ob])
    pol.reset_slots([0], ["pick up the red cube"])
    with pytest.raises(InvalidInputError, match=r"1 slots for 2 observations"):
        pol.act_slots([0], [ob, ob])
    pol.end_slots([0, 99])  # an unknown slot is ignored
    with pytest.raises(InvalidInputError, match=r"slot 0 has no episode"):
        pol.act_slots([0], [ob])
    assert pol.act_slots([], []) == []


def test_a_policy_that_cannot_be_copied_is_named():
    class Streaming(ChunkPolicy):
        def __init__(self):
            super().__init__()
            self.source = (i for i in range(3))  # a generator: deepcopy cannot copy it

    with pytest.raises(ConfigError, match=r"policy 'chunk-policy' cannot be copied per episode .*give its class a fork\(\) method"):
        batched(Streaming()).reset_slots([0], ["a"])

    class Forkable(Streaming):
        def fork(self):
            return Forkable()

    loop = batched(Forkable())
    loop.reset_slots([0, 1], ["a", "b"])  # the policy's own fork() is used instead of a deep copy
    assert loop.copies == 2 and all(isinstance(p, Forkable) for p in loop._active.values())


#: first actions of a seed-0 episode: tiny-vla's computed with the code before batched slots (commit d447b5f);
#: tiny-vla-a2a-frozen's with the checkpoint it ships with now, through the batch-1 path
BEFORE = {"tiny-vla": [0.00016021815311185, -0.00042528162265465, 0.05046570892903279, -0.00018314595541217,
                       0.00212852572022967, 0.00269666641926314, 0.0],
          "tiny-vla-a2a-frozen": [2.49740502374640183e-04, -3.07368810509434098e-03, 9.71006688400466444e-03,
                                  -3.07424522412811513e-05, 5.80029660274777967e-06, -4.88887919527222770e-03, 0.0]}


@pytest.mark.parametrize("name, shape, instruction", [("tiny-vla", (96, 128), 0), ("tiny-vla-a2a-frozen", (240, 320), 1)])
def test_batch1_calls_unchanged(name, shape, instruction):
    """act (and the tiny VLA's shared-instruction act_batch) give the actions they gave before this change."""
    from embeval.subjects.embedded.zoo import load_vla

    pol = load_vla(name)
    rng = np.random.default_rng(0)
    obs = [_observation(rng, shape, list(pol.cfg.cameras)) for _ in range(3)]
    pol.reset(INSTRUCTIONS[instruction])
    one = np.stack([pol.act(o).vector for o in obs])
    np.testing.assert_allclose(one[0], BEFORE[name], rtol=0, atol=1e-7)
    if name == "tiny-vla":
        np.testing.assert_allclose(pol.act_batch(obs), one, rtol=0, atol=1e-5)
    pol.reset_slots([0, 1, 2], [INSTRUCTIONS[instruction]] * 3)
    got = np.stack([a.vector for a in pol.act_slots([0, 1, 2], obs)])
    np.testing.assert_allclose(got[0], one[0], rtol=0, atol=1e-5)  # the first step of each slot's episode


# --------------------------------------------------------------------------- VLMs
@pytest.mark.parametrize("name", ["tiny-vlm", "tiny-vlm-a2a", "a2eval/a2eval-base"])
def test_embedded_vlm_generate_batch_equals_generate(name):
    from embeval.subjects.embedded.zoo import load_vlm

    vlm = load_vlm(name)
    rng = np.random.default_rng(5)
    items = [[rng.integers(0, 256, (72, 96, 3), dtype=np.uint8) for _ in range(2)] for _ in range(7)]
    prompts = [INSTRUCTIONS[i % len(INSTRUCTIONS)] for i in range(7)]
    calls = []
    forward = vlm.net.forward
    vlm.net.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    got = vlm.generate_batch(items, prompts)
    assert len(calls) == 1  # one forward pass for the seven items
    del vlm.net.forward
    assert got == [vlm.generate(ims, p) for ims, p in zip(items, prompts)]
    assert generate_batch(vlm, items, prompts) == got


def test_generate_batch_loops_for_other_vlms():
    from embeval.subjects.scripted import ScriptedVLM

    vlm = ScriptedVLM()
    ims = [[np.full((8, 8, 3), v, np.uint8)] for v in (0, 255)]
    assert generate_batch(vlm, ims, ["pick it", "pick it"]) == [vlm.generate(i, "pick it") for i in ims]
    with pytest.raises(InvalidInputError, match=r"2 image lists for 1 prompts"):
        generate_batch(vlm, ims, ["pick it"])


# --------------------------------------------------------------------------- device
def test_resolve_device():
    import torch

    from embeval.subjects.embedded.device import resolve_device

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("CPU") == "cpu" and resolve_device(None) == "cpu"
    with pytest.raises(ConfigError, match=r"device must be auto, cpu, cuda or cuda:N, got 'gpu'"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"device 'cuda': torch sees no CUDA GPU here; use device cpu"):
            resolve_device("cuda")
    else:
        with pytest.raises(ConfigError, match=r"device 'cuda:99': torch sees \d+ CUDA GPU"):
            resolve_device("cuda:99")


def test_subject_spec_takes_device_and_loads_choice_vlas():
    """``params.device`` reaches the embedded adapter; the adapter loads the choice VLAs (it passed binary_gripper,
    which they did not take: a TypeError before)."""
    from embeval.subjects import load_subject

    pol = load_subject({"kind": "policy", "adapter": "embedded", "path": "tiny-vla-a2a-frozen", "params": {"device": "auto"}})
    assert pol.device in ("cpu", "cuda") and next(pol.net.parameters()).device.type == pol.device
    vlm = load_subject({"kind": "vlm", "adapter": "embedded", "path": "tiny-vlm", "params": {"device": "cpu"}})
    assert vlm.device == "cpu"
    with pytest.raises(ConfigError, match=r"device must be auto, cpu, cuda or cuda:N"):
        load_subject({"kind": "policy", "adapter": "embedded", "path": "tiny-vla", "params": {"device": "tpu"}})


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_slots_match_cpu():
    """On a GPU: the batched slots on CUDA give the CPU's actions (TF32 off) within 1e-4."""
    import torch

    from embeval.subjects.embedded.zoo import load_vla

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    for name, shape in (("tiny-vla", (96, 128)), ("tiny-vla-a2a-frozen", (240, 320))):
        cpu, gpu = load_vla(name), load_vla(name, device="cuda")
        rng = np.random.default_rng(2)
        obs = [_observation(rng, shape, ["third_person", "wrist"]) for _ in range(16)]
        for p in (cpu, gpu):
            p.reset_slots(range(16), [INSTRUCTIONS[i % 6] for i in range(16)])
        a = np.stack([x.vector for x in cpu.act_slots(range(16), obs)])
        b = np.stack([x.vector for x in gpu.act_slots(range(16), obs)])
        assert np.abs(a - b).max() < 1e-4, (name, np.abs(a - b).max())


def test_lerobot_act_chunks_stay_per_slot(tmp_path):
    """A real adapter with episode state inside its torch module (ACT's action queue, chunk 4) through the looping
    default: interleaved slots give the sequential episodes' actions, and the copies share the weights."""
    pytest.importorskip("lerobot")
    from conftest import tiny_act_checkpoint

    from embeval.subjects import load_subject

    tiny_act_checkpoint(tmp_path, state=6, action=7, action_std=0.05, chunk=4)
    pol = load_subject({"kind": "policy", "adapter": "lerobot", "path": str(tmp_path)})
    rng = np.random.default_rng(4)

    def obs():
        return Observation(images={"third_person": rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)},
                           state={"joint_positions": rng.normal(size=6)})

    assert batched(pol) is pol  # the adapter batches natively now (tests/core/subjects/test_subjects_lerobot.py); the looping
    loop = LoopSlots(pol)        # default must still keep a real adapter's episodes apart
    episodes = _run_schedule(loop, obs)
    assert _batch1_difference(pol, episodes) < 1e-6
    weights = [next(p.policy.parameters()) for p in loop._active.values()]
    assert all(w is next(pol.policy.parameters()) for w in weights)
