"""`embeval iqa build` end to end from the two recorded sources: a LeRobot v3.0 dataset (written with
embeval.datasets' writer) and a rosbag2 MCAP image topic (written with the ``rosbags`` library).
Checked: the manifest's references (ids, tasks, scenes, state), every image file (references equal
the recorded frames pixel for pixel), and finite scores in their ranges."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from embeval_cli import main
from embeval.distortion.samples import synthetic_tabletop

W, H = 40, 32
TYPES = ["darken", "white_noise"]
LEVELS = [1, 5]


@pytest.fixture
def subjects(tmp_path):
    files = []
    for name, spec in (("p.yaml", {"kind": "policy", "adapter": "image_stats", "params": {"scale": 0.1}}),
                       ("v.yaml", {"kind": "vlm", "adapter": "scripted"})):
        (tmp_path / name).write_text(yaml.safe_dump(spec))
        files.append(str(tmp_path / name))
    return files


def _frames(n: int, seed: int) -> np.ndarray:
    return np.stack([synthetic_tabletop(W, H, seed=seed + i) for i in range(n)])


def _check_db(db, ref_ids: list[str], frames: dict[str, np.ndarray]) -> tuple[dict, pd.DataFrame]:
    """Manifest rows, files and scores of a database built from ``ref_ids`` (their recorded frames)."""
    man = json.loads((db / "manifest.json").read_text())
    refs = {r["ref_id"]: r for r in man["references"]}
    assert sorted(refs) == sorted(ref_ids)
    for rid, r in refs.items():
        assert (r["width"], r["height"]) == (W, H) and r["source"] == "real" and len(r["tasks"]) == 5
        got = np.asarray(Image.open(db / r["path"]).convert("RGB"))
        assert np.array_equal(got, frames[rid]), rid  # the reference is the recorded frame, unchanged
    images = pd.read_csv(db / "images.csv")
    assert len(images) == len(ref_ids) * len(TYPES) * len(LEVELS) == len(man["images"])
    assert set(images["distortion"]) == set(TYPES) and set(images["level"]) == set(LEVELS)
    for p in images["path"]:
        im = np.asarray(Image.open(db / p))
        assert im.shape == (H, W, 3) and im.dtype == np.uint8
    scores = pd.read_csv(db / "scores.csv")
    assert sorted(scores["image_id"]) == sorted(images["image_id"])
    assert np.isfinite(scores[["decision", "cognition"]].to_numpy()).all()
    assert scores["decision"].between(0, 5).all() and scores["cognition"].between(0, 15).all()
    assert (scores["n_vla"] == 1).all() and (scores["n_vlm"] == 1).all()
    # darkening the whole frame moves the mean-colour policy more at level 5 than at level 1
    d = scores[scores.distortion == "darken"].groupby("level")["decision"].mean()
    assert d[5] < d[1]
    return refs, scores


def test_iqa_build_from_lerobot_dataset(tmp_path, subjects):
    from embeval.datasets import Feature, LeRobotWriter

    feats = {"observation.images.third_person": Feature("image", (H, W, 3)),
             "observation.state": Feature("float32", (8,), ["x", "y", "z", "qx", "qy", "qz", "qw", "gripper"]),
             "action": Feature("float32", (7,), ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"])}
    w = LeRobotWriter(tmp_path / "ds", fps=10, features=feats)
    rng = np.random.default_rng(0)
    episodes = [(_frames(12, 0), "pick up the red cube"), (_frames(12, 50), "open the drawer")]
    states = []
    for imgs, task in episodes:
        st = np.c_[rng.uniform(0.3, 0.6, (12, 3)), np.tile([0.0, 0.0, 0.0, 1.0], (12, 1)), rng.uniform(0, 1, (12, 1))]
        states.append(st.astype(np.float32))
        w.add_episode({"observation.images.third_person": imgs, "observation.state": states[-1],
                       "action": np.zeros((12, 7), np.float32)}, task=task)
    w.finalize()
    db = tmp_path / "db"
    assert main(["iqa", "build", "--out", str(db), "--source", "lerobot", "--path", str(tmp_path / "ds"), "--n", "3",
                 "--distortions", ",".join(TYPES), "--levels", ",".join(map(str, LEVELS)), "--subjects", *subjects]) == 0
    # every 10th frame of the dataset: global frames 0 and 10 (episode 0) and 20 (episode 1, its frame 8)
    all_frames = np.concatenate([e[0] for e in episodes])
    ids = ["lerobot_e0000_f000000", "lerobot_e0000_f000010", "lerobot_e0001_f000020"]
    refs, _ = _check_db(db, ids, dict(zip(ids, all_frames[[0, 10, 20]])))
    assert [refs[i]["tasks"][0] for i in ids] == ["pick up the red cube", "pick up the red cube", "open the drawer"]
    assert [refs[i]["scene_id"] for i in ids] == ["ep0", "ep0", "ep1"]  # one scene per episode: splits keep it whole
    st = np.concatenate(states)
    for i, k in zip(ids, (0, 10, 20)):
        assert refs[i]["state"]["tcp_pose"] == pytest.approx(st[k, :7].tolist(), abs=1e-6)
        assert refs[i]["state"]["gripper"] == pytest.approx([float(st[k, 7])], abs=1e-6)


def _write_bag(path, topic: str, frames: np.ndarray, encoding: str = "rgb8") -> None:
    """A rosbag2 MCAP bag with ``frames`` as sensor_msgs/Image on ``topic`` (rosbags' own writer)."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    Image_, Header, Time = ts.types["sensor_msgs/msg/Image"], ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"]
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        conn = w.add_connection(topic, "sensor_msgs/msg/Image", typestore=ts)
        other = w.add_connection("/joint_states_raw", "std_msgs/msg/String", typestore=ts)  # a topic the source ignores
        for i, f in enumerate(frames):
            t = 1_000_000_000 + i * 100_000_000
            data = f[..., ::-1] if encoding == "bgr8" else f
            msg = Image_(Header(Time(t // 10**9, t % 10**9), "camera"), H, W, encoding, 0, W * 3,
                         np.ascontiguousarray(data).reshape(-1))
            w.write(conn, t, ts.serialize_cdr(msg, "sensor_msgs/msg/Image"))
            w.write(other, t, ts.serialize_cdr(ts.types["std_msgs/msg/String"]("x"), "std_msgs/msg/String"))


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8"])
def test_iqa_build_from_rosbag_topic(tmp_path, subjects, encoding, capsys):
    frames = _frames(25, 7)
    _write_bag(tmp_path / "bag", "/cam/color", frames, encoding)
    db = tmp_path / "db"
    assert main(["iqa", "build", "--out", str(db), "--source", "rosbag", "--path", str(tmp_path / "bag"), "--topic", "/cam/color",
                 "--distortions", ",".join(TYPES), "--levels", ",".join(map(str, LEVELS)), "--subjects", *subjects]) == 0
    ids = ["bag_000000", "bag_000010", "bag_000020"]  # every 10th of 25 frames
    refs, _ = _check_db(db, ids, dict(zip(ids, frames[[0, 10, 20]])))
    assert {r["scene_id"] for r in refs.values()} == {"bag_0000"}  # 10 kept frames form one scene
    # a topic that is not in the bag: the error names the topics it has
    assert main(["iqa", "build", "--out", str(tmp_path / "db2"), "--source", "rosbag", "--path", str(tmp_path / "bag"),
                 "--topic", "/nope", "--subjects", *subjects]) == 2
    err = capsys.readouterr().err
    assert "/nope is not in bag" in err and "/cam/color" in err


def _write_run_bag(folder, frames: np.ndarray, with_tcp: bool = True) -> None:
    """A recorded run in one bag (rosbags' writer): camera at 10 Hz, /joint_states at 30 Hz (UR names +
    embeval's gripper_opening, joints moving), TCP pose at 30 Hz, an instruction that changes half-way,
    episode events and the run's score record."""
    import json as _json

    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    Time, Header = T["builtin_interfaces/msg/Time"], T["std_msgs/msg/Header"]

    def hdr(t):
        return Header(Time(t // 10**9, t % 10**9), "base")

    t0 = 2_000_000_000
    with Writer(folder, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        cam = w.add_connection("/camera/camera/color/image_raw", "sensor_msgs/msg/Image", typestore=ts)
        js = w.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=ts)
        tcp = w.add_connection("/tcp_pose_broadcaster/pose", "geometry_msgs/msg/PoseStamped", typestore=ts)
        ins = w.add_connection("/embeval/instruction", "std_msgs/msg/String", typestore=ts)
        ev = w.add_connection("/embeval/events", "std_msgs/msg/String", typestore=ts)
        sc = w.add_connection("/embeval/scores", "std_msgs/msg/String", typestore=ts)
        S = T["std_msgs/msg/String"]
        msgs = [(t0 - 5_000_000, ins, S("pick up the red cube"), "std_msgs/msg/String"),
                (t0 - 4_000_000, ev, S(_json.dumps({"event": "episode_start", "item": "it1", "distortion": "none",
                                                    "level": 0, "instruction": "pick up the red cube"})), "std_msgs/msg/String"),
                (t0 + 2_050_000_000, ins, S("put the cube in the bowl"), "std_msgs/msg/String"),
                (t0 + 4_000_000_000, ev, S(_json.dumps({"event": "episode_end", "success": True})), "std_msgs/msg/String"),
                (t0 + 4_100_000_000, sc, S(_json.dumps({"item": "it1", "subject": "p", "distortion": "none", "level": 0,
                                                        "seed": 0, "scores": {"execution": 87.5}})), "std_msgs/msg/String")]
        for i, f in enumerate(frames):
            t = t0 + i * 100_000_000
            msgs.append((t, cam, T["sensor_msgs/msg/Image"](hdr(t), H, W, "rgb8", 0, W * 3, np.ascontiguousarray(f).reshape(-1)),
                         "sensor_msgs/msg/Image"))
        for j in range(125):
            t = t0 - 20_000_000 + j * 33_333_333
            q = [0.1 * j * 0.0333, -1.2, 1.1 + 0.01 * j, -1.5, -1.57, 0.0]
            names = ["shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint",
                     "wrist_3_joint", "gripper_opening"]
            msgs.append((t, js, T["sensor_msgs/msg/JointState"](hdr(t), names, np.array(q + [1.0 - j / 125]),
                                                                 np.zeros(7), np.zeros(7)), "sensor_msgs/msg/JointState"))
            if with_tcp:
                P, Pt, Q = T["geometry_msgs/msg/PoseStamped"], T["geometry_msgs/msg/Pose"], T["geometry_msgs/msg/Quaternion"]
                pose = Pt(T["geometry_msgs/msg/Point"](0.4 + 0.001 * j, 0.0, 0.3), Q(1.0, 0.0, 0.0, 0.0))
                msgs.append((t + 1_000_000, tcp, P(hdr(t), pose), "geometry_msgs/msg/PoseStamped"))
        for t, conn, m, typ in sorted(msgs, key=lambda x: x[0]):
            w.write(conn, t, ts.serialize_cdr(m, typ))


def test_iqa_build_from_a_single_mcap_file_takes_state_task_and_outcome_from_the_bag(tmp_path, subjects):
    """`embeval iqa build --source rosbag --path FILE.mcap --tasks tasks.yaml`: per frame the joint state
    nearest in time (judged with the independent mcap / mcap-ros2-support reader), the TCP pose, the
    instruction then in force, the run's Execution score."""
    mcap_ros2 = pytest.importorskip("mcap_ros2.reader")
    frames = _frames(40, 3)
    _write_run_bag(tmp_path / "bagdir", frames)
    (mcap,) = list((tmp_path / "bagdir").glob("*.mcap"))
    single = tmp_path / "run.mcap"
    single.write_bytes(mcap.read_bytes())  # one .mcap file, no metadata.yaml beside it
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump({"*": ["open the drawer", "wipe the table"]}))
    db = tmp_path / "db"
    assert main(["iqa", "build", "--out", str(db), "--source", "rosbag", "--path", str(single), "--tasks",
                 str(tmp_path / "tasks.yaml"), "--distortions", "darken", "--levels", "1", "--subjects", *subjects]) == 0
    # the judge: the bag read back with mcap-ros2-support (log time = the bag's receive time)
    js, tcp, cam = [], [], []
    with open(single, "rb") as fh:
        for m in mcap_ros2.read_ros2_messages(fh):
            if m.channel.topic == "/joint_states":
                js.append((m.log_time_ns, list(m.ros_msg.position)))
            elif m.channel.topic == "/tcp_pose_broadcaster/pose":
                p = m.ros_msg.pose
                tcp.append((m.log_time_ns, [p.position.x, p.position.y, p.position.z, p.orientation.x, p.orientation.y,
                                            p.orientation.z, p.orientation.w]))
            elif m.channel.topic == "/camera/camera/color/image_raw":
                cam.append(m.log_time_ns)
    assert len(cam) == 40 and len(js) == 125

    def nearest(rows, t):
        return min(rows, key=lambda r: abs(r[0] - t))[1]

    man = json.loads((db / "manifest.json").read_text())
    refs = {r["ref_id"]: r for r in man["references"]}
    ids = ["bag_000000", "bag_000010", "bag_000020", "bag_000030"]
    assert sorted(refs) == ids
    joints = []
    for i in ids:
        k = int(i.split("_")[1])
        want = nearest(js, cam[k])
        st = refs[i]["state"]
        assert st["joint_positions"] == pytest.approx(want[:6], abs=1e-12)
        assert st["gripper"] == pytest.approx([want[6]], abs=1e-12)
        assert st["tcp_pose"] == pytest.approx(nearest(tcp, cam[k]), abs=1e-12)
        joints.append(st["joint_positions"])
        assert np.array_equal(np.asarray(Image.open(db / refs[i]["path"]).convert("RGB")), frames[k])
        first = "pick up the red cube" if cam[k] < cam[0] + 2_050_000_000 else "put the cube in the bowl"
        assert refs[i]["tasks"][:3] == [first, "open the drawer", "wipe the table"]
        assert refs[i]["outcome"] == {"item": "it1", "distortion": "none", "level": 0, "execution": 87.5}
        assert refs[i]["scene_id"] == "bag_ep_it1_none_0"
    assert len({tuple(j) for j in joints}) == 4  # the state differs per frame
    scores = pd.read_csv(db / "scores.csv")
    assert (scores["run_execution"] == 87.5).all()
    assert main(["bag", "info", str(single)]) == 0  # the bag commands take the single file too


def test_rosbag_source_without_tcp_topic_uses_forward_kinematics_and_checks_gaps(tmp_path):
    from scipy.spatial.transform import Rotation

    from embeval.errors import InvalidInputError
    from embeval.kinematics.ur import UR5
    from embeval_analysis.iqa.sources import rosbag_source

    _write_run_bag(tmp_path / "bag", _frames(12, 1), with_tcp=False)
    refs = rosbag_source(tmp_path / "bag", stride=5)
    assert [r.ref_id for r in refs] == ["bag_000000", "bag_000005", "bag_000010"]
    for r in refs:
        T = UR5().fk(np.array(r.state["joint_positions"]), frame="base")
        assert r.state["tcp_pose"][:3] == pytest.approx(T[:3, 3].tolist())
        assert abs(np.dot(r.state["tcp_pose"][3:], Rotation.from_matrix(T[:3, :3]).as_quat())) == pytest.approx(1.0)
    with pytest.raises(InvalidInputError, match="max_state_gap_s"):
        rosbag_source(tmp_path / "bag", max_state_gap_s=1e-6)
