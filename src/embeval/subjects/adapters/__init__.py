"""Adapters that bring real models in as subjects. Each module imports its heavy dependencies
lazily; they are registered by name in :mod:`embeval.subjects.registry`."""
