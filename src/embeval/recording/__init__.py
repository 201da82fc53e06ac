"""rosbag2 (MCAP) recording and reading over ``rosbags``, safe to kill (see :mod:`embeval.recording.bag`)."""
from embeval.recording.bag import BagMessage, BagRecorder, RecoveryReport, bag_info, read_bag, recover_bag, typestore

__all__ = ["BagMessage", "BagRecorder", "RecoveryReport", "bag_info", "read_bag", "recover_bag", "typestore"]
