"""Shared test setup: localhost-only DDS, offline hubs, the UR arm of the hardware-in-the-loop tier.

HIL tests (marker ``hil``) run everywhere: against the real UR5 at ``UR_ROBOT_IP`` when it is set, else
against the UR controller emulator (``embeval ur-emulator``) on a loopback address of its own, through
the same unmodified ur_rtde client (fixtures :func:`ur_robot` and :func:`ur_emulator`). Only tests that
need a camera device skip without one.
"""
from __future__ import annotations

import atexit
import fcntl
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from embeval.env import configure

configure()  # the runtime defaults every embeval program sets: localhost DDS profile, offline hubs, Agg

#: Test modules share helpers by importing one another by basename (``from test_cli_hostile import _run``), and the
#: helper modules here by theirs (``from hf_families import ...``). pytest puts tests/ (this file's folder) and the
#: folder of each test file it has imported on sys.path; every test folder goes there now, so such an import works
#: whichever files run. Basenames are unique across the tree (pytest's default import mode needs that anyway).
_TESTS = Path(__file__).resolve().parent
for _folder in sorted({p.parent for p in _TESTS.rglob("test_*.py")} - {_TESTS}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


@dataclass
class URTarget:
    """The UR controller a HIL test talks to: its IP, whether it is the emulator, and the emulator's process."""

    ip: str
    emulated: bool
    process: object = None  # embeval.robot.ur_emulator.process.EmulatorProcess when emulated
    arm_kwargs: dict = field(default_factory=dict)  # extra embeval.robot.ur_rtde_backend.URRtdeArm arguments

    def log(self) -> str:
        """What the emulator printed so far ('' for a real robot)."""
        return self.process.log() if self.process is not None else ""


#: ROS 2 domain ids handed to tests (Fast DDS maps a domain to UDP ports; 1..100 stays well inside the valid range).
_DOMAIN_IDS = range(1, 101)
_DOMAIN_LOCKS = Path(tempfile.gettempdir()) / "embeval-ros-domains"


def allocate_domain_id() -> tuple[int, int]:
    """A ROS domain id no other test on this machine holds now (any process): ``(id, lock fd)``.

    Each id is an exclusive ``flock`` on a file; the lock dies with the holder, so a killed test run
    leaves nothing to clean up. Release with ``os.close(fd)``.
    """
    _DOMAIN_LOCKS.mkdir(parents=True, exist_ok=True)
    start = os.getpid() % len(_DOMAIN_IDS)
    for k in range(len(_DOMAIN_IDS)):
        did = _DOMAIN_IDS[(start + k) % len(_DOMAIN_IDS)]
        fd = os.open(_DOMAIN_LOCKS / f"{did}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return did, fd
    raise RuntimeError(f"all ROS domain ids {_DOMAIN_IDS.start}..{_DOMAIN_IDS.stop - 1} are held by other test runs")


@pytest.fixture(autouse=True)
def ros_domain_id(monkeypatch):
    """Every test gets its own ``ROS_DOMAIN_ID`` (inherited by the nodes and processes it starts), so
    concurrent test runs on one machine never see each other's topics."""
    did, fd = allocate_domain_id()
    monkeypatch.setenv("ROS_DOMAIN_ID", str(did))
    try:
        yield did
    finally:
        os.close(fd)


def start_ur_emulator(*extra: str, unlock_delay: float = 0.3) -> URTarget:
    """``embeval ur-emulator`` in a subprocess on a free loopback address (ur_rtde's blocking C++ calls hold
    the GIL, so the emulator must not share the test's interpreter); stop it with ``target.process.close()``.
    The unlock delay is short (a real controller refuses an unlock for 5 s) to keep the tests fast."""
    pytest.importorskip("rtde_control", reason="the ur_rtde client is missing: run scripts/install.sh")
    from embeval.robot.ur_emulator.process import EmulatorProcess

    proc = EmulatorProcess("--unlock-delay", str(unlock_delay), *extra)
    return URTarget(proc.host, True, proc)


@pytest.fixture(scope="module")
def ur_emulator():
    """The UR controller emulator on loopback for one test module (always the emulator, robot or not)."""
    target = start_ur_emulator()
    yield target
    target.process.close()


@pytest.fixture(scope="module")
def ur_robot():
    """The HIL tier's UR controller: the real UR5 at ``UR_ROBOT_IP`` when set, else the emulator on loopback."""
    ip = os.environ.get("UR_ROBOT_IP", "")
    if ip:
        yield URTarget(ip, False)
        return
    target = start_ur_emulator()
    yield target
    target.process.close()


def wait_for(done, timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    """Poll ``done()`` until it holds; fail naming ``what`` after ``timeout_s`` (tests wait on events, not sleeps)."""
    import time

    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}; it did not happen")
        time.sleep(poll_s)


def bag_so_far(path, topics=None) -> list:
    """The messages of a bag being recorded that lie in its closed segments ([] before the first one closes)."""
    from embeval.errors import MissingFileError
    from embeval.recording import read_bag

    try:
        return list(read_bag(path, topics))
    except MissingFileError:
        return []


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server to start on, or a refused connection)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def folder_iqa_database(tmp_path_factory, n_images: int, first_seed: int, **config):
    """An IQA database built (``embeval_analysis.iqa.database.build_database``) from ``n_images`` synthetic 48x32
    tabletop frames in a folder source with one task; ``config``: the rest of the BuildConfig. Returns
    ``(folder, build result)``."""
    import yaml
    from embeval_analysis.iqa.database import BuildConfig, build_database
    from PIL import Image

    from embeval.distortion.samples import synthetic_tabletop

    imgs = tmp_path_factory.mktemp("imgs")
    for i in range(n_images):
        Image.fromarray(synthetic_tabletop(48, 32, seed=first_seed + i)).save(imgs / f"im{i}.png")
    (imgs / "tasks.yaml").write_text(yaml.safe_dump({"*": ["pick up the cube"]}))
    out = tmp_path_factory.mktemp("db")
    return out, build_database(BuildConfig(source="folder", source_params={"path": str(imgs)}, **config), out, log=None)


def tiny_act_checkpoint(folder, state: int, action: int, action_std: float, dim_model: int = 32, encoder_layers: int = 1,
                        chunk: int = 1, env: int = 0):
    """A LeRobot ACT policy with random weights (torch seed 0) on one 32x32 camera ``observation.images.top`` and a
    ``state``-dim state (plus an ``env``-dim ``observation.environment_state`` when ``env`` > 0), ``action``-dim
    actions normalised by std ``action_std``, saved with its processors in ``folder``. Returns ``(policy,
    preprocessor, postprocessor)``."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    cfg = ACTConfig(device="cpu", pretrained_backbone_weights=None, dim_model=dim_model, n_heads=2, dim_feedforward=2 * dim_model,
                    n_encoder_layers=encoder_layers, n_decoder_layers=1, use_vae=False, chunk_size=chunk, n_action_steps=chunk,
                    input_features={"observation.images.top": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 32, 32)),
                                    "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state,)),
                                    **({"observation.environment_state": PolicyFeature(type=FeatureType.ENV, shape=(env,))}
                                       if env else {})},
                    output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action,))})
    torch.manual_seed(0)
    policy = ACTPolicy(cfg).eval()
    stats = {"observation.images.top": {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)},
             "observation.state": {"mean": torch.zeros(state), "std": torch.ones(state)},
             "observation.environment_state": {"mean": torch.zeros(env), "std": torch.ones(env)},
             "action": {"mean": torch.zeros(action), "std": torch.full((action,), float(action_std))}}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    for x in (policy, pre, post):
        x.save_pretrained(folder)
    return policy, pre, post


def one_error_line(capsys) -> str:
    """The one ``embeval: error:`` line of the captured stderr (exactly one, and no traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("embeval: error:")]
    assert len(lines) == 1, err
    return lines[0]


def decision_unit(spec: dict, state: dict, tmp_path, size: tuple[int, int]) -> float:
    """The Decision of subject ``spec`` on one policy-decision unit (one synthetic ``size`` = (W, H) image, darkened
    at level 3, the observation state ``state``), run through ``embeval.runs`` as a user would; asserts it ran."""
    import numpy as np

    from embeval.runs import ResultsStore, parse_spec, run

    rs = parse_spec({"evaluator": "policy-decision", "subjects": [spec], "distortions": ["darken"], "levels": [3],
                     "items": {"source": "synthetic", "count": 1, "params": {"size": list(size)}},
                     "params": {"tasks": ["pick up the block"], "state": {k: np.asarray(v).tolist() for k, v in state.items()}},
                     "backend": {"progress": False}}, base_dir=tmp_path)
    s = run(rs, tmp_path / "decision")
    with ResultsStore(tmp_path / "decision" / "results.sqlite") as st:
        rows = st.rows(s.run_id)
    assert s.failed == 0 and rows, [r.get("error") for r in rows]
    return rows[-1]["outputs"]["decision"]


def exercise_lerobot_subject(spec: dict, tmp_path, a2a_steps: int = 3) -> dict:
    """Run a LeRobot subject spec through embeval as a user would: load it, read its hidden states, score one
    policy-decision unit (one synthetic image, darkened) and run one Act2Answer episode in the pybullet cell
    (``a2a_steps`` policy steps at most; 0: none). Returns ``{"subject", "hidden", "decision", "episode"}``."""
    import math

    import numpy as np

    from embeval.act2answer.episode import run_items
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.action import Observation
    from embeval.subjects import load_subject

    subject = load_subject(spec)
    rng = np.random.default_rng(0)
    obs = Observation(images={"third_person": rng.integers(0, 256, (96, 128, 3), dtype=np.uint8),
                              "wrist": rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)},
                      instruction="pick up the cube", state={"tcp_pose": rng.normal(size=7), "gripper": np.ones(1),
                                                             "joint_positions": rng.normal(size=6)})
    hidden = subject.hidden_states(obs)
    assert hidden and all(np.all(np.isfinite(v)) and v.size > 0 for v in hidden.values())
    # the decision evaluator shows one camera ("third_person", a synthetic image): every image input reads it
    one_cam = {**spec, "id": "lerobot", "params": {**spec.get("params", {}), "camera_map": {
        k: "third_person" for k in subject.config.image_features}}}
    decision = decision_unit(one_cam, obs.state, tmp_path, (128, 96))
    assert math.isfinite(decision)
    if not a2a_steps:  # the caller runs its Act2Answer episodes itself
        return {"subject": subject, "hidden": hidden, "decision": decision, "episode": None}
    items = generate_items(tmp_path / "a2a", ["shape"], per_category=1, seed=3)
    (episode,) = run_items(subject, items[:1], EpisodeSpec(max_steps=a2a_steps), layouts=("original",))
    assert 1 <= episode.steps <= a2a_steps and len(episode.actions) == episode.steps
    return {"subject": subject, "hidden": hidden, "decision": decision, "episode": episode}


