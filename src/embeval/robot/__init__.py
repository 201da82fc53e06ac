"""embeval.robot"""
