"""Hostile inputs to the ManiSkill backends: seeds outside ManiSkill's 0..2**32-1 are refused before any episode
(ManiSkill's own reset is the judge of the range), derived 64-bit seeds are mapped deterministically."""
from __future__ import annotations

import pytest

from embeval_cli import main
from embeval.errors import ConfigError
from embeval.sim.maniskill.runtime import MAX_SEED, check_seed, episode_seed


def test_check_seed_covers_every_episode():
    assert check_seed(MAX_SEED) == MAX_SEED and check_seed(MAX_SEED - 1, episodes=2) == MAX_SEED - 1
    with pytest.raises(ConfigError, match=r"--seed: must lie in 0\.\.4294967294, got 4294967295 \(ManiSkill accepts seeds 0\.\.4294967295 .*the 2 "
                                         r"episodes use 2 consecutive seeds from it\)"):
        check_seed(MAX_SEED, episodes=2, what="--seed")
    with pytest.raises(ConfigError, match="0..4294967295"):
        check_seed(2 ** 32)
    with pytest.raises(ConfigError):
        check_seed(-1)
    assert episode_seed(2 ** 63 - 1) == (2 ** 63 - 1) % 2 ** 32 and episode_seed(5) == 5


@pytest.mark.parametrize("argv", [
    ["sim", "episodes", "--backend", "maniskill", "--episodes", "2", "--seed", "4294967295", "--state-only"],
    ["sim", "render", "--backend", "maniskill", "--task", "PickCube-v1", "--seed", "4294967296", "--out", "s32.png"],
])
def test_cli_refuses_out_of_range_seeds_up_front(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "ManiSkill accepts seeds 0..4294967295" in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "s32.png").exists()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_maniskill_itself_takes_exactly_that_range():
    pytest.importorskip("mani_skill")
    from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv

    with ManiSkillEnv(ManiSkillConfig("PickCube-v1", render=False)) as env:
        env.reset(seed=MAX_SEED)  # the top of the range runs
        with pytest.raises(ValueError):
            env.env.reset(seed=MAX_SEED + 1)  # ManiSkill's own refusal (a traceback without the check)
        with pytest.raises(ConfigError, match="ManiSkill accepts seeds"):
            env.reset(seed=MAX_SEED + 1)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("exc", [ValueError("Expecting value: line 1 column 1 (char 0)"),  # json.JSONDecodeError's base
                                 RuntimeError("failed to load mesh"), OSError("bad file")])
def test_bridge_env_build_failure_on_junk_assets_is_one_line(monkeypatch, exc):
    """Assets that pass the file checks but that ManiSkill cannot load: the one asset line, not a traceback."""
    pytest.importorskip("mani_skill")
    import json

    from embeval.sim.maniskill import bridge as W

    if isinstance(exc, ValueError):
        exc = json.JSONDecodeError("Expecting value", "junk", 0)

    def broken(**kw):
        raise exc

    monkeypatch.setattr(W, "asset_problems", lambda env_id: {})
    with pytest.raises(ConfigError) as e:
        W.BridgeEnv(W.BridgeConfig("PutCarrotOnPlateInScene-v1"), env_cls=broken)
    msg = str(e.value)
    assert "\n" not in msg and type(exc).__name__ in msg and "download_asset bridge_v2_real2sim" in msg


@pytest.mark.parametrize("argv,option", [
    (["sim", "render", "--out", "{bad}/x.png"], "--out"),
    (["sim", "episodes", "--backend", "pybullet", "--episodes", "1", "--json", "{bad}/nope.json"], "--json"),
    (["sim", "episodes", "--task", "PokeCube-v1", "--episodes", "1", "--state-only"], "no scripted expert"),
])
def test_output_paths_and_expert_checked_before_any_work(argv, option, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")  # a file where the output folder should be: nothing can be written under it
    assert main([a.replace("{bad}", str(blocker)) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert option in err and err.count("\n") == 1 and "seed" not in out  # no table header, no episode


def test_proc_is_refused_up_front(capsys):
    import os

    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    assert main(["sim", "render", "--out", "/proc/x.png"]) == 2
    assert "cannot write in /proc" in capsys.readouterr().err
