"""embeval.sim.backends on the pybullet cell (fast; the ManiSkill side is in test_maniskill*.py):
per-frame distortion seeding, Decision from the first frames, Execution from the final TCP poses."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.errors import ConfigError
from embeval.sim.backends import SimSpec, make_episode_env, run_episode, score_episode
from embeval.subjects.scripted import ImageStatsPolicy


def test_pybullet_episode_scores_match_a_recomputation():
    from embeval.distortion import distort, frame_seed
    from embeval.scoring.decision import DecisionConfig, decision_score

    env = make_episode_env({"backend": "pybullet", "env": "Pick", "width": 48, "height": 32, "max_steps": 3})
    try:
        pol = ImageStatsPolicy(scale=0.2)
        sc, ref, dis = score_episode(env, pol, 1, ("darken", 4, 9))
        assert ref.outcome.n_actions == dis.outcome.n_actions == 3  # spec max_steps
        clean = ref.first_clean_images["third_person"]
        assert np.array_equal(dis.first_clean_images["third_person"], clean)  # same seeded start
        seen = distort(clean, "darken", 4, frame_seed(9, "third_person", 0, "darken", 4))
        assert np.array_equal(dis.first_observation.images["third_person"], seen)
        expect = decision_score([pol.act(ref.first_observation)], [pol.act(dis.first_observation)],
                                DecisionConfig(normalisation="per_pair")).total
        assert sc.decision == pytest.approx(expect) and sc.decision < 1.0
        d = np.linalg.norm(np.subtract(ref.outcome.final_tcp_pose[:3], dis.outcome.final_tcp_pose[:3])) * 100
        assert sc.execution.distance_cm == pytest.approx(d)
        assert sc.execution.score == pytest.approx(100.0 if dis.outcome.success else max(0.0, 100 - d))
        again = run_episode(env, pol, 1, ("darken", 4, 9))
        assert again.outcome.final_tcp_pose == dis.outcome.final_tcp_pose  # reproducible
    finally:
        env.close()


def test_sim_spec_is_validated():
    with pytest.raises(ConfigError, match="sim.backend"):
        SimSpec.from_dict({"backend": "gazebo"})
    with pytest.raises(ConfigError, match="sim.width"):
        SimSpec.from_dict({"width": 8})
    assert SimSpec.from_dict({"env": "PushCube-v1"}).backend == "maniskill"
