"""embeval.sim"""
