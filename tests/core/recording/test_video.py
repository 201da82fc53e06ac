"""Episode videos (embeval.recording.video): one decodable mp4 per episode from the CLI, selection by
--record-video, no change to results, a full disk costs one episode's video only, and `embeval bag video`."""
from __future__ import annotations

import errno
import json

import numpy as np
import pytest

from embeval_cli import main
from embeval.recording import video


def _decode_av(path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as c:
        assert c.streams.video[0].codec_context.name == "h264"
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _decode_cv2(path, fps: int = video.FPS) -> list[np.ndarray]:
    import cv2

    cap = cv2.VideoCapture(str(path))
    assert cap.isOpened()
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f[:, :, ::-1])
    assert cap.get(cv2.CAP_PROP_FPS) == fps
    cap.release()
    return frames


def _expert_views(seed: int) -> list[np.ndarray]:
    """The third-person images of an expert Pick episode (each step's, then the final one), rendered here."""
    from embeval.sim.bench_util import SimConfig, SimEnv

    frames = []
    with SimEnv(SimConfig(render=False)) as env:
        obs = env.reset(seed=seed, task="Pick")
        expert = env.expert()
        view = lambda: env.cell.render("third_person", env.config.obs_width, env.config.obs_height)  # noqa: E731
        while not env.done:
            a = expert.act(obs)
            frames.append(view())
            obs = env.step(a).observation
        frames.append(view())
    return frames


def _view_region(frame: np.ndarray, shape) -> np.ndarray:
    """The first view of a decoded frame, downscaled back to the rendered ``shape`` (H, W)."""
    lay = video.layout([shape[:2]])
    x, y, w, h = lay.boxes[0]
    region = frame[y:y + h, x:x + w].astype(np.float64)
    s = lay.scale
    return region.reshape(shape[0], s, shape[1], s, 3).mean(axis=(1, 3))


def _expert_json(tmp_path, name, *extra) -> list[dict]:
    out = tmp_path / f"{name}.json"
    assert main(["sim", "expert", "--task", "Pick", "--episodes", "2", "--json", str(out), *extra]) == 0
    rows = json.loads(out.read_text())
    for r in rows:  # wall-clock fields differ from run to run
        r.pop("seconds_per_episode"), r.pop("physics_steps_per_s")
    return rows


def test_sim_expert_writes_one_decodable_mp4_per_episode(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(video, "DEFAULT_CRF", 12)  # high quality: compare pixels
    vids = tmp_path / "videos"
    plain = _expert_json(tmp_path, "plain")
    recorded = _expert_json(tmp_path, "rec", "--record-video", "all", "--video-dir", str(vids))
    assert recorded == plain  # recording changes no result
    assert "videos: 2 episode(s) kept (all)" in capsys.readouterr().out
    assert sorted(p.name for p in vids.iterdir()) == ["Pick_seed0000.mp4", "Pick_seed0001.mp4"]  # no .part left
    for seed in (0, 1):
        views = _expert_views(seed)
        path = vids / f"Pick_seed{seed:04d}.mp4"
        w, h = video.layout([views[0].shape[:2]]).size
        for frames in (_decode_av(path), _decode_cv2(path)):
            assert len(frames) == len(views)  # one frame per step + the final observation
            assert frames[0].shape == (h, w, 3)
            diffs = [np.abs(_view_region(f, v.shape) - v).mean() for f, v in zip(frames, views)]
            assert max(diffs) < 6, diffs
            assert frames[-1][-video.LINE_H:].max() > 200  # the outcome text on the last frame
            assert frames[0][-video.LINE_H:].max() < 60  # ... not on the first


def test_failures_and_none_keep_nothing_when_every_episode_succeeds(tmp_path, capsys):
    vids = tmp_path / "v"
    assert main(["sim", "expert", "--task", "Pick", "--episodes", "1", "--record-video", "failures",
                 "--video-dir", str(vids)]) == 0
    assert "videos: 0 episode(s) kept (failures)" in capsys.readouterr().out
    assert list(vids.iterdir()) == []  # the successful episode's temporary file is gone
    assert main(["sim", "expert", "--task", "Pick", "--episodes", "1", "--video-dir", str(tmp_path / "n")]) == 0
    assert not (tmp_path / "n").exists()  # --record-video none (default) touches nothing


def _synthetic(recorder, outcomes: list[bool]) -> None:
    """Episodes of 3 random 16x12 frames through the loop hook, ending with ``outcomes``."""
    from embeval.action import Action, Observation

    rng = np.random.default_rng(0)
    for i, ok in enumerate(outcomes):
        with recorder.episode(f"ep{i}") as ep:
            for _ in range(3):
                obs = Observation({"cam": rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)}, "", {}, 0.0)
                video.video_step(obs, Action.hold(1.0))
            ep.finish(ok, "done")
    video.video_step(obs, Action.hold(1.0))  # outside an episode: a no-op


