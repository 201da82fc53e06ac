"""Scene-level perturbations of the UR5 cell (embeval.sim.perturb): each axis is applied in its stated unit, seeded,
monotone in level where it has a direction, keeps the task solvable; refusals are one line."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from embeval.errors import ConfigError
from embeval.sim.perturb import (
    AXES,
    LEVELS,
    Perturbation,
    Perturbations,
    axes,
    get_axis,
    load,
    markdown_table,
)
from embeval.sim import SimConfig, SimEnv
from embeval.sim.tasks import make_task, tasks
from embeval.sim.workcell import Workcell, intrinsics_projection

W, H = 96, 72


def P(text: str) -> Perturbations:
    return Perturbations.parse(text)


@pytest.fixture(scope="module")
def cell():
    with Workcell(SimConfig(mode="kinematic")) as c:
        yield c


def render(cell, verb, seed, perturb=None, camera="third_person", w=W, h=H):
    scene, task = make_task(verb, seed)
    prep = load(cell, scene, task, seed, perturb)
    return cell.render(camera, w, h), prep


def params(axis, level, verb="Pick", seed=3):
    scene, task = make_task(verb, seed)
    prep = Perturbations([Perturbation(axis, level)]).prepare(scene, task, seed)
    return prep.applied[0][2], prep, scene, task


# ---------------------------------------------------------------- registry, units, refusals
def test_ten_axes_with_units_and_five_rising_levels():
    names = AXES.names()
    assert set(names) == {"camera_pose", "fov", "light_intensity", "light_direction", "light_color", "table_texture",
                          "background_texture", "distractors", "initial_state", "instruction"}
    for a in axes():
        assert a.unit and a.description and a.direction
        for q in a.quantities:
            assert len(q.ranges) == 5
            assert all(q.ranges[i][1] <= q.ranges[i + 1][0] for i in range(4)), (a.name, q.ranges)
    md = markdown_table().splitlines()
    assert len(md) == 2 + len(names) and md[0].count("| level") == 5
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "sim.md").read_text()
    assert markdown_table() in doc  # docs/sim.md's axes table is what `embeval perturb list --markdown` prints


def test_cli_list_json_and_markdown(capsys):
    from embeval_cli import main

    assert main(["perturb", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    cam = next(r for r in rows if r["axis"] == "camera_pose")
    assert [q["unit"] for q in cam["quantities"]] == ["cm", "deg"]
    assert cam["levels"]["3"] == "translation 4-7 cm; rotation 4-7 deg"
    assert main(["perturb", "list", "--markdown"]) == 0
    assert "| `fov` | image | horizontal FOV change (deg) | ±2-4 deg |" in capsys.readouterr().out


@pytest.mark.parametrize("words, message", [
    ("camera_pos:3", "did you mean 'camera_pose'"),
    ("camera_pose:0", "level must be a whole number 1..5"),
    ("camera_pose:6", "level must be a whole number 1..5"),
    ("camera_pose", "write AXIS:LEVEL"),
    ("fov:x", "write AXIS:LEVEL"),
    ("fov:2,fov:3", "given twice"),
])
def test_refusals_are_one_line(words, message, capsys):
    with pytest.raises(ConfigError, match=message) as e:
        P(words)
    assert "\n" not in str(e.value)
    from embeval_cli import main

    assert main(["sim", "render", "--task", "Pick", "--perturb", words, "--out", "/tmp/never.png"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_order_given_does_not_matter(cell):
    a, _ = render(cell, "Pick", 4, P("fov:2,camera_pose:3"))
    b, _ = render(cell, "Pick", 4, P("camera_pose:3,fov:2"))
    assert np.array_equal(a, b)


# ---------------------------------------------------------------- each axis, in its unit
def _cam_frame(cam) -> np.ndarray:
    f = np.subtract(cam.target, cam.position)
    f /= np.linalg.norm(f)
    r = np.cross(f, cam.up)
    r /= np.linalg.norm(r)
    return np.stack([r, np.cross(r, f), -f], axis=1)


def test_camera_pose_moves_by_the_sampled_cm_and_degrees():
    last = (0.0, 0.0)
    for level in LEVELS:
        p, prep, scene, _ = params("camera_pose", level)
        before, after = scene.camera("third_person"), prep.scene.camera("third_person")
        moved_cm = 100 * np.linalg.norm(np.subtract(after.position, before.position))
        turned = np.degrees(Rotation.from_matrix(_cam_frame(after) @ _cam_frame(before).T).magnitude())
        assert moved_cm == pytest.approx(p["translation_cm"], abs=1e-6)
        assert turned == pytest.approx(p["rotation_deg"], abs=1e-4)
        lo, hi = get_axis("camera_pose").quantities[0].range(level)
        assert lo <= moved_cm <= hi and lo <= turned <= hi
        assert moved_cm > last[0] and turned > last[1]  # monotone in level for one seed
        last = (moved_cm, turned)
        assert prep.scene.camera("wrist") == scene.camera("wrist")  # the wrist camera stays on the TCP


def _target_pixels(cell, task) -> int:
    cam = cell.scene.camera("third_person").scaled(2 * W, 2 * H)
    seg = cell.p.getCameraImage(cam.width, cam.height, cell.camera_view(cam), intrinsics_projection(cam),
                                renderer=cell.p.ER_TINY_RENDERER, physicsClientId=cell.client)[4]
    return int((np.asarray(seg).reshape(cam.height, cam.width) == cell.bodies[task.target].body_id).sum())


def test_fov_changes_by_the_sampled_degrees_and_apparent_object_size(cell):
    from embeval.sim.perturb.fov import hfov_deg

    for seed in (3, 6):  # one seed narrows, the other widens
        scene, task = make_task("Pick", seed)
        load(cell, scene, task, seed, None)
        sizes = [_target_pixels(cell, task)]
        changes = []
        for level in LEVELS:
            prep = load(cell, scene, task, seed, P(f"fov:{level}"))
            d = prep.applied[0][2]["fov_change_deg"]
            assert hfov_deg(prep.scene.camera("third_person")) - hfov_deg(scene.camera("third_person")) == pytest.approx(d)
            assert get_axis("fov").quantities[0].range(level)[0] <= abs(d) <= get_axis("fov").quantities[0].range(level)[1]
            changes.append(d)
            sizes.append(_target_pixels(cell, task))
        sign = np.sign(changes[0])
        assert all(np.sign(c) == sign for c in changes)
        steps = np.diff(sizes)
        assert (steps < 0).all() if sign > 0 else (steps > 0).all(), (changes, sizes)  # wider: smaller object
    assert {np.sign(params("fov", 1, seed=s)[0]["fov_change_deg"]) for s in (3, 6)} == {-1.0, 1.0}


def test_light_intensity_changes_mean_brightness_monotonically(cell):
    signs = set()
    for seed in (3, 4, 6):
        clean, _ = render(cell, "Pick", seed)
        means = [clean.mean()]
        for level in LEVELS:
            img, prep = render(cell, "Pick", seed, P(f"light_intensity:{level}"))
            means.append(img.mean())
        s = np.sign(prep.applied[0][2]["intensity_change_pct"])
        signs.add(s)
        assert (np.sign(np.diff(means)) == s).all(), (seed, s, means)
    assert signs == {-1.0, 1.0}


def test_light_direction_turns_by_the_sampled_degrees():
    for level in LEVELS:
        p, prep, scene, _ = params("light_direction", level)
        a, b = np.asarray(scene.lighting.direction), np.asarray(prep.scene.lighting.direction)
        angle = np.degrees(np.arccos(a @ b / np.linalg.norm(a) / np.linalg.norm(b)))
        assert angle == pytest.approx(p["direction_change_deg"], abs=1e-6)
        lo, hi = get_axis("light_direction").quantities[0].range(level)
        assert lo <= angle <= hi


def test_light_color_temperature_shifts_red_blue_balance(cell):
    from embeval.sim.perturb.light_color import planckian_xy, tint

    assert np.allclose(tint(6500), 1.0)
    assert planckian_xy(6500) == pytest.approx((0.3135, 0.3236), abs=2e-3)  # the Planckian locus at 6500 K
    assert tint(3000)[0] == 1.0 and tint(3000)[2] < 0.6 and tint(11000)[2] == 1.0 and tint(11000)[0] < 0.9
    seen = set()
    for seed in (3, 4, 5, 6):
        clean, _ = render(cell, "Pick", seed)
        ratios = [clean[..., 0].mean() / clean[..., 2].mean()]
        for level in LEVELS:
            img, prep = render(cell, "Pick", seed, P(f"light_color:{level}"))
            ratios.append(img[..., 0].mean() / img[..., 2].mean())
        warmer = prep.applied[0][2]["temperature_change_k"] < 0
        seen.add(warmer)
        assert (np.diff(ratios) > 0).all() if warmer else (np.diff(ratios) < 0).all(), (seed, ratios)
    assert seen == {True, False}


def test_table_texture_contrast_in_percent_and_table_pixel_spread(cell):
    from embeval.image_io import read_image
    from embeval.sim.perturb.table_texture import table_mean_rgb

    seed = 3
    scene, _ = make_task("Pick", seed)
    assert scene.table_texture is None
    clean, _ = render(cell, "Pick", seed, w=160, h=120)
    spread = [clean[80:, 40:120].std()]  # the table in front of the camera
    for level in LEVELS:
        img, prep = render(cell, "Pick", seed, P(f"table_texture:{level}"), w=160, h=120)
        p = prep.applied[0][2]
        tex = read_image(prep.scene.table_texture, "t").astype(float)
        lo, hi = get_axis("table_texture").quantities[0].range(level)
        rms = 100 * tex.mean(axis=2).std() / 255
        assert lo - 1.0 <= rms <= hi and rms == pytest.approx(p["contrast_pct"], abs=1.0)  # clipping takes a little
        assert np.allclose(tex.reshape(-1, 3).mean(0) / 255, table_mean_rgb(scene), atol=0.02)  # same mean colour
        spread.append(img[80:, 40:120].std())
    assert (np.diff(spread) > 0).all(), spread


def test_background_texture_retextures_the_walls(cell):
    clean, _ = render(cell, "Pick", 3, w=160, h=120)
    spread = [clean[:25].std()]  # the walls at the top of the third-person view
    for level in LEVELS:
        img, _ = render(cell, "Pick", 3, P(f"background_texture:{level}"), w=160, h=120)
        spread.append(img[:25].std())
        assert np.array_equal(img[90:, 60:100], clean[90:, 60:100])  # the table in front is untouched
    assert (np.diff(spread) > 0).all(), spread


def test_distractors_count_placement_and_prefix_across_levels():
    from embeval.sim.perturb.distractors import RADIUS, footprint

    prev = []
    for level in LEVELS:
        p, prep, scene, _ = params("distractors", level, verb="Place", seed=2)
        lo, hi = get_axis("distractors").quantities[0].range(level)
        assert lo <= p["count"] <= hi and len(prep.scene.objects) == len(scene.objects) + p["count"]
        assert p["objects"][:len(prev)] == prev  # a higher level adds to the lower one's
        prev = p["objects"]
        extra = prep.scene.objects[len(scene.objects):]
        used = {o.color_name for o in scene.objects}
        for d in extra:
            assert d.color_name not in used
            for o in scene.objects:
                assert np.hypot(d.xy[0] - o.xy[0], d.xy[1] - o.xy[1]) >= footprint(o) + RADIUS + 0.05 - 1e-9


def test_distractors_without_room_are_refused(monkeypatch):
    import embeval.sim.perturb.distractors as mod

    monkeypatch.setattr(mod, "AREA", ((0.50, 0.52), (0.0, 0.02)))
    scene, task = make_task("Pick", 3)
    with pytest.raises(ConfigError, match="not stay solvable") as e:
        P("distractors:5").prepare(scene, task, 3)
    assert "\n" not in str(e.value)


def test_initial_state_offsets_joints_by_the_sampled_degrees(cell):
    scene, task = make_task("Pick", 3)
    load(cell, scene, task, 3, None)
    home = cell.q.copy()
    last = np.zeros(6)
    for level in LEVELS:
        prep = load(cell, scene, task, 3, P(f"initial_state:{level}"))
        off = np.asarray(prep.applied[0][2]["offsets_deg"])
        assert np.allclose(np.degrees(cell.q - home), off)
        lo, hi = get_axis("initial_state").quantities[0].range(level)
        assert (np.abs(off) >= lo - 1e-9).all() and (np.abs(off) <= hi + 1e-9).all()
        assert (np.abs(off) > last).all()
        last = np.abs(off)
        assert not cell._contact_status().stopped


def test_instruction_bank_keeps_verb_and_objects_for_every_task():
    from embeval.sim.perturb.instruction import (
        BANK,
        added_words,
        keeps_task,
        paraphrase,
        words,
    )

    for level, templates in BANK.items():
        lo, hi = get_axis("instruction").quantities[0].range(level)
        assert all(lo <= added_words(t) <= hi for t in templates)
    for t in tasks():
        scene, task = make_task(t.verb, 1)
        for level in LEVELS:
            for u in np.linspace(0, 0.999, 7):
                new = paraphrase(task.instruction, level, float(u))
                assert keeps_task(new, task.instruction, task, scene), new
                assert len(words(new)) > len(words(task.instruction))
    scene, task = make_task("Place", 1)  # "place the X cube on the Y plate"
    plate = scene.object(task.reference).describe()
    assert not keeps_task(task.instruction.replace(plate, "box"), task.instruction, task, scene)
    assert not keeps_task(task.instruction.replace("place", "put"), task.instruction, task, scene)


def test_instruction_reaches_the_policy_and_nothing_else_changes():
    with SimEnv(SimConfig(mode="kinematic", obs_width=W, obs_height=H)) as env:
        clean = env.reset(3, "Place")
        env.perturb = P("instruction:3")
        obs = env.reset(3, "Place")
    assert obs.instruction != clean.instruction and clean.instruction.lower() in obs.instruction.lower()
    assert env.perturbation["instruction"]["instruction"] == obs.instruction
    assert all(np.array_equal(obs.images[c], clean.images[c]) for c in clean.images)


# ---------------------------------------------------------------- seeded, composable, solvable
ALL5 = ",".join(f"{a}:5" for a in ("camera_pose", "fov", "light_intensity", "light_direction", "light_color",
                                   "table_texture", "background_texture", "distractors", "initial_state", "instruction"))


def test_seeded_composition_same_seed_same_scene(cell):
    a, pa = render(cell, "Pick", 7, P(ALL5))
    b, pb = render(cell, "Pick", 7, P(ALL5))
    c, _ = render(cell, "Pick", 8, P(ALL5))
    clean, _ = render(cell, "Pick", 7)
    assert np.array_equal(a, b) and pa.record() == pb.record()
    assert not np.array_equal(a, c) and not np.array_equal(a, clean)
    # composing does not change what each axis draws
    assert pa.record()["fov"] == params("fov", 5, seed=7)[0] | {"level": 5}


def test_image_axes_leave_the_world_state_unchanged():
    image_axes = [a.name for a in axes() if a.changes == "image"]
    with SimEnv(SimConfig(mode="kinematic", render=False)) as env:
        env.reset(5, "Place")
        clean = env.cell.world_state()
        env.perturb = P(",".join(f"{a}:5" for a in image_axes))
        env.reset(5, "Place")
        pert = env.cell.world_state()
    assert set(env.perturbation) == set(image_axes)
    assert np.allclose(pert.tcp_pose, clean.tcp_pose)
    for name, o in clean.objects.items():
        assert np.allclose(pert.objects[name].position, o.position)


def test_unperturbed_reset_is_unchanged():
    with SimEnv(SimConfig(mode="kinematic", obs_width=W, obs_height=H)) as env:
        a = env.reset(3, "Pick")
        env.perturb = Perturbations()
        b = env.reset(3, "Pick")
    assert env.perturbation == {}
    assert all(np.array_equal(a.images[c], b.images[c]) for c in a.images)


@pytest.mark.parametrize("axis", ["distractors", "initial_state"])
def test_expert_still_solves_at_level_1(axis):
    from embeval.sim.bench_util import expert_success

    r = expert_success("Pick", 20, config=SimConfig(render=False, mode="kinematic"), perturb=P(f"{axis}:1"))
    assert r["rate"] >= 0.95, r["failures"]


def test_perturbation_composes_with_image_distortion():
    from embeval.distortion import FrameDistorter
    from embeval.sim.backends import make_episode_env

    env = make_episode_env({"backend": "pybullet", "env": "Pick", "width": 64, "height": 64})
    try:
        env.env.perturb = P("camera_pose:3")
        obs = env.reset(3, ("jpeg", 2, 3))
        clean = env.clean_images["third_person"]
        with Workcell(SimConfig()) as c:
            scene, task = make_task("Pick", 3)
            load(c, scene, task, 3, P("camera_pose:3"))
            want = c.render("third_person", 64, 64)
    finally:
        env.close()
    assert np.array_equal(clean, want)  # the camera saw the perturbed world
    expected = FrameDistorter("jpeg", 2, seed=3, stream="third_person")(clean)
    assert np.array_equal(obs.images["third_person"], expected)  # ... then the distortion


# ---------------------------------------------------------------- command line
def test_cli_render_perturbed_differs_and_grid(tmp_path, capsys):
    from embeval_cli import main
    from embeval.image_io import read_image

    a, b = tmp_path / "a.png", tmp_path / "b.png"
    assert main(["sim", "render", "--task", "Pick", "--seed", "3", "--width", "96", "--height", "72", "--out", str(a)]) == 0
    assert main(["sim", "render", "--task", "Pick", "--seed", "3", "--width", "96", "--height", "72",
                 "--perturb", "camera_pose:3", "--out", str(b)]) == 0
    ia, ib = read_image(a), read_image(b)
    assert ia.shape == ib.shape and np.abs(ia.astype(int) - ib.astype(int)).mean() > 2
    g = tmp_path / "g.png"
    assert main(["perturb", "grid", "--axes", "fov", "instruction", "--width", "64", "--height", "48", "--out", str(g)]) == 0
    assert read_image(g).shape[0] > 2 * 48
    capsys.readouterr()
    # other backends: the axes are applied there (tests/core/sim/test_perturb_backends.py), a bad level refused in one line
    assert main(["sim", "render", "--backend", "libero", "--perturb", "distractors:6", "--out", str(a)]) == 2
    err = capsys.readouterr().err.strip()
    assert "level must be a whole number 1..5" in err and len(err.splitlines()) == 1


def test_cli_expert_and_episodes_take_perturb(tmp_path, capsys):
    from embeval_cli import main

    assert main(["sim", "expert", "--task", "Pick", "--episodes", "2", "--mode", "kinematic",
                 "--perturb", "distractors:2", "--perturb", "initial_state:2"]) == 0
    assert "2/2" in capsys.readouterr().out
    out = tmp_path / "e.json"
    assert main(["sim", "episodes", "--backend", "pybullet", "--task", "Pick", "--episodes", "1", "--seed", "3",
                 "--perturb", "light_intensity:2", "--json", str(out)]) == 0
    row = json.loads(out.read_text())[0]
    assert row["perturbation"]["light_intensity"]["level"] == 2 and row["success"]


def test_cli_score_table_and_records(tmp_path, capsys):
    from embeval_cli import main

    out = tmp_path / "s.json"
    assert main(["perturb", "score", "--task", "Pick", "--episodes", "1", "--seed", "3", "--axes", "fov",
                 "initial_state", "--levels", "5", "--json", str(out)]) == 0
    rows = {r["axis"]: r for r in json.loads(out.read_text())}
    assert rows["fov"]["decision"] == 1.0 and rows["fov"]["execution"] == 100.0  # the expert reads no pixels
    assert rows["initial_state"]["decision"] < 1.0  # another start pose: another first action
    assert rows["initial_state"]["perturbation"]["initial_state"]["level"] == 5
    assert "initial_state" in capsys.readouterr().out
    assert main(["perturb", "score", "--axes", "fov", "--levels", "6"]) == 2


# --------------------------------------------------------------------------- sensitivity and IQA-vs-scene (analysis)
def _sens_rows():
    """Constructed rows: axis a level 1 (4 seeds, 3 successes, drops 0, 0, 10, 100; references all succeed)."""
    base = dict(kind="scene", axis="a", level=1, decision=0.5, reference_success=True)
    return [dict(base, seed=i, execution=e, success=s)
            for i, (e, s) in enumerate([(100.0, True), (100.0, True), (90.0, True), (0.0, False)])]


def test_sensitivity_wilson_and_paired_statistics_match_scipy():
    from scipy.stats import binomtest

    from embeval_analysis.perturb import sensitivity, sign_test

    (r,) = sensitivity(_sens_rows(), n_resamples=500, seed=1)
    ci = binomtest(3, 4).proportion_ci(0.95, method="wilson")
    assert (r.n, r.success_rate) == (4, 0.75)
    assert r.success_lo == pytest.approx(ci.low, abs=1e-12) and r.success_hi == pytest.approx(ci.high, abs=1e-12)
    assert r.success_change == -0.25
    assert r.success_p == pytest.approx(binomtest(0, 1, 0.5).pvalue)  # one discordant seed: exact McNemar p 1.0
    assert r.execution_drop == pytest.approx(27.5) and r.execution == pytest.approx(72.5)
    assert r.drop_p == pytest.approx(binomtest(2, 2, 0.5).pvalue) == pytest.approx(0.5)  # zeros dropped
    assert sign_test([1, 2, 3, 4, 5, 6, -1]) == pytest.approx(binomtest(6, 7, 0.5).pvalue)
    assert 0.0 <= r.drop_lo <= r.execution_drop <= r.drop_hi <= 100.0


def test_bootstrap_mean_interval_agrees_with_scipy_percentile_bootstrap():
    from scipy.stats import bootstrap

    from embeval_analysis.perturb import bootstrap_mean

    x = np.random.default_rng(0).normal(10.0, 2.0, 40)
    lo, hi = bootstrap_mean(x, n_resamples=20000, seed=3)
    ref = bootstrap((x,), np.mean, n_resamples=20000, method="percentile", random_state=3).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.05) and hi == pytest.approx(ref.high, abs=0.05)
    assert bootstrap_mean([5.0, 5.0]) == (5.0, 5.0)


def test_sensitivity_refuses_rows_without_the_paired_fields():
    from embeval.errors import InvalidInputError
    from embeval_analysis.perturb import sensitivity

    with pytest.raises(InvalidInputError, match="reference_success"):
        sensitivity([{"axis": "a", "level": 1, "decision": 1.0, "execution": 100.0, "success": True}])


def test_iqa_correlations_match_a_hand_computed_spearman():
    from embeval_analysis.perturb import iqa_correlations

    # scene, aligned: psnr 10, 20, 30, 40 vs decision 0.1, 0.3, 0.2, 0.4 -> ranks 1 2 3 4 vs 1 3 2 4
    # rho = 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 6 * 2 / 60 = 0.8; execution constant -> undefined (nan)
    rows = [dict(kind="scene", axis="light_intensity", psnr=p, decision=d, execution=100.0)
            for p, d in zip([10, 20, 30, 40], [0.1, 0.3, 0.2, 0.4])]
    # distortion: psnr falls as decision rises -> rho -1
    rows += [dict(kind="distortion", axis="jpeg", psnr=p, decision=d, execution=e)
             for p, d, e in zip([5, 6, 7], [0.9, 0.8, 0.7], [100.0, 50.0, 0.0])]
    rows += [dict(kind="scene", axis="camera_pose", psnr=1.0, decision=0.5, execution=100.0)]  # n < 3: nan
    out = {c["group"]: c for c in iqa_correlations(rows, ["psnr"])}
    assert list(out) == ["scene, aligned", "scene, camera moved", "scene, all", "distortion"]
    assert out["scene, aligned"]["rho_decision"] == pytest.approx(0.8)
    assert np.isnan(out["scene, aligned"]["rho_execution"]) and np.isnan(out["scene, camera moved"]["rho_decision"])
    assert out["scene, all"]["n"] == 5
    assert out["distortion"]["rho_decision"] == pytest.approx(-1.0)
    assert out["distortion"]["rho_execution"] == pytest.approx(-1.0)


def test_write_outputs_writes_tables_and_plot(tmp_path):
    from embeval_analysis.perturb import iqa_correlations, sensitivity, write_outputs

    rows = _sens_rows() + [dict(r, level=5, execution=0.0, success=False) for r in _sens_rows()]
    outs = write_outputs(tmp_path, sensitivity(rows, n_resamples=100), iqa_correlations([], ["psnr"]))
    assert [p.name for p in outs.paths()] == ["sensitivity.csv", "sensitivity.md", "sensitivity.png",
                                             "iqa_vs_scene.csv", "iqa_vs_scene.md"]
    assert "| scene | a | 5 | 4 |" in outs.sensitivity_md.read_text()
    assert outs.plot.read_bytes()[:4] == b"\x89PNG"


def test_perturbations_demo_stage_runs_at_quick_size(tmp_path, monkeypatch):
    """The stage end to end at a reduced size: one seed, one axis, one distortion, one level."""
    from embeval_demo import DemoContext
    from embeval_demo import perturbations as stage

    monkeypatch.setattr(stage, "AXES", ("light_intensity",))
    monkeypatch.setattr(stage, "DISTORTIONS", ("jpeg",))
    monkeypatch.setattr(stage, "LEVELS", (5,))
    monkeypatch.setattr(stage, "size", lambda quick: stage.StageSize(seeds=1, width=32, height=32))
    out = stage.run(DemoContext(tmp_path, quick=True))
    assert [(r.axis, r.level, r.n) for r in out["sensitivity"]] == [("light_intensity", 5, 1), ("jpeg", 5, 1)]
    assert (tmp_path / "perturb_grid.png").exists() and (tmp_path / "perturb" / "sensitivity.png").exists()
    assert {c["metric"] for c in out["iqa"]} <= {"psnr", "ssim", "piqe"}
