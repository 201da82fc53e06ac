"""Demo stage ``report``, the last: the quality run's HTML report again, now with the episode videos every
earlier stage recorded (workcell, ManiSkill, IQA Execution runs, Act2Answer), so one page shows them all.
The ``runs`` stage runs before the stages that record Act2Answer and IQA videos, hence a stage of its own."""
from __future__ import annotations

from pathlib import Path

#: (section title, folder under the demo's output folder) of each episode family's videos, in stage order
FAMILIES = (
    ("Workcell episode videos (scripted expert, pybullet)", "workcell/videos"),
    ("ManiSkill episode videos (clean, and reference | distorted)", "maniskill/videos"),
    ("LIBERO episode videos (scripted reach, clean and distorted)", "libero/videos"),
    ("IQA Execution runs (closed loop, reference | distorted)", "iqa/videos"),
    ("Act2Answer episode videos", "act2answer/videos"),
)


def demo_media(out_dir: Path) -> list[tuple[str, Path]]:
    """The families' video folders that exist under ``out_dir``, as ``build_report``'s ``extra_media``."""
    return [(title, Path(out_dir) / sub) for title, sub in FAMILIES if (Path(out_dir) / sub).is_dir()]


def run(ctx) -> None:
    from embeval.runs.report import build_report

    run_dir = ctx.shared.get("runs_quality_dir") or next(iter(sorted((ctx.out_dir / "runs").glob("quality-*"))), None)
    if run_dir is None:
        print("no run folder: the report needs the `runs` stage (embeval demo --only runs ... report)")
        return
    media = demo_media(ctx.out_dir)
    report = build_report(run_dir, ctx.out_dir / "runs" / "report.html", extra_media=media)
    n = {title: len(list(folder.glob("*.mp4"))) for title, folder in media}
    print("episode videos in the report: " + (", ".join(f"{t.split(' (')[0]} {k}" for t, k in n.items()) or "none"))
    print(f"report: {report} (open it in a browser)")
