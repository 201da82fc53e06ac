"""embeval.scoring"""
