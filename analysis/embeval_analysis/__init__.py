"""Offline analysis for embeval: IQA database and metric training, probing, A2Eval, rosbag readers, reports."""
