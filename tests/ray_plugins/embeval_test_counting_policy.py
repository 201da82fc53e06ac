"""A test plugin for the Ray model-actor tests: the image-stats policy that records every load.

``counting_image_stats`` (kind policy) appends ``<pid>`` to the file ``log`` each time it is built, so a test
counts model loads across Ray processes. ``crash_marker``: the first process to act creates that file and
exits at once (a model actor that dies mid-run, once)."""
from __future__ import annotations

import os

from embeval.subjects import register_adapter
from embeval.subjects.scripted import ImageStatsPolicy


@register_adapter("counting_image_stats", "policy")
class CountingImageStatsPolicy(ImageStatsPolicy):
    def __init__(self, id: str = "counting", scale: float = 0.1, log: str = "", crash_marker: str = ""):
        super().__init__(id=id, scale=scale)
        self.crash_marker = crash_marker
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")

    def act(self, observation):
        if self.crash_marker and not os.path.exists(self.crash_marker):
            open(self.crash_marker, "w").close()
            os._exit(1)
        return super().act(observation)
