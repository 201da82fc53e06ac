"""A test plugin for vectorised episodes on Ray: every :meth:`embeval.sim.vector.VectorPool.run` call appends
``<pid> <episodes> <workers kept>`` to the file named by ``$EMBEVAL_TEST_VECTOR_LOG`` when it is set (the Ray actors
inherit the variable), so a test sees which process ran the vectorised episodes."""
from __future__ import annotations

import os

from embeval.sim.vector import VectorPool

_run = VectorPool.run


def _logged_run(self, policy, units, *args, **kwargs):
    units = list(units)
    log = os.environ.get("EMBEVAL_TEST_VECTOR_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {len(units)} {int(self.running)}\n")
    yield from _run(self, policy, units, *args, **kwargs)


if getattr(VectorPool.run, "__name__", "") != "_logged_run":
    VectorPool.run = _logged_run
