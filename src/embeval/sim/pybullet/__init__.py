"""The pybullet UR5 cell as a simulator backend (``sim: {backend: pybullet, env: Pick}``).

The cell itself is the rest of :mod:`embeval.sim` (workcell, tasks, scripted expert, perturbations); this folder
is what the backend registry (:mod:`embeval.sim.backend`) needs of it: the episode env (:mod:`.backend`) and the
still renderer of ``embeval sim render`` (:mod:`.render`).
"""
