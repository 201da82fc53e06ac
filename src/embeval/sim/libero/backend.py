"""LIBERO / LIBERO-PRO's backend record (the episodes: :mod:`embeval.sim.libero.episodes`)."""
from __future__ import annotations

from embeval.sim.backend import SimBackend
from embeval.sim.libero import CAMERAS, CONVENTION

BACKEND = SimBackend(
    "libero", "LIBERO and LIBERO-PRO (MuJoCo, in their own interpreter: scripts/install_libero.sh)",
    episodes="embeval.sim.libero.episodes:LiberoEpisodes", default_task="libero_spatial:0",
    tasks="SUITE:TASK_ID (libero_spatial:0, libero_10_swap:3)", cameras=tuple(CAMERAS), action_convention=CONVENTION,
    perturb_unsupported={}, render="embeval.sim.libero.render:render_cli")
