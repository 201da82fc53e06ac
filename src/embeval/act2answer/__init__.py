"""embeval.act2answer"""
