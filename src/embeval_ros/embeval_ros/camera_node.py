"""camera node: publish an image source on the realsense-ros topics (rgb8 + camera_info) at ``rate_hz``.

Sources (``source`` parameter): sim (the shared pybullet workcell when composed, else the synthetic
tabletop that follows /tcp_pose_broadcaster/pose until the sim arm announces an Act2Answer scene on
/embeval/act2answer/scene (latched): from then on a :class:`embeval.act2answer.mirror.CellMirror` of
that scene following /joint_states and /embeval/act2answer/cube_pose), synthetic, realsense, folder, bag.

``perturb`` (e.g. ``["camera_pose:3", "light_intensity:2"]``): source sim renders through the perturbed camera and
lights drawn from ``seed`` (:class:`embeval.sim.perturb.live.PerturbedRenderer`; the world the arm acts in is unchanged);
the other sources refuse it in one line (:func:`embeval.sim.perturb.live.check_live_perturb`).

``source: realsense`` with ``recording`` (a librealsense ``.db3`` / ``.bag``) plays the recording back through
librealsense (``realtime``: at the recorded rate, else as fast as librealsense reads it), with its intrinsics and
stamps; where depth is there (recorded, or ``depth`` on a live camera) it is published aligned to colour on
realsense-ros's ``aligned_depth_to_color`` topics (16UC1, mm, frame ``camera_color_optical_frame``).
"""
from __future__ import annotations

import time

from sensor_msgs.msg import CameraInfo, Image

from embeval.errors import InvalidInputError, ServerUnavailableError
from embeval_ros import topics as T
from embeval_ros.base import EmbevalNode
from embeval_ros.conversions import camera_info_msg, depth_to_msg, image_to_msg, msg_to_pose6
from embeval_ros.node_spec import RosNode
from embeval_ros.runtime import qos_latched, qos_reliable, run_node

NODE = RosNode("embeval_camera", "CameraNode", start=10,
               description="publishes an image source (sim, synthetic, RealSense, folder, bag) on the realsense-ros topics")


