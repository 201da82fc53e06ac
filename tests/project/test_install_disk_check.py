"""scripts/install.sh refuses a first install on a disk too full for it, at once and with the numbers,
instead of failing mid-pip with "No space left on device" (as a CI run once did with ~10 GB free)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _fake_df(bin_dir: Path, avail_kb: int) -> None:
    """A `df` that reports ``avail_kb`` KiB available, in POSIX (-P) format, as GNU df prints it."""
    bin_dir.mkdir()
    script = bin_dir / "df"
    script.write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                      f"echo '/dev/vda 264241152 100 {avail_kb} 91% /'\n")
    script.chmod(0o755)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="install.sh installs bubblewrap first (needs root)")
def test_first_install_refused_on_a_full_disk(tmp_path):
    _fake_df(tmp_path / "bin", avail_kb=4 * 1048576 + 1000)  # 4 GB free
    venv = tmp_path / "venv"
    env = {**os.environ, "VENV": str(venv), "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("EMBEVAL_SKIP_DISK_CHECK", None)
    p = subprocess.run(["bash", str(ROOT / "scripts" / "install.sh")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "needs about 16 GB free" in p.stderr and "has 4 GB free" in p.stderr, p.stderr
    assert "VENV=" in p.stderr and "EMBEVAL_SKIP_DISK_CHECK=1" in p.stderr  # the fixes are named
    assert not venv.exists()  # nothing half-written


def test_the_check_reads_real_df_output():
    """The awk field the script reads is `df -Pk`'s Available column on this machine (GiB, rounded down)."""
    out = subprocess.run(["df", "-Pk", str(ROOT)], capture_output=True, text=True, check=True).stdout
    avail_kb = int(out.splitlines()[1].split()[3])
    st = os.statvfs(ROOT)
    # df's Available is f_bavail blocks; both read the same filesystem at nearly the same instant
    assert abs(avail_kb - st.f_bavail * st.f_frsize // 1024) < 1048576  # within 1 GB of each other
