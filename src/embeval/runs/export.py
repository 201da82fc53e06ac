"""Results as a pandas DataFrame and as Parquet (pyarrow) for analysis."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from embeval.runs.store import ResultsStore

#: Columns of every exported row besides the ``out.<name>`` columns.
BASE_COLUMNS = ("run_id", "subject", "item", "distortion", "level", "seed", "group_key", "status", "attempts", "error",
                "unit_seed", "spec_hash", "code_version", "worker", "started", "finished", "duration_s", "weights", "outputs")


def results_frame(store: ResultsStore, run_id: str | None = None, status: str | None = None):
    """One row per recorded unit. ``outputs`` stays as canonical JSON text; every scalar output
    (number, string, bool, null) also gets its own ``out.<name>`` column."""
    import pandas as pd

    run_id = run_id or store.run_info()["run_id"]
    rows = store.rows(run_id, status)
    flat: list[dict[str, Any]] = []
    for r in rows:
        outs = r["outputs"] or {}
        d = {k: r[k] for k in BASE_COLUMNS if k != "outputs"}
        d["outputs"] = None if r["outputs"] is None else json.dumps(outs, sort_keys=True)
        for k, v in outs.items():
            if v is None or isinstance(v, (int, float, str, bool)):
                d[f"out.{k}"] = v
        flat.append(d)
    frame = pd.DataFrame(flat, columns=None if flat else list(BASE_COLUMNS))
    for c in [c for c in frame.columns if c.startswith("out.")]:
        if frame[c].map(lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))).all():
            frame[c] = pd.to_numeric(frame[c], errors="coerce")  # null -> NaN for numeric outputs
    return frame


def export_parquet(run_dir: str | os.PathLike, out: str | os.PathLike, status: str | None = None) -> Path:
    """Write the run's results to ``out`` (Parquet, pyarrow); returns the path."""
    from embeval.runs.runner import open_store

    out = Path(out)
    with open_store(run_dir) as store:
        frame = results_frame(store, status=status)
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(out, engine="pyarrow", index=False)
    return out