@pytest.mark.parametrize("policy,kept", [("failures", ["ep1", "ep3"]), ("2", ["ep0", "ep1"]), ("all", ["ep0", "ep1", "ep2", "ep3"]),
                                         ("none", [])])
def test_video_policy_selects_the_episodes(tmp_path, policy, kept):
    rec = video.EpisodeRecorder(policy, tmp_path)
    _synthetic(rec, [True, False, True, False])
    assert sorted(p.stem for p in tmp_path.iterdir()) == kept == [p.stem for p in rec.written]
    for p in rec.written:
        frames = _decode_av(p)
        assert len(frames) == 3 and frames[0].shape == (*video.layout([(12, 16)]).size[::-1], 3)


def test_video_policy_parse():
    from embeval.errors import ConfigError

    assert video.VideoPolicy.parse("3") == video.VideoPolicy("first", 3)
    assert not video.VideoPolicy.parse("none").enabled
    for bad in ("0", "-1", "some", "1.5"):
        with pytest.raises(ConfigError, match="choose none, failures, all or a whole number"):
            video.VideoPolicy.parse(bad)


def test_bad_record_video_option_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:  # argparse: usage line + one error line
        main(["sim", "expert", "--task", "Pick", "--episodes", "1", "--record-video", "some"])
    assert exc.value.code == 2
    assert "choose none, failures, all or a whole number" in capsys.readouterr().err


def test_video_dir_that_is_a_file_is_refused_before_any_episode(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["sim", "expert", "--task", "Pick", "--episodes", "1", "--record-video", "all",
                 "--video-dir", str(tmp_path / "f")]) == 2
    err = capsys.readouterr()
    assert "--video-dir" in err.err and "is a file, not a folder" in err.err and "Pick" not in err.out


def test_full_disk_loses_one_episode_and_the_run_goes_on(tmp_path, monkeypatch):
    """A write error (ENOSPC) on episode 0: one line on the log, no file left; episode 1 is written whole."""
    real = video._open_output

    class FullDisk:
        def __init__(self, path):
            self.f = real(path)

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(video, "_open_output", lambda p: FullDisk(p) if p.name.startswith("ep0") else real(p))
    lines: list[str] = []
    rec = video.EpisodeRecorder("all", tmp_path, log=lines.append)
    _synthetic(rec, [False, False])
    assert len(lines) == 1 and "ep0.mp4: not written (No space left on device)" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep1.mp4"]
    assert len(_decode_av(tmp_path / "ep1.mp4")) == 3


def test_writer_pads_odd_sizes_and_refuses_a_size_change(tmp_path):
    with video.EpisodeVideoWriter(tmp_path / "odd.mp4", outcome_frames=1) as w:
        w.add(np.full((7, 9, 3), 128, np.uint8))
        with pytest.raises(ValueError, match="frame 1 is 12x10, the episode.s frames are 10x8"):
            w.add(np.zeros((9, 11, 3), np.uint8))
        w.add(np.full((7, 9, 3), 128, np.uint8))
        assert w.finish() == tmp_path / "odd.mp4"
    frames = _decode_av(tmp_path / "odd.mp4")
    assert len(frames) == 2 and frames[0].shape == (8, 10, 3)


