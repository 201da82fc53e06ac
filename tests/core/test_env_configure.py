"""``import embeval`` has no side effects on the environment; programs call ``embeval.env.configure()``."""
from __future__ import annotations

import os
import subprocess
import sys

from embeval.env import DDS_PROFILE

_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "MPLBACKEND", "FASTDDS_DEFAULT_PROFILES_FILE",
         "ROS_AUTOMATIC_DISCOVERY_RANGE", "RMW_IMPLEMENTATION", "VK_ICD_FILENAMES", "MS_ASSET_DIR")


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in _VARS and k != "EMBEVAL_DDS_LOCALHOST"}


def _run(code: str, env: dict) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.split()


def test_import_sets_nothing():
    code = ("import os, embeval, embeval_cli, embeval.subjects, embeval.sim, embeval.sim.maniskill, embeval_ros.runtime; "
            f"print(*[os.environ.get(k) for k in {_VARS!r}])")
    assert _run(code, _clean_env()) == ["None"] * len(_VARS)


def test_configure_sets_defaults_and_keeps_user_choices():
    code = f"import os; from embeval.env import configure; configure(); print(*[os.environ.get(k) for k in {_VARS!r}])"
    assert _run(code, _clean_env()) == ["1", "1", "Agg", str(DDS_PROFILE), "LOCALHOST", "rmw_fastrtps_cpp", "None", "None"]
    env = _clean_env() | {"HF_HUB_OFFLINE": "0", "MPLBACKEND": "pdf"}
    assert _run(code, env)[:3] == ["0", "1", "pdf"]
    # opted out of localhost DDS: the DDS variables stay unset
    assert _run(code, _clean_env() | {"EMBEVAL_DDS_LOCALHOST": "0"})[3:6] == ["None"] * 3


def test_cli_configures_its_process():
    code = ("import os, sys; from embeval_cli import main; sys.argv=['embeval']; "
            "import contextlib, io; f=io.StringIO();\nwith contextlib.redirect_stdout(f): main([])\n"
            "print(os.environ.get('HF_HUB_OFFLINE'), os.environ.get('ROS_AUTOMATIC_DISCOVERY_RANGE'))")
    assert _run(code, _clean_env()) == ["1", "LOCALHOST"]


def test_ros_domain_ids_are_unique_across_holders(ros_domain_id):
    """The conftest allocator never hands out an id that another holder (this test's own included) keeps."""
    from conftest import allocate_domain_id

    assert os.environ["ROS_DOMAIN_ID"] == str(ros_domain_id)
    held = [allocate_domain_id() for _ in range(5)]
    ids = [ros_domain_id] + [d for d, _ in held]
    assert len(set(ids)) == len(ids)
    for _, fd in held:
        os.close(fd)
    again, fd = allocate_domain_id()  # released ids come back
    os.close(fd)
    assert again != ros_domain_id
