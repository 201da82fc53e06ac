"""The process environment ManiSkill3 / SAPIEN need, set before ``mani_skill`` is imported.

- ``VK_ICD_FILENAMES``: the software Vulkan driver (Mesa lavapipe 25.0, unpacked by
  ``scripts/install.sh`` into ``<venv>/vulkan/``), set only when the user has named no driver
  (``VK_ICD_FILENAMES`` / ``VK_DRIVER_FILES`` unset) and the system has no Vulkan driver of its own
  other than Debian 12's Mesa 22 lavapipe (too old for SAPIEN): a GPU machine keeps its driver.
- ``MS_ASSET_DIR``: ManiSkill's asset folder, inside the environment (``<venv>/maniskill``), so a
  failed download never leaves empty folders in ``~/.maniskill``.
- ``MS_SKIP_ASSET_DOWNLOAD_PROMPT=1``: no interactive prompt (a missing asset is an error instead).

Everything is set in ``os.environ`` only where unset, so child processes inherit it and a user's
own values win. :func:`check_vulkan` opens a Vulkan device and raises a one-line
:class:`VulkanUnavailableError` naming what is missing.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import MutableMapping
from pathlib import Path

import numpy as np

from embeval.errors import EmbevalError

#: ManiSkill seeds numpy's legacy RandomState: it accepts 0 .. 2**32 - 1 (a larger one raises deep in ``reset``)
MAX_SEED = 2 ** 32 - 1


def check_seed(seed: int, episodes: int = 1, what: str = "seed") -> int:
    """``seed`` when ``seed .. seed + episodes - 1`` all lie in ManiSkill's 0 .. :data:`MAX_SEED`; a one-line
    :class:`ConfigError` naming ``what`` otherwise (checked before any episode runs, not at episode N)."""
    from embeval import checks

    runs = f"; the {episodes} episodes use {episodes} consecutive seeds from it" if episodes > 1 else ""
    return checks.seed(seed, what, hi=MAX_SEED - int(episodes) + 1,
                       why=f"ManiSkill accepts seeds 0..{MAX_SEED} (2**32-1){runs}")


def episode_seed(seed: int) -> int:
    """A derived 64-bit episode seed (``derive_seed``) mapped to ManiSkill's range, deterministically (mod 2**32);
    the record keeps the derived seed. User-given seeds are checked with :func:`check_seed` instead."""
    return int(seed) % (MAX_SEED + 1)

#: folders where Vulkan drivers register themselves (the loader's search path)
SYSTEM_ICD_DIRS = ("/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
INSTALL_HINT = "run `bash scripts/install.sh` (it unpacks Mesa lavapipe 25.0 into <venv>/vulkan)"


class VulkanUnavailableError(EmbevalError, RuntimeError):
    """SAPIEN found no usable Vulkan device (no driver, a too-old driver, or missing libraries)."""


def venv_root() -> Path:
    return Path(sys.prefix)


def bundled_icd(root: Path | None = None) -> Path:
    """The ICD json of the software Vulkan driver the install step unpacks."""
    return (root or venv_root()) / "vulkan" / "lvp_icd.json"


def system_drivers(dirs=SYSTEM_ICD_DIRS) -> list[Path]:
    """Vulkan drivers registered system-wide, except Mesa's lavapipe (Debian 12's is too old for SAPIEN)."""
    out = []
    for d in dirs:
        p = Path(d)
        if p.is_dir():
            out.extend(f for f in sorted(p.glob("*.json")) if not f.name.startswith("lvp_icd"))
    return out


def configure(environ: MutableMapping[str, str] | None = None, root: Path | None = None,
              icd_dirs=SYSTEM_ICD_DIRS) -> dict[str, str]:
    """Set the variables above where unset; returns what was set (name -> value)."""
    env = os.environ if environ is None else environ
    root = root or venv_root()
    want = {"MS_ASSET_DIR": str(root / "maniskill"), "MS_SKIP_ASSET_DOWNLOAD_PROMPT": "1"}
    icd = bundled_icd(root)
    if not env.get("VK_ICD_FILENAMES") and not env.get("VK_DRIVER_FILES") and icd.is_file() and not system_drivers(icd_dirs):
        want["VK_ICD_FILENAMES"] = str(icd)
    done = {}
    for k, v in want.items():
        if not env.get(k):
            env[k] = v
            done[k] = v
    return done


def uses_software_vulkan(environ: MutableMapping[str, str] | None = None) -> bool:
    """Whether the Vulkan driver in use is a lavapipe (CPU) one, named through ``VK_ICD_FILENAMES``."""
    env = os.environ if environ is None else environ
    names = env.get("VK_ICD_FILENAMES") or env.get("VK_DRIVER_FILES") or ""
    return "lvp" in names or not system_drivers()


def auto_render_backend(choice: str = "auto") -> str:
    """SAPIEN's render device for ``choice``: "cpu" / "gpu" as given; "auto" is "gpu" only with a system
    Vulkan driver (not the software one) and CUDA, else "cpu"."""
    if choice != "auto":
        return choice
    import torch

    return "cpu" if uses_software_vulkan() or not torch.cuda.is_available() else "gpu"


def diagnose(environ: MutableMapping[str, str] | None = None) -> str:
    """What is missing for Vulkan, in one sentence with the fix."""
    env = os.environ if environ is None else environ
    named = env.get("VK_ICD_FILENAMES") or env.get("VK_DRIVER_FILES")
    if named:
        for f in named.split(os.pathsep):
            p = Path(f)
            if not p.is_file():
                return f"the Vulkan driver file {f} named in VK_ICD_FILENAMES does not exist; {INSTALL_HINT} or unset it"
            try:
                lib = Path(json.loads(p.read_text())["ICD"]["library_path"])
            except (OSError, ValueError, KeyError, TypeError):
                return f"{f} is not a Vulkan ICD json ({{'ICD': {{'library_path': ...}}}}); {INSTALL_HINT}"
            if lib.is_absolute() and not lib.is_file():
                return f"the Vulkan driver library {lib} (named in {f}) is missing; {INSTALL_HINT}"
            if lib.is_file():
                missing = _missing_libraries(lib)
                if missing:
                    return (f"the Vulkan driver {lib.name} cannot load {', '.join(missing)}; install them "
                            "(Debian: apt-get install libllvm15 libdrm2 libxshmfence1 libx11-xcb1 ...) or "
                            f"{INSTALL_HINT}")
        return (f"the Vulkan driver named in VK_ICD_FILENAMES ({named}) offers no device SAPIEN can use "
                "(it needs descriptorBindingPartiallyBound: Mesa >= 24 lavapipe or a GPU driver); " + INSTALL_HINT)
    if not bundled_icd().is_file():
        return f"no Vulkan driver: none is registered system-wide and {bundled_icd()} is missing; {INSTALL_HINT}"
    return ("no Vulkan device SAPIEN can use: the system's driver fails; set VK_ICD_FILENAMES="
            f"{bundled_icd()} to use the CPU renderer")


def _missing_libraries(lib: Path) -> list[str]:
    import subprocess

    try:
        out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split()[0] for line in out.splitlines() if "not found" in line]


def import_sapien():
    """``import sapien`` after :func:`configure`, without its 'Fallback to SAPIEN builtin libvulkan' warning."""
    configure()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*libvulkan.*")
        import sapien
    return sapien


def check_vulkan(device: str = "cpu") -> str:
    """Open a SAPIEN render system on ``device``; return the device summary or raise :class:`VulkanUnavailableError`."""
    try:
        sapien = import_sapien()
    except ImportError as exc:
        raise VulkanUnavailableError(f"ManiSkill is not installed ({exc}); run `bash scripts/install.sh`") from None
    try:
        sapien.render.RenderSystem(device)
    except RuntimeError as exc:
        raise VulkanUnavailableError(f"Vulkan cannot start ({exc}): {diagnose()}") from None
    return sapien.render.get_device_summary()


def _np(x) -> np.ndarray:
    """A ManiSkill batched tensor (num_envs = 1) -> numpy without the batch axis."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    return x[0] if x.ndim >= 1 and x.shape[0] == 1 else x


def raw_pose_matrix(raw_pose) -> np.ndarray:
    """A SAPIEN / ManiSkill raw pose ``[x, y, z, qw, qx, qy, qz]`` (array or tensor, batch of one allowed) -> 4x4 matrix."""
    from embeval.rotations import quat_to_matrix

    p = _np(raw_pose).astype(np.float64).reshape(-1)
    T = np.eye(4)
    T[:3, :3] = quat_to_matrix([p[4], p[5], p[6], p[3]])
    T[:3, 3] = p[:3]
    return T


def download_command(missing) -> str:
    """The shell command that downloads the ManiSkill data sources ``missing`` (uids of ``DATA_SOURCES``)."""
    return " && ".join(f"python -m mani_skill.utils.download_asset {m} -y" for m in missing)