def test_act2answer_run_records_the_first_episode(tmp_path, capsys):
    suite = tmp_path / "suite"
    assert main(["act2answer", "items", "generate", "--out", str(suite), "--categories", "color", "--per-category", "1"]) == 0
    ep = tmp_path / "ep.yaml"
    ep.write_text("episode: {max_steps: 6}\n")
    base = ["act2answer", "run", "--items", str(suite / "items.jsonl"), "--policy", "expert", "--episode", str(ep)]
    assert main([*base, "--out", str(tmp_path / "plain")]) == 0
    assert main([*base, "--out", str(tmp_path / "rec"), "--record-video", "1"]) == 0
    assert "videos (1): 1 mp4 file(s)" in capsys.readouterr().out
    plain = (tmp_path / "plain" / "episodes_expert-answer.jsonl").read_text()
    assert (tmp_path / "rec" / "episodes_expert-answer.jsonl").read_text() == plain
    (path,) = (tmp_path / "rec" / "videos").iterdir()  # default --video-dir: OUT/videos
    assert path.name == "expert-answer_color-0000_original.mp4"
    steps = json.loads(plain.splitlines()[0])["steps"]
    assert len(_decode_av(path)) == len(_decode_cv2(path)) == steps + 1


def _image_bag(path, n: int = 5):
    from embeval.recording import BagRecorder, typestore

    ts = typestore()
    Image, Header, Time = (ts.types[t] for t in ("sensor_msgs/msg/Image", "std_msgs/msg/Header",
                                                    "builtin_interfaces/msg/Time"))
    rng = np.random.default_rng(1)
    imgs = [np.repeat(np.repeat(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8), 8, 0), 8, 1) for _ in range(n)]
    with BagRecorder(path) as rec:
        rec.add_topic("/cam/image", "sensor_msgs/msg/Image")
        for i, im in enumerate(imgs):
            t = 1_000_000_000 + i * 200_000_000  # 5 Hz
            msg = Image(header=Header(stamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id="cam"), height=48, width=64,
                        encoding="rgb8", is_bigendian=0, step=192, data=im.reshape(-1))
            rec.write_msg("/cam/image", msg, t)
    return imgs


def test_bag_video_renders_the_image_topic(tmp_path, capsys):
    imgs = _image_bag(tmp_path / "bag")
    out = tmp_path / "cam.mp4"
    assert main(["bag", "video", str(tmp_path / "bag"), "--out", str(out)]) == 0  # the only image topic
    assert "5 frames of /cam/image at 5 fps" in capsys.readouterr().out
    frames = _decode_av(out)
    assert len(frames) == len(_decode_cv2(out, fps=5)) == 5
    lay = video.layout([(48, 64)], n_lines=1)
    x, y, w, h = lay.boxes[0]
    for f, im in zip(frames, imgs):
        assert np.abs(f[y:y + h, x:x + w].astype(float)[:: lay.scale, :: lay.scale] - im).mean() < 6
    # hostile input: one line, exit 2
    assert main(["bag", "video", str(tmp_path / "bag"), "--out", str(tmp_path / "x.avi")]) == 2
    assert "write an .mp4 file" in capsys.readouterr().err
    assert main(["bag", "video", str(tmp_path / "bag"), "--out", str(out), "--topic", "/nope"]) == 2
    assert "/nope is not in bag" in capsys.readouterr().err