class CameraNode(EmbevalNode):
    def __init__(self, **kw):
        super().__init__(NODE.name, **kw)
        self.source_kind = self.param("source", "sim", "image source: sim | synthetic | realsense | folder | bag")
        rate = self.param("rate_hz", 30.0, "publish rate (Hz)")
        w = self.param("width", 640, "image width (px) for sim/synthetic/realsense")
        h = self.param("height", 480, "image height (px) for sim/synthetic/realsense")
        self.frame_id = self.param("frame_id", "camera_color_optical_frame", "header.frame_id (realsense-ros optical frame)")
        folder = self.param("folder", "", "image folder (source=folder)")
        bag = self.param("bag", "", "rosbag2 folder to replay (source=bag)")
        bag_topic = self.param("bag_topic", T.IMAGE_RAW, "image topic inside the bag (source=bag)")
        serial = self.param("serial", "", "RealSense serial number (source=realsense; empty: first device)")
        recording = self.param("recording", "", "source=realsense: a librealsense recording (.db3, .bag) to play back "
                               "instead of a camera (its own size and stamps)")
        realtime = self.param("realtime", True, "source=realsense recording: play at the recorded rate (false: as fast "
                              "as librealsense reads the file; frames the timer does not take in time are missed)")
        restamp = self.param("restamp", False, "source=realsense recording: stamp frames with the playback time, not "
                             "the recorded one (a rehearsal whose policy checks image age or syncs to the arm)")
        depth = self.param("depth", False, "source=realsense camera: also stream depth, aligned to colour (a recording "
                           "plays the depth it has)")
        self._rs = dict(serial=serial, recording=recording, realtime=realtime, depth=depth, restamp=restamp)
        loop = self.param("loop", True, "restart finite sources (folder, bag) at the end")
        seed = self.param("seed", 0, "episode seed: of the synthetic scene and of what the perturb axes draw")
        from embeval.sim.perturb.live import check_live_perturb

        self.perturb = check_live_perturb(self.param(
            "perturb", [""], "source sim: camera-side scene perturbations AXIS:LEVEL (camera_pose, fov, light_*), "
            "e.g. ['camera_pose:3', 'light_intensity:2']; refused for real and recorded sources"), self.source_kind)
        self.seed = int(seed)
        self.max_frames = self.param("max_frames", 0, "stop publishing after this many frames (0: never)")
        self.camera_name = self.param("sim_camera", "third_person", "camera name in the simulated workcell")
        self.extra = [c for c in self.param("extra_cameras", [""], "source sim: more scene cameras (e.g. wrist), each "
                      "published on /embeval/camera/<name>/image_raw with the main frame's stamp") if c]
        self._render_extra = None  # name -> RGB image, for the extra cameras (the shared workcell or the mirror)
        self.size = (int(w), int(h))
        self.mirror = None  # separate-process sim: a render-only copy of the arm's Act2Answer cell
        self.source = self._make_source(w, h, folder, bag, bag_topic, loop, seed)
        self.pub = self.create_publisher(Image, T.IMAGE_RAW, qos_reliable())
        self.extra_pubs = {c: self.create_publisher(Image, T.camera_topic(c), qos_reliable()) for c in self.extra}
        self.info_pub = self.create_publisher(CameraInfo, T.CAMERA_INFO, qos_reliable())
        self.depth_pubs = None  # (image, camera_info) publishers on the aligned-depth topics, for a source with depth
        if getattr(self.source, "has_depth", False):
            self.depth_pubs = (self.create_publisher(Image, T.ALIGNED_DEPTH, qos_reliable()),
                               self.create_publisher(CameraInfo, T.ALIGNED_DEPTH_INFO, qos_reliable()))
        self.frames = 0
        self.skipped = 0  # unreadable frames skipped (each problem logged once)
        self._bad: set[str] = set()
        self.timer = self.create_timer(1.0 / float(rate), self._tick)

    def _make_source(self, w, h, folder, bag, bag_topic, loop, seed):
        from embeval.camera import make_source

        kind = self.source_kind
        if kind == "sim":
            renderer = self.shared.get("renderer")
            if renderer is not None:
                if self.perturb:
                    renderer = self._perturbed(self.shared.get("arm"), w, h)
                self._render_extra = lambda camera: renderer(camera)
                return make_source("sim", renderer=renderer, camera=self.camera_name)
            kind = "synthetic"  # separate process: mirror the arm's TCP into the synthetic tabletop
            self.get_logger().info("source sim without an in-process workcell (separate process): using the synthetic "
                                   "tabletop that follows /tcp_pose_broadcaster/pose until the sim arm announces an "
                                   "Act2Answer scene; run `embeval graph` to render the arm's own workcell"
                                   + (f" (perturb {self.perturb} applies from then on)" if self.perturb else ""))
            from geometry_msgs.msg import PoseStamped
            from sensor_msgs.msg import JointState
            from std_msgs.msg import String

            self.create_subscription(String, T.SCENE, self._on_scene, qos_latched())
            self.create_subscription(JointState, T.JOINT_STATES, self._on_joints, qos_reliable())
            self.create_subscription(PoseStamped, T.CUBE_POSE, self._on_cube, qos_reliable())
        if kind == "synthetic":
            src = make_source("synthetic", width=w, height=h, seed=seed)
            from geometry_msgs.msg import PoseStamped

            self.create_subscription(PoseStamped, T.TCP_POSE, lambda m: src.set_tcp(msg_to_pose6(m)), qos_reliable())
            return src
        if kind == "realsense":
            rs = self._rs
            if rs["recording"]:
                src = make_source("realsense", recording=rs["recording"], realtime=rs["realtime"], loop=loop,
                                  restamp=rs["restamp"])
                self.get_logger().info(f"playing RealSense recording {rs['recording']} ({src.profile_text}; "
                                       f"{'real time' if rs['realtime'] else 'as fast as it plays'})")
                return src
            return make_source("realsense", width=w, height=h, serial=rs["serial"], depth=bool(rs["depth"]) or None)
        if kind == "folder":
            return make_source("folder", path=folder, loop=loop)
        if kind == "bag":
            return make_source("bag", path=bag, topic=bag_topic, loop=loop)
        return make_source(kind)  # raises ConfigError listing the choices

    def _perturbed(self, holder, w: int, h: int):
        """A :class:`~embeval.sim.perturb.live.PerturbedRenderer` of ``holder``'s workcell (the shared sim arm or the
        mirror: anything with ``cell`` and ``lock``) at ``w`` x ``h`` px."""
        from embeval.sim.perturb.live import PerturbedRenderer
        from embeval.errors import ConfigError

        cell = getattr(holder, "cell", None)
        if cell is None:
            raise ConfigError(f"perturb {self.perturb}: the shared sim renderer has no workcell to perturb; run the "
                              "camera with the sim arm (`embeval graph`) or in its own process")
        r = PerturbedRenderer(cell, self.perturb, self.seed, w, h, lock=getattr(holder, "lock", None))
        r.view()
        self.get_logger().info(f"perturb {self.perturb} (seed {self.seed}): {r.drawn}")
        return r

    def _on_scene(self, msg) -> None:
        """The sim arm loaded an Act2Answer scene: render a mirror of that scene from now on."""
        from embeval.act2answer.mirror import CellMirror
        from embeval.camera import make_source

        if self.mirror is None:
            self.mirror = CellMirror()
            self.source.close()
            w, h = self.size
            render = self._perturbed(self.mirror, w, h) if self.perturb else \
                (lambda camera: self.mirror.render(camera, w, h))
            self.source = make_source("sim", renderer=render, camera=self.camera_name)
            self._render_extra = render
        self.mirror.load(msg.data)

    def _on_joints(self, msg) -> None:
        if self.mirror is None:
            return
        from embeval.kinematics import JOINT_NAMES

        pos = dict(zip(msg.name, msg.position))
        if all(n in pos for n in JOINT_NAMES):
            self.mirror.set_robot([pos[n] for n in JOINT_NAMES], pos.get("gripper_opening"))

    def _on_cube(self, msg) -> None:
        if self.mirror is not None:
            p, o = msg.pose.position, msg.pose.orientation
            self.mirror.set_object("cube", (p.x, p.y, p.z), (o.x, o.y, o.z, o.w))

    def _tick(self) -> None:
        if self.max_frames and self.frames >= self.max_frames:
            return
        t_in = time.perf_counter()
        try:
            frame = self.source.read()
        except (InvalidInputError, ServerUnavailableError) as exc:  # one bad image (corrupt file, other size) or a
            # camera that missed its deadline: skip it, keep streaming
            self.skipped += 1
            if str(exc) not in self._bad:  # once per problem, not at every loop over the folder
                self._bad.add(str(exc))
                self.get_logger().error(f"frame skipped: {exc}")
            return
        if frame is None:
            self.get_logger().info("image source exhausted; camera idle", once=True)
            return
        msg = image_to_msg(frame.image, frame.stamp_ns, self.frame_id)
        k = frame.intrinsics
        if self._render_extra is not None:  # before the main frame, which triggers the policy's step
            for name, pub in self.extra_pubs.items():
                pub.publish(image_to_msg(self._render_extra(name), frame.stamp_ns, f"{name}_optical_frame"))
        self.pub.publish(msg)
        info = camera_info_msg(k.width, k.height, k.fx, k.fy, k.cx, k.cy, frame.stamp_ns, self.frame_id)
        self.info_pub.publish(info)
        if frame.depth is not None and self.depth_pubs is not None:
            self.depth_pubs[0].publish(depth_to_msg(frame.depth, frame.depth_scale, frame.stamp_ns, self.frame_id))
            self.depth_pubs[1].publish(info)
        self.frames += 1
        self.log.add(t_in)

    def close(self) -> None:
        self.source.close()
        if self.mirror is not None:
            self.mirror.close()


def main(args=None) -> int:
    return run_node(CameraNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
