"""embeval.camera"""