#: test files that drive a real-time loop (the UR controller emulator's 500 Hz RTDE link and its watchdog, the ROS
#: graph on it, a server's /health latency while batches run): marked `serial`, so `make test` (scripts/test.sh)
#: runs them in one process before the parallel part, beside only the install's nice-19 background jobs; two
#: workers sharing the 2 cores stalled the emulator's watchdog
SERIAL_FILES = frozenset({
    "test_ros_hil.py", "test_ur_emulator.py", "test_ros_arm_reset_ur.py", "test_arm_backends_agree.py",
    "test_ur_rtde_backend_faults.py", "test_ros_execution_success.py", "test_safety_mock_hardware.py",
    "test_serving_resource_bounds.py", "test_serving_batching.py", "test_ros_hostile_policies.py",
})


#: the parallel part's longest files, longest first (seconds of one worker, measured warm on 2 cores): scripts/test.sh
#: runs the suite with ``--no-loadscope-reorder``, so pytest-xdist hands files to its workers in this order, and the
#: workers end together instead of one finishing a long file alone (ordering only; every file still runs)
LONG_FILES = (
    "test_maniskill.py",  # 148 s
    "test_libero_ray_ros.py",  # 117 s
    "test_bench_quick.py",  # 117 s
    "test_vector_episodes.py",  # 114 s
    "test_vector_runs.py",  # 111 s
    "test_perturb_study_libero.py",  # 110 s
    "test_runs_spec_bounds.py",  # 109 s
    "test_libero.py",  # 95 s
    "test_ros_launch.py",  # 74 s
    "test_runs_ray_cluster.py",  # 66 s
    "test_maniskill_act2answer.py",  # 61 s
    "test_perturb_backends.py",  # 60 s
    "test_runs_ray.py",  # 50 s
    "test_subjects_families_hf.py",  # 50 s
    "test_subjects_doctor.py",  # 45 s
    "test_libero_iqa.py",  # 43 s
    "test_perturb_libero.py",  # 38 s
    "test_ros_act2answer_e2e.py",  # 36 s
    "test_ros_act2answer_cell.py",  # 34 s
    "test_video.py",  # 30 s
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT_STATUS] = int(exitstatus)
    status_file = os.environ.get("EMBEVAL_TEST_STATUS_FILE")  # scripts/test.sh: the verdict, kept past the exit
    if status_file and not hasattr(session.config, "workerinput"):
        Path(status_file).write_text(f"{int(exitstatus)} {session.testscollected} {session.testsfailed}\n")


_EXIT_STATUS = pytest.StashKey[int]()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the test process without running the C library's exit handlers.

    After the last test of a long in-process run (the ``serial`` part drives ur_rtde, rclpy/Fast DDS, torch and
    the servers in one interpreter), ``exit()`` walks a list of some 1,500 C++ static destructors that one of the
    native libraries left corrupted, and the process dies with SIGSEGV although every test passed. Python's own
    atexit handlers still run; the process then leaves with pytest's exit status. xdist workers exit normally
    (their controller waits on their goodbye).
    """
    if hasattr(config, "workerinput") or _EXIT_STATUS not in config.stash:
        return
    import faulthandler

    print(f"[conftest] session over (pytest status {config.stash[_EXIT_STATUS]}); leaving without the C++ static "
          "destructors", file=sys.stderr, flush=True)
    faulthandler.enable(all_threads=True)  # a crash in an exit handler names its Python frames
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(config.stash[_EXIT_STATUS])
