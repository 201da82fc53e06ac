"""embeval.kinematics"""
