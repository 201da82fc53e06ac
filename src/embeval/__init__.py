"""embeval: evaluate embodied AI the way robots see and act.

The core library is pure Python and never imports rclpy. Sub-packages:

- ``kinematics``  UR5 D-H forward/inverse kinematics, frames, joint limits
- ``sim``         pybullet workcell, tasks, scripted expert
- ``robot``       arm backends (sim, ur_rtde, mock), gripper, safety limits
- ``camera``      image sources (sim render, RealSense, folder, rosbag)
- ``distortion``  the distortion registry (30 types x 5 levels)
- ``subjects``    VLM / policy (VLA) / LLM protocols, adapters, embedded models
- ``scoring``     Cognition, Decision, Execution scores and statistics
- ``act2answer``  VQA items as tabletop actions
- ``runs``        run specs, results store, sharding, resume, Ray backend

Importing embeval sets nothing in ``os.environ``; programs call :func:`embeval.env.configure`.
"""

__version__ = "0.1.0"
