"""embeval.runs"""
