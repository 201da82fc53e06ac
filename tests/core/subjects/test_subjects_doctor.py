"""`embeval subjects doctor`: a correct policy passes every check, and each planted convention mistake makes the
right check fail with its one-line diagnosis.

The correct policy is correct by construction (:class:`NearestProbe`: per camera, the probe whose image is nearest;
the action is the mean of those probes' expert actions, so on the probe images it is exactly the expert's and it
reads every camera it declares). The shipped tiny VLA passes too: in process, through the CLI, and behind
`embeval serve openvla` through the OpenVLA REST client. One probe set (one SimEnv) serves every test.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from embeval.action import Action, ActionSpec, Observation
from embeval.errors import ConfigError
from embeval.subjects.doctor import CHECKS, DoctorConfig, collect_probes, diagnose, gate

ALL = set(CHECKS.names())


@pytest.fixture(scope="module")
def probes():
    return collect_probes(DoctorConfig(episodes=8))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # batch-1 inference: more threads only contend on a shared machine
    yield
    torch.set_num_threads(n)


def _small(img: np.ndarray) -> np.ndarray:
    return img[::4, ::4].astype(np.int16)


class NearestProbe:
    """Correct by construction (see the module docstring). ``used``: the cameras it really reads (default all
    it declares); it always declares every camera of the probes (``cameras``)."""

    id = "nearest-probe"
    action_spec = ActionSpec()

    def __init__(self, probes, used=None):
        self.cameras = list(probes.cameras)
        self.used = list(used or self.cameras)
        self.exact = {c: {} for c in self.used}  # image bytes -> probe (first of identical ones)
        for i, p in enumerate(probes.probes):
            for c in self.used:
                self.exact[c].setdefault(p.observation.images[c].tobytes(), i)
        self.table = {c: np.stack([_small(p.observation.images[c]) for p in probes.probes]) for c in self.used}
        self.expert = probes.expert

    def reset(self, instruction: str) -> None:
        pass

    def _nearest(self, camera: str, img: np.ndarray) -> int:
        i = self.exact[camera].get(img.tobytes())
        return i if i is not None else int(np.argmin(np.abs(self.table[camera] - _small(img)).sum(axis=(1, 2, 3))))

    def act(self, observation: Observation) -> Action:
        idx = [self._nearest(c, observation.images[c]) for c in self.used]
        return Action(self.expert[idx].mean(axis=0))


class Planted:
    """``inner`` with one mistake: ``action(v) -> v`` on its output, ``obs(o) -> o`` on its input."""

    def __init__(self, inner, action=None, obs=None):
        self.inner, self._action, self._obs = inner, action, obs
        self.id, self.action_spec, self.cameras = inner.id, inner.action_spec, getattr(inner, "cameras", None)

    def reset(self, instruction: str) -> None:
        self.inner.reset(instruction)

    def act(self, observation: Observation) -> Action:
        if self._obs is not None:
            observation = self._obs(observation)
        v = self.inner.act(observation).vector.copy()
        return Action(self._action(v)) if self._action is not None else Action(v)


def _set(v, idx, values):
    v[idx] = values
    return v


class _NaNEveryOther:
    calls = 0

    def __call__(self, v):
        self.calls += 1
        return v * np.nan if self.calls % 2 else v  # Action() refuses it, as an adapter's would


def _flip(obs: Observation) -> Observation:
    return Observation({k: np.ascontiguousarray(v[::-1, ::-1]) for k, v in obs.images.items()}, obs.instruction,
                       obs.state, obs.timestamp)


#: name -> (planted mistake, the check that must fail, words its diagnosis must hold)
MISTAKES = {
    "inverted gripper": (dict(action=lambda v: _set(v, 6, 1.0 - v[6])), "gripper_polarity",
                         ["gripper looks inverted", "params.gripper: close1"]),
    "x/y swapped": (dict(action=lambda v: _set(v, [0, 1], v[[1, 0]])), "translation_axes", ["x/y look swapped"]),
    "rotation in degrees": (dict(action=lambda v: _set(v, slice(3, 6), np.rad2deg(v[3:6]))), "rotation_scale",
                            ["degrees read as radians", "deg2rad"]),
    "translation in mm": (dict(action=lambda v: _set(v, slice(0, 3), v[:3] * 1000)), "translation_scale",
                          ["millimetres read as metres", "divide the translation by 1000"]),
    "translation x10": (dict(action=lambda v: _set(v, slice(0, 3), v[:3] * 10)), "translation_scale",
                        ["about 10x", "unnorm_key"]),
    "yaw inverted": (dict(action=lambda v: _set(v, 5, -v[5])), "yaw_direction", ["yaw looks inverted"]),
    "constant action": (dict(action=lambda v: np.array([0.01, 0.0, -0.01, 0.0, 0.0, 0.0, 1.0])), "constant",
                        ["the same action", "ignores its inputs"]),
    "NaN": (dict(action=_NaNEveryOther()), "finite", ["NaN/inf on 49/98 probes"]),
    "image upside down": (dict(obs=_flip), "image_orientation", ["upside down", "rotated 180 degrees"]),
}


def test_correct_policy_passes_every_check(probes):
    report = diagnose(NearestProbe(probes), probes=probes)
    assert report.exit_code == 0, report.format_text()
    assert {c.name for c in report.checks} == ALL and all(c.status == "pass" for c in report.checks)
    assert report.probes == len(probes.probes) == 98 and report.calls == 5 * 98  # upright, repeat, 2 cameras, flipped
    assert report.result("translation_scale").value == pytest.approx(1.0)
    assert report.result("rotation_scale").value == pytest.approx(1.0)
    assert report.result("gripper_polarity").value == 1.0
    assert report.result("translation_axes").value == pytest.approx(1.0)
    assert "declared by the policy" in report.result("cameras_read").detail


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_planted_mistake_is_named(probes, mistake):
    plant, check, words = MISTAKES[mistake]
    report = diagnose(Planted(NearestProbe(probes), **plant), probes=probes)
    assert report.exit_code == 1
    res = report.result(check)
    assert res.status == "fail" and all(w in res.diagnosis for w in words), (res, report.format_text())
    assert "\n" not in res.diagnosis
    if mistake != "image upside down":  # the upside-down policy disagrees on upright images: other checks see that
        assert [c.name for c in report.failed] == [check], report.format_text()


def test_unread_camera_is_named(probes):
    report = diagnose(NearestProbe(probes, used=["third_person"]), probes=probes)
    assert [c.name for c in report.failed] == ["cameras_read"], report.format_text()
    assert "camera 'wrist' never reaches the model" in report.result("cameras_read").diagnosis
    # a model that has one camera by design passes once told so
    ok = diagnose(NearestProbe(probes, used=["third_person"]), DoctorConfig(cameras=("third_person",)), probes=probes)
    assert ok.exit_code == 0, ok.format_text()


def test_frame_mismatch_is_named(probes):
    """Base-frame deltas declared as tool0: y and z come out inverted (the TCP points down); the fix names the frame."""

    class DeclaresTool0(NearestProbe):
        action_spec = ActionSpec(frame="tool0")

    res = diagnose(DeclaresTool0(probes), DoctorConfig(checks=("translation_axes",)), probes=probes).checks[0]
    assert res.status == "fail" and "set params.frame: base" in res.diagnosis, res


def test_gripper_fix_names_the_inverse_convention(probes):
    bad = Planted(NearestProbe(probes), action=lambda v: _set(v, 6, 1.0 - v[6]))
    rep = diagnose(bad, DoctorConfig(checks=("gripper_polarity",)), probes=probes, gripper="signed_open_positive")
    assert "set params.gripper: signed_close_positive (now signed_open_positive)" in rep.checks[0].diagnosis


def test_tiny_vla_passes_on_the_cli(capsys):
    """The issue's Done-when: `embeval subjects doctor config/subjects/tiny_vla.yaml` exits 0 (default probes)."""
    from embeval_cli import main

    assert main(["subjects", "doctor", "config/subjects/tiny_vla.yaml", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["exit_code"] == 0 and out["probes"] == 98 and out["calls"] == 5 * 98
    checks = {c["name"]: c for c in out["checks"]}
    assert set(checks) == ALL, checks
    # the tiny VLA turns about 0.13x as far as the expert: too weak a yaw to tell its direction, so that check skips
    assert {n: c["status"] for n, c in checks.items() if c["status"] != "pass"} == {"yaw_direction": "skip"}, checks
    assert "too weak to tell its direction" in checks["yaw_direction"]["detail"]
    assert 0.5 < checks["translation_scale"]["value"] < 2.0  # measured 0.92
    assert 1 / 30 < checks["rotation_scale"]["value"] < 0.3  # a weak yaw (measured 0.13), not a unit error
    assert checks["gripper_polarity"]["value"] > 0.9 and checks["translation_axes"]["value"] > 0.9


@pytest.fixture(scope="module")
def openvla_url():
    """`embeval serve openvla --subject config/subjects/tiny_vla.yaml` as its own process (one torch thread)."""
    import os

    from embeval.serving.runner import start_serve_process

    proc, url = start_serve_process(["openvla", "--subject", "config/subjects/tiny_vla.yaml"],
                                    env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    try:
        yield url
    finally:
        proc.kill()  # this process only (by its pid)
        proc.wait()


def test_tiny_vla_with_a_planted_mistake_fails_on_the_cli(tmp_path, capsys, openvla_url):
    """A real spec with a wrong convention: the tiny VLA served over OpenVLA REST, the client told the server's
    gripper is close1 (it is open1): exit 1 and the diagnosis names the fix."""
    from embeval_cli import main

    spec = _rest_spec(tmp_path, openvla_url, gripper="close1")
    code = main(["subjects", "doctor", str(spec), "--episodes", "2", "--checks", "gripper_polarity,finite"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "gripper looks inverted" in out and "set params.gripper: open1 (now close1)" in out


def _rest_spec(tmp_path, url: str, gripper: str = "open1"):
    spec = tmp_path / "rest.yaml"
    spec.write_text(f"kind: policy\nadapter: openvla_rest\nurl: {url}\nparams:\n  camera: third_person\n"
                    f"  image_key: full_image\n  extra_cameras: {{wrist_image: wrist}}\n"
                    f"  state_fields: {{tcp_pose: tcp_pose, gripper: gripper}}\n  gripper: {gripper}\n")
    return spec


def test_tiny_vla_over_openvla_rest_passes(tmp_path, probes, openvla_url):
    """The same tiny VLA behind `embeval serve openvla` through the OpenVLA REST client (camera + extra_cameras)."""
    from embeval.subjects.registry import load_subject

    policy = load_subject(_rest_spec(tmp_path, openvla_url))
    half = type(probes)([p for p in probes.probes if p.episode < 4], probes.task)
    report = diagnose(policy, probes=half)
    policy.close()
    assert report.exit_code == 0, report.format_text()
    assert report.result("cameras_read").detail.endswith("cameras declared by the policy)")  # camera + extra_cameras


def test_usage_errors_exit_2(tmp_path, capsys, probes):
    from embeval_cli import main

    assert main(["subjects", "doctor", "config/subjects/openai_vlm.yaml"]) == 2  # a VLM: no action conventions
    assert "the doctor checks policies" in capsys.readouterr().err
    assert main(["subjects", "doctor", "config/subjects/tiny_vla.yaml", "--checks", "gripper_polarty"]) == 2
    assert "did you mean 'gripper_polarity'" in capsys.readouterr().err
    assert main(["subjects", "doctor", "config/subjects/tiny_vla.yaml", "--task", "Juggle"]) == 2
    assert "cannot solve 'Juggle'" in capsys.readouterr().err
    assert main(["subjects", "doctor", str(tmp_path / "missing.yaml")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["subjects", "doctor", "config/subjects/tiny_vla.yaml", "--episodes", "0"])
    assert exc.value.code == 2
    with pytest.raises(ConfigError, match="--cameras: top_down not in the probe observations"):
        diagnose(NearestProbe(probes), DoctorConfig(cameras=("top_down",)), probes=probes)
    with pytest.raises(ConfigError, match="doctor episodes must be a whole number in 1..200"):
        DoctorConfig(episodes=0)


def test_gate_before_a_long_run(probes, tmp_path):
    """`gate` (what a --doctor flag calls): 0 for correct policies, 1 and the failing report for a planted mistake;
    a VLM spec among the subjects is left out."""
    said = []
    vlm = tmp_path / "vlm.yaml"
    vlm.write_text("kind: vlm\nadapter: scripted\n")
    assert gate([NearestProbe(probes), str(vlm)], probes=probes, out=said.append) == 0 and said == []
    mm = Planted(NearestProbe(probes), action=lambda v: _set(v, slice(0, 3), v[:3] * 1000))
    assert gate([NearestProbe(probes), mm], probes=probes, out=said.append) == 1
    assert len(said) == 1 and "millimetres read as metres" in said[0] and "1 check failed: translation_scale" in said[0]


def test_a_policy_that_raises_and_an_unreachable_server(probes, tmp_path, capsys):
    """act() raising on every probe: 'responds' fails with the error, the comparing checks skip, one pass only;
    a server that is not there: exit 2 with the client's one-line error, at once (no retry per probe)."""

    class Broken(NearestProbe):
        def act(self, observation):
            raise RuntimeError("CUDA out of memory")

    report = diagnose(Broken(probes), probes=probes)
    assert [c.name for c in report.failed] == ["responds"] and report.calls == len(probes.probes)
    assert "RuntimeError: CUDA out of memory" in report.result("responds").diagnosis
    assert {c.status for c in report.checks if c.name not in ("responds", "finite")} == {"skip"}
    from embeval_cli import main
    from embeval.serving.runner import free_local_port

    spec = tmp_path / "gone.yaml"
    spec.write_text(f"kind: policy\nadapter: openvla_rest\nurl: http://127.0.0.1:{free_local_port()}\n"
                    "params: {max_retries: 0}\n")
    assert main(["subjects", "doctor", str(spec), "--episodes", "1"]) == 2
    assert "is not reachable" in capsys.readouterr().err


def test_run_with_doctor_refuses_a_failing_policy(tmp_path, capsys, monkeypatch):
    """`embeval run SPEC --doctor`: a policy subject that fails the doctor (a constant action) stops the run before
    any unit: exit 1, the diagnosis and the reason printed, no run folder written."""
    from embeval_cli import main

    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "run.yaml"
    spec.write_text("name: doc\nevaluator: policy-decision\n"
                    "subjects:\n  - {id: constant, kind: policy, adapter: scripted, params: {vector: [0.01, 0, 0, 0, 0, 0.1, 1]}}\n"
                    "items: {source: synthetic, count: 1, params: {size: [32, 24]}}\n"
                    "distortions: [none]\nlevels: [1]\nseeds: [0]\nparams: {camera: third_person, tasks: [pick up the block]}\n")
    code = main(["run", str(spec), "--out", str(tmp_path / "out"), "--doctor"])
    cap = capsys.readouterr()
    assert code == 1
    assert "constant" in cap.out and "nothing was run" in cap.err
    assert not (tmp_path / "out").exists()


def test_act2answer_run_with_doctor_refuses_a_failing_policy(tmp_path, capsys):
    """`embeval act2answer run --doctor`: a policy spec that fails the doctor (a constant action) stops the run before
    any episode: exit 1, the diagnosis printed, no results file."""
    from embeval_cli import main

    spec = tmp_path / "const.yaml"
    spec.write_text("kind: policy\nadapter: scripted\nparams: {vector: [0.01, 0, 0, 0, 0, 0.1, 1]}\n")
    items = tmp_path / "suite"
    assert main(["act2answer", "items", "generate", "--out", str(items), "--per-category", "1", "--categories", "color"]) == 0
    capsys.readouterr()
    code = main(["act2answer", "run", "--items", str(items / "items.jsonl"), "--policy", str(spec), "--out",
                 str(tmp_path / "res"), "--doctor"])
    cap = capsys.readouterr()
    assert code == 1, cap.out + cap.err
    assert "constant" in cap.out and "no episode was run" in cap.err
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").rglob("*.jsonl"))
