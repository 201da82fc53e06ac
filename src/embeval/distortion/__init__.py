"""embeval.distortion"""
