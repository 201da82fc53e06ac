"""Model folders that name their own code: nothing in them runs unless the spec says params.trust_remote_code: true.

The attacks: an OpenVLA folder whose config.json auto_map points at a .py file beside it (imported by transformers
with the adapter's old default trust_remote_code=True), and a LeRobot ACT folder whose policy_preprocessor.json names
``subprocess.Popen`` as a step class (LeRobot imports and calls it before checking it is a ProcessorStep). Each
payload would create a marker file; the tests assert the one-line refusal and that the marker never appears, through
load_subject, `embeval subjects check` and `embeval run --check`.
"""
from __future__ import annotations

import json
import sys

import pytest
import yaml

from embeval.errors import ConfigError
from embeval.subjects import load_subject
from embeval.subjects.model_files import check_lerobot_processors, remote_code_files
from embeval_cli import main


def _openvla_folder(d, marker):
    d.mkdir(parents=True, exist_ok=True)
    (d / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                               "from transformers import PretrainedConfig\nclass EvilConfig(PretrainedConfig):\n"
                               "    model_type = 'openvla'\n")
    (d / "config.json").write_text(json.dumps({"model_type": "openvla", "auto_map": {
        "AutoConfig": "evil.EvilConfig", "AutoModelForVision2Seq": "evil.EvilModel"}}))
    (d / "model.safetensors").write_bytes(b"\0" * 16)
    return d


def test_openvla_folder_with_its_own_code_is_refused_by_default(tmp_path, capsys):
    pytest.importorskip("transformers")
    marker = tmp_path / "RAN"
    d = _openvla_folder(tmp_path / "openvla", marker)
    assert remote_code_files(d) == ["evil.py"]
    with pytest.raises(ConfigError, match=r"params\.trust_remote_code: true") as e:
        load_subject({"kind": "policy", "adapter": "openvla_hf", "path": str(d)})
    assert "evil.py" in str(e.value) and "\n" not in str(e.value)
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"id": "x", "kind": "policy", "adapter": "openvla_hf", "path": str(d)}))
    assert main(["subjects", "check", str(spec)]) != 0
    assert "params.trust_remote_code: true" in capsys.readouterr().err
    assert not marker.exists(), "the folder's code ran"


def test_hf_adapter_refuses_auto_map_even_for_a_known_model_type(tmp_path):
    marker = tmp_path / "RAN"
    d = _openvla_folder(tmp_path / "m", marker)
    (d / "config.json").write_text(json.dumps({"model_type": "llava", "auto_map": {"AutoProcessor": "evil.P"}}))
    with pytest.raises(ConfigError, match=r"params\.trust_remote_code: true"):
        load_subject({"kind": "vlm", "adapter": "hf", "path": str(d)})
    assert not marker.exists()


@pytest.fixture(scope="module")
def act_folder(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("lerobot")
    from conftest import tiny_act_checkpoint

    d = tmp_path_factory.mktemp("act")
    tiny_act_checkpoint(d, state=6, action=7, action_std=0.1)
    return d


def _poison(src, dst, marker, key="class", value="subprocess.Popen"):
    import shutil

    shutil.copytree(src, dst)
    f = dst / "policy_preprocessor.json"
    doc = json.loads(f.read_text())
    step = {key: value, "config": {"args": [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]}}
    doc["steps"].insert(0, step)
    f.write_text(json.dumps(doc))
    return dst


def test_lerobot_processor_step_outside_the_registry_is_refused_before_loading(act_folder, tmp_path, capsys):
    marker = tmp_path / "RAN"
    check_lerobot_processors(act_folder)  # LeRobot's own saved steps pass
    d = _poison(act_folder, tmp_path / "evil", marker)
    spec = {"kind": "policy", "adapter": "lerobot", "path": str(d), "params": {"gripper": "signed_open_positive"}}
    with pytest.raises(ConfigError, match=r"policy_preprocessor\.json step 0: class 'subprocess\.Popen'.*"
                                          r"params\.trust_remote_code: true"):
        load_subject(spec)
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({"name": "x", "evaluator": "policy-decision", "subjects": [{"id": "p", **spec}],
                                   "items": {"source": "synthetic", "count": 1}, "distortions": ["none"],
                                   "levels": [1], "seeds": [0]}))
    assert main(["run", str(run), "--check"]) != 0
    err = capsys.readouterr().err
    assert "subprocess.Popen" in err and "Traceback" not in err
    import time
    time.sleep(0.2)
    assert not marker.exists(), "the step's command ran"


def test_lerobot_unknown_registry_name_is_refused_and_opt_in_is_honoured(act_folder, tmp_path):
    d = _poison(act_folder, tmp_path / "evil", tmp_path / "RAN", key="registry_name", value="not_a_lerobot_step")
    with pytest.raises(ConfigError, match="registry_name 'not_a_lerobot_step'"):
        check_lerobot_processors(d)
    check_lerobot_processors(d, trust_remote_code=True)  # the spec opted in: the check steps aside


def test_run_check_still_passes_specs_with_subjects_of_no_folder_or_adapter(capsys):
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "config" / "runs"
    for name in ("quality-smoke.yaml", "synthetic-smoke.yaml", "policy-decision.yaml"):  # metric subjects: no adapter
        assert main(["run", str(root / name), "--check"]) == 0, capsys.readouterr().err
