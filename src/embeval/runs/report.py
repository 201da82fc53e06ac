"""``embeval report``: a self-contained HTML report built from a run's results store.

Tables are HTML; figures are matplotlib PNGs embedded as base64, so the file can be mailed or
archived alone. Every figure names the run spec hash and the code version(s) that produced it.
Evaluators add their own sections through :meth:`embeval.runs.registry.Evaluator.report_sections`.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import os
from pathlib import Path

from embeval.runs.registry import ReportSection, get_evaluator, import_plugins

_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}h1{font-size:22px}h2{font-size:18px;margin-top:1.6em;border-bottom:1px solid #ddd}
.meta td{text-align:left}pre{background:#f7f7f7;padding:8px;font-size:12px;overflow:auto}.cap{color:#555;font-size:12px}
img{max-width:100%;border:1px solid #eee}"""


def figure_html(fig) -> str:
    """A matplotlib figure as an embedded PNG ``<img>`` (the figure is closed)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return f'<img alt="figure" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _section_html(s: ReportSection) -> str:
    parts = [f"<h2>{html.escape(s.title)}</h2>", s.html]
    parts += [f"<div>{figure_html(f)}</div>" for f in s.figures]
    if s.caption:
        parts.append(f'<p class="cap">{html.escape(s.caption)}</p>')
    return "\n".join(parts)


def _generic_sections(frame, shards, stamp) -> list[ReportSection]:
    import matplotlib.pyplot as plt
    import pandas as pd

    out = []
    if not frame.empty:
        by_subject = frame.groupby(["subject", "status"]).size().unstack(fill_value=0).reset_index()
        out.append(ReportSection("Units by subject", html=by_subject.to_html(index=False)))
    shard_tab = pd.DataFrame(shards)[["shard", "num_shards", "done", "failed", "total", "rate_per_s"]]
    out.append(ReportSection("Shards", html=shard_tab.to_html(index=False, float_format="%.2f", na_rep="-")))
    done = frame[frame["status"] == "done"] if not frame.empty else frame
    if not done.empty:
        fig, ax = plt.subplots(figsize=(5.5, 3))
        ax.hist(done["duration_s"] * 1000, bins=40, color="#4472c4")
        ax.set_xlabel("unit duration (ms)")
        ax.set_ylabel("units")
        ax.set_title(f"time per unit (wall clock)\n{stamp}", fontsize=8)
        fig.tight_layout()
        per = done.groupby("subject")["duration_s"].describe()[["count", "mean", "50%", "max"]].reset_index()
        out.append(ReportSection("Time per unit", html=per.to_html(index=False, float_format="%.4f"), figures=[fig],
                                 caption="Seconds per unit as measured on the worker, including the watchdog overhead."))
    failed = frame[frame["status"] == "failed"] if not frame.empty else frame
    if not failed.empty:
        cols = ["subject", "item", "distortion", "level", "seed", "attempts", "error"]
        out.append(ReportSection(f"Failed units ({len(failed)}; retried by `embeval resume`)",
                                 html=failed[cols].head(100).to_html(index=False)))
    return out


def build_report(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Write ``out`` (default ``<run dir>/report.html``) from the run's store; returns its path."""
    import yaml

    from embeval.runs.export import results_frame
    from embeval.runs.runner import load_run_spec, open_store

    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report.html"
    with open_store(run_dir) as store:
        info = store.run_info()
        frame = results_frame(store, info["run_id"])
        shards = store.shard_status(info["run_id"])
    versions = sorted(set(frame["code_version"].dropna())) if not frame.empty else [info["code_version"]]
    stamp = f"run spec {info['spec_hash']} | {', '.join(versions)}"
    sections = _generic_sections(frame, shards, stamp)
    try:
        spec = load_run_spec(run_dir)
        import_plugins(spec)
        evaluator = get_evaluator(spec.evaluator)
        done = frame[frame["status"] == "done"] if not frame.empty else frame
        sections = evaluator.report_sections(spec, done, stamp) + sections
    except Exception as exc:  # noqa: BLE001 - the generic report is still worth writing
        sections.append(ReportSection("Evaluator sections unavailable", html=f"<p>{html.escape(str(exc))}</p>"))
    n_done = int((frame["status"] == "done").sum()) if not frame.empty else 0
    n_failed = int((frame["status"] == "failed").sum()) if not frame.empty else 0
    meta = [("run", info["name"] or "-"), ("evaluator", info["evaluator"]), ("run spec hash", info["spec_hash"]),
            ("code version(s)", ", ".join(versions)), ("units", f"{n_done} done, {n_failed} failed, {info['total']} planned"),
            ("created", _dt.datetime.fromtimestamp(info["created"], _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")),
            ("report written", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))]
    body = [f"<h1>embeval run report: {html.escape(info['name'] or info['evaluator'])}</h1>",
            '<table class="meta">' + "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in meta) + "</table>"]
    body += [_section_html(s) for s in sections]
    body.append("<h2>Run spec</h2><pre>" + html.escape(yaml.safe_dump(info["spec"], sort_keys=False)) + "</pre>")
    doc = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>embeval report {info['spec_hash']}</title>"
           f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(doc)
    return out
