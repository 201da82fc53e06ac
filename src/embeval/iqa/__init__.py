"""Online parts of Embodied-IQA: the trained no-reference quality predictor and the live quality
gate that withholds frames from a policy (used by the ROS distortion/camera node; no rclpy here).
Offline database building, export and benchmarks live in ``embeval_analysis.iqa``."""
from embeval.iqa.gate import GateDecision, QualityGate
from embeval.iqa.predictor import FeatureSVRPredictor, NRPredictor, load_predictor

__all__ = ["NRPredictor", "FeatureSVRPredictor", "load_predictor", "QualityGate", "GateDecision"]