def test_a_view_that_changes_size_ends_the_video_not_the_episode(tmp_path):
    from embeval.action import Action, Observation

    lines: list[str] = []
    rec = video.EpisodeRecorder("all", tmp_path, log=lines.append)
    with rec.episode("resized") as ep:
        for shape in ((12, 16, 3), (12, 16, 3), (12, 20, 3), (12, 16, 3)):  # wider: another frame size
            video.video_step(Observation({"cam": np.zeros(shape, np.uint8)}, "", {}, 0.0), Action.hold(1.0))
        assert ep.finish(True) is None
    assert len(lines) == 1 and "resized.mp4: not written" in lines[0] and list(tmp_path.iterdir()) == []


def test_act2answer_vectorised_workers_write_the_same_video(tmp_path, capsys):
    """--num-envs 2: the worker processes write the kept episode, named and selected as in the sequential run."""
    suite = tmp_path / "suite"
    assert main(["act2answer", "items", "generate", "--out", str(suite), "--categories", "color", "--per-category", "1"]) == 0
    ep = tmp_path / "ep.yaml"
    ep.write_text("episode: {max_steps: 4, rule: disc}\n")
    base = ["act2answer", "run", "--items", str(suite / "items.jsonl"), "--policy", "expert", "--episode", str(ep),
            "--record-video", "failures"]
    assert main([*base, "--out", str(tmp_path / "seq")]) == 0
    assert main([*base, "--out", str(tmp_path / "vec"), "--num-envs", "2"]) == 0
    seq = (tmp_path / "seq" / "episodes_expert-answer.jsonl").read_text()
    assert (tmp_path / "vec" / "episodes_expert-answer.jsonl").read_text() == seq
    failed = sorted(f"expert-answer_{r['item']}_{r['layout']}.mp4" for r in map(json.loads, seq.splitlines())
                    if r["success"] != 1.0)
    assert failed  # 4 steps are too few to answer (the disc rule: a held cube over the board answers nothing)
    for run in ("seq", "vec"):
        assert sorted(p.name for p in (tmp_path / run / "videos").iterdir()) == failed


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # ManiSkill 3.0.1 on NumPy 2
def test_maniskill_episode_video_shows_reference_beside_distorted(tmp_path):
    vids, out = tmp_path / "v", tmp_path / "eps.json"
    assert main(["sim", "episodes", "--backend", "maniskill", "--task", "PickCube-v1", "--episodes", "1", "--width", "32",
                 "--height", "32", "--distortion", "white_noise", "--level", "5", "--record-video", "all",
                 "--video-dir", str(vids), "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    (path,) = vids.iterdir()
    assert path.name == "PickCube-v1_seed0000_white_noise5.mp4"
    frames = _decode_av(path)
    lay = video.layout([(32, 32), (32, 32)])
    assert len(frames) == row["distorted_steps"] + 1 and frames[0].shape == (*lay.size[::-1], 3)
    (x0, y, w, h), (x1, *_) = lay.boxes
    ref, dis = frames[0][y:y + h, x0:x0 + w].astype(float), frames[0][y:y + h, x1:x1 + w].astype(float)
    assert np.abs(ref - dis).mean() > 10  # level-5 white noise on the right half only


# ---------------------------------------------------------------------- embeval run: record_video in the spec
_SIM_IQA = {"evaluator": "sim-iqa", "sim": {"backend": "pybullet", "env": "Pick", "width": 64, "height": 48, "max_steps": 4},
            "subjects": [{"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}}],
            "items": {"source": "synthetic", "count": 1}, "distortions": ["none", "darken"], "levels": [5],
            "backend": {"progress": False}}


def _run_outputs(spec_map: dict, run_dir) -> tuple[str, dict]:
    from embeval.runs import ResultsStore, parse_spec, run

    s = run(parse_spec(spec_map, base_dir=run_dir.parent), run_dir)
    assert (s.done, s.failed) == (s.total, 0)
    with ResultsStore(run_dir / "results.sqlite") as st:
        return s.run_id, {(r["item"], r["distortion"], r["level"]): r["outputs"] for r in st.rows(s.run_id)}


def test_sim_iqa_run_records_each_units_episode_without_changing_results(tmp_path):
    from embeval.runs.export import results_frame
    from embeval.runs.report import UnitMatcher, build_report
    from embeval.runs.runner import open_store

    plain_id, plain = _run_outputs(_SIM_IQA, tmp_path / "plain")
    rec_id, rec = _run_outputs({**_SIM_IQA, "record_video": "all"}, tmp_path / "rec")
    assert rec_id == plain_id and rec == plain  # cosmetic: the same run, the same numbers
    assert not (tmp_path / "plain" / "videos").exists()
    vids = tmp_path / "rec" / "videos"
    assert sorted(p.name for p in vids.iterdir()) == ["stats_item00000_darken5_seed0.mp4", "stats_item00000_none0_seed0.mp4"]
    dark = _decode_av(vids / "stats_item00000_darken5_seed0.mp4")
    none = _decode_av(vids / "stats_item00000_none0_seed0.mp4")
    assert len(dark) == 4 + 1 and len(none) == 4 + 1  # one frame per action (max_steps 4), then the final view
    view_h = video.layout([(48, 64)]).boxes[0][3]
    assert dark[0].shape[1] == 2 * none[0].shape[1] and view_h == 192  # reference | distorted, 4x upscaled
    left, right = dark[0][20:20 + view_h, :256].mean(), dark[0][20:20 + view_h, 256:].mean()
    assert right < 0.5 * left  # darken level 5: the policy's view is the dark one
    with open_store(tmp_path / "rec") as st:
        frame = results_frame(st, rec_id)
    assert UnitMatcher(frame).match("videos/stats_item00000_darken5_seed0.mp4")["distortion"] == "darken"
    page = build_report(tmp_path / "rec").read_text()
    assert page.count("<video ") == 2 and "distortion darken, level 5" in page


def test_policy_decision_run_records_failures_only(tmp_path, monkeypatch):
    spec = {"evaluator": "policy-decision", "items": {"source": "synthetic", "count": 2, "params": {"size": [32, 24]}},
            "subjects": [{"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}}],
            "distortions": ["none", "darken", "overexposure"], "levels": [5], "backend": {"progress": False},
            "params": {"tasks": ["pick up the block", "press the button"]}, "record_video": "all", "video_dir": "vids"}
    monkeypatch.chdir(tmp_path)  # video_dir is relative to the current folder
    _, outs = _run_outputs(spec, tmp_path / "all")
    files = sorted((tmp_path / "vids").iterdir())
    assert len(files) == 6
    frames = _decode_av(files[0])
    assert len(frames) == 2 * video.FPS  # one second per task
    _, outs_f = _run_outputs({**spec, "record_video": "failures", "video_dir": "fail"}, tmp_path / "failures")
    flipped = sum(any(abs(a[6] - b[6]) > 0.5 for a, b in zip(o["reference_actions"], o["distorted_actions"]))
                  for o in outs_f.values())
    assert outs_f == outs and 0 < flipped < 6
    assert len(list((tmp_path / "fail").glob("*.mp4"))) == flipped


def test_record_video_in_a_spec_is_checked(tmp_path):
    from embeval.errors import ConfigError
    from embeval.runs import parse_spec, plan_run

    with pytest.raises(ConfigError, match=r"spec.record_video: 'some': choose none, failures, all or a whole number"):
        parse_spec({**_SIM_IQA, "record_video": "some"})
    with pytest.raises(ConfigError, match=r"spec.video_dir: is an absolute path"):
        parse_spec({**_SIM_IQA, "video_dir": "/tmp/v"})
    spec = {"evaluator": "synthetic", "items": {"source": "synthetic", "count": 1}, "record_video": "all"}
    with pytest.raises(ConfigError, match="spec.record_video: evaluator 'synthetic' runs no episodes to record"):
        plan_run(parse_spec(spec))
    assert parse_spec({**_SIM_IQA, "record_video": 3}).hash == parse_spec(_SIM_IQA).hash


# ---------------------------------------------------------------------- iqa build: closed-loop Execution runs
class _Drift:
    """A policy that moves 1 cm along x each step (gripper open)."""

    def reset(self, instruction: str) -> None:
        pass

    def act(self, obs):
        from embeval.action import Action

        return Action(np.array([0.01, 0, 0, 0, 0, 0, 1.0]))


def test_iqa_closed_loop_execution_run_is_recorded_beside_its_reference(tmp_path):
    from embeval_analysis.iqa.database import _closed_loop_run

    ref = {"ref_id": "sim00000_third_person", "view": "third_person", "width": 64, "height": 48, "sim_seed": 0}
    envs: dict = {}
    try:
        plain = _closed_loop_run(ref, _Drift(), ("darken", 5, 7), envs, 3, ["third_person", "wrist"])[0]
        rec = video.EpisodeRecorder("all", tmp_path)
        with rec.episode("tiny_sim00000_third_person_darken5_seed0") as ep:
            out = _closed_loop_run(ref, _Drift(), ("darken", 5, 7), envs, 3, ["third_person", "wrist"])[0]
            ep.finish(out.success, "Execution x")
        clean = _closed_loop_run(ref, _Drift(), None, envs, 3, ["third_person", "wrist"])[0]
    finally:
        for e in envs.values():
            e.close()
    assert (out.n_actions, out.success, out.final_tcp_pose) == (plain.n_actions, plain.success, plain.final_tcp_pose)
    assert out.n_actions == clean.n_actions == 3  # recording changes nothing
    frames = _decode_av(rec.written[0])
    assert len(frames) == 3 + 1  # each action's view, then the final one
    (x0, y, w, h), (x1, _, _, _) = video.layout([(48, 64), (48, 64)]).boxes
    assert frames[0].shape[1] == 2 * w  # reference | distorted
    assert frames[-1][y:y + h, x1:].mean() < 0.5 * frames[-1][y:y + h, x0:x0 + w].mean()  # darkened final view


def test_iqa_build_record_video_without_execution_runs_exits_2(tmp_path, capsys):
    assert main(["iqa", "build", "--out", str(tmp_path / "db"), "--record-video", "all"]) == 2
    err = capsys.readouterr().err
    assert "--record-video records the closed-loop Execution runs" in err and "--execution-images N" in err
    assert not (tmp_path / "db").exists()


def test_sim_episodes_sheet_is_a_labelled_grid(tmp_path, monkeypatch, capsys):
    from embeval import contact_sheet
    from embeval.image_io import read_image

    calls = []
    real = contact_sheet.labelled_grid
    monkeypatch.setattr(contact_sheet, "labelled_grid", lambda *a, **k: calls.append((a, k)) or real(*a, **k))
    sheet = tmp_path / "sheet.png"
    assert main(["sim", "episodes", "--backend", "pybullet", "--episodes", "2", "--seed", "3", "--distortion", "darken",
                 "--level", "4", "--width", "48", "--height", "40", "--sheet", str(sheet)]) == 0
    (cells, rows, cols), kw = calls[0]
    assert rows == ["episode seed 3\ndarken, level 4", "episode seed 4\ndarken, level 4"]
    assert cols == ["clean, step 0", "distorted, step 0"] and [len(r) for r in cells] == [2, 2]
    assert cells[0][0].shape == (40, 48, 3) and cells[0][1].mean() < 0.6 * cells[0][0].mean()  # darkened
    assert kw["title"].startswith("Pick (pybullet), expert: third_person 48x40 px")
    assert set(kw["notes"]) == {(0, 1), (1, 1)} and kw["notes"][(0, 1)].startswith("D ")
    img = read_image(sheet)
    assert img.shape == real(cells, rows, cols, title=kw["title"], notes=kw["notes"]).shape
    assert "labelled" in capsys.readouterr().out
