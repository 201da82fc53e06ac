"""``embeval report`` in a real browser (headless Chromium through playwright) and its media handling.

The browser test builds a small synthetic run, puts H.264 episode videos and an image in the run folder,
writes the report to another folder (so linked media go through a relative path) and opens it over
file://: every image decodes, every video loads its metadata with the duration and size it was written
with, nothing overflows a 1280 px window, and the page logs no error. Set ``EMBEVAL_REPORT_SCREENSHOT``
to a path to keep a copy of the screenshot. Skips only when no ``chromium`` executable is on PATH.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from embeval.errors import ConfigError
from embeval.runs.report import MediaLimits, UnitMatcher, build_report, media_sections, probe_video
from embeval.runs.runner import run
from embeval.runs.spec import parse_spec

SPEC = {
    "name": "browser",
    "evaluator": "synthetic",
    "subjects": [{"id": "a", "kind": "synthetic"}, {"id": "b", "kind": "synthetic", "params": {"offset": 0.3}}],
    "items": {"source": "synthetic", "count": 2},
    "levels": [1, 2],
    "seeds": [0],
    "backend": {"progress": False, "unit_timeout_s": 20},
}


def write_mp4(path: Path, width: int, height: int, frames: int, fps: int, codec: str = "libx264",
              title: str | None = None) -> Path:
    """A small test video: a bar growing left to right over ``frames`` frames."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as c:
        if title:
            c.metadata["title"] = title
        s = c.add_stream(codec, rate=fps)
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            f = np.full((height, width, 3), 30, np.uint8)
            f[:, : (i + 1) * width // frames] = (210, 70, 40)
            f[height // 3: 2 * height // 3, width // 3: 2 * width // 3, 1] = 220
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    run(parse_spec(SPEC, base_dir=tmp_path), d)
    return d


def _wide_table_section(self, spec, frame, stamp):
    """An evaluator section with a table far wider than the page (40 columns)."""
    import pandas as pd

    from embeval.runs.registry import ReportSection

    wide = pd.DataFrame([[f"value {r}.{c}" for c in range(40)] for r in range(3)], columns=[f"column {c}" for c in range(40)])
    return [ReportSection("A wide table", html=wide.to_html(index=False))]


@pytest.mark.timeout(180)
def test_report_in_headless_chromium(run_dir, tmp_path, monkeypatch):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no `chromium` executable on PATH: install Debian's chromium package (scripts/install.sh does) "
                    "to open the report in a real browser")
    from playwright.sync_api import sync_playwright

    from embeval.runs.evaluators.synthetic import SyntheticEvaluator

    monkeypatch.setattr(SyntheticEvaluator, "report_sections", _wide_table_section)
    videos = {  # path under the run folder: (width, height, frames, fps)
        "videos/a/item00001/none-L2-seed0.mp4": (64, 64, 20, 10),
        "videos/b/item00000/none-L1-seed0.mp4": (64, 48, 30, 10),
        "videos/wrist/episode7.mp4": (320, 240, 15, 5),  # linked: over the per-file limit below
    }
    for rel, (w, h, n, fps) in videos.items():
        write_mp4(run_dir / rel, w, h, n, fps, title="episode 7, wrist camera" if "wrist" in rel else None)
    from PIL import Image

    Image.fromarray(np.full((60, 2400, 3), 140, np.uint8)).save(run_dir / "wide_strip.png")  # wider than the page
    big = (run_dir / "videos/wrist/episode7.mp4").stat().st_size
    extra = write_mp4(tmp_path / "demo" / "act2answer" / "videos" / "tiny-vla_item3_cups.mp4", 96, 64, 8, 10)
    limit = max([(run_dir / r).stat().st_size for r in videos if "wrist" not in r] + [extra.stat().st_size])
    assert big > limit
    report = build_report(run_dir, tmp_path / "site" / "report.html", MediaLimits(embed_file_bytes=limit),
                          extra_media=[("Act2Answer episode videos", tmp_path / "demo" / "act2answer" / "videos")])
    text = report.read_text()
    assert text.count("<video ") == 4 and text.count("data:video/mp4;base64,") == 3
    assert "<h2>Act2Answer episode videos (1)</h2>" in text and "act2answer/videos/tiny-vla_item3_cups.mp4</code>" in text
    assert 'src="../run/videos/wrist/episode7.mp4"' in text

    shot = tmp_path / "report.png"
    errors, failed = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, timeout=60_000,
                                     args=["--no-sandbox"] if os.geteuid() == 0 else [])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(30_000)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: failed.append(f"{r.url[:80]}: {r.failure}"))
            page.goto(report.resolve().as_uri(), wait_until="load")
            page.wait_for_function("[...document.querySelectorAll('video')].every(v => v.readyState >= 2 || v.error)")
            imgs = page.evaluate("[...document.images].map(i => ({alt: i.alt, complete: i.complete, w: i.naturalWidth, "
                                 "shown: i.getBoundingClientRect().width}))")
            vids = page.evaluate("[...document.querySelectorAll('video')].map(v => ({src: v.currentSrc.slice(0, 300), "
                                 "ready: v.readyState, duration: v.duration, w: v.videoWidth, h: v.videoHeight, "
                                 "err: v.error && v.error.message, shown: v.getBoundingClientRect().width}))")
            widths = page.evaluate("({doc: document.documentElement.scrollWidth, win: window.innerWidth, "
                                   "wrapped: [...document.querySelectorAll('.scroll')].map(d => d.scrollWidth > d.clientWidth)})")
            page.wait_for_timeout(500)  # the players paint their first frame and drop the loading spinner
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()

    # every <img>: the section figures (synthetic score replaced by the wide table; time per unit) and the strip
    assert len(imgs) == 2 and all(i["complete"] and i["w"] > 0 for i in imgs), imgs
    assert {i["w"] for i in imgs} >= {2400} and all(i["shown"] <= 1280 for i in imgs), imgs
    assert {i["alt"] for i in imgs} == {"time per unit (wall clock)", "wide_strip.png"}  # figures say what they show
    assert len(vids) == 4
    by_src = {}
    for v in vids:
        assert v["err"] is None and v["ready"] >= 2, v
        rel = next(r for r in videos if r in v["src"]) if v["src"].startswith("file:") else None
        by_src[rel or f"embedded {v['w']}x{v['h']}"] = v
    assert set(by_src) == {"videos/wrist/episode7.mp4", "embedded 64x64", "embedded 64x48", "embedded 96x64"}, list(by_src)
    for key, (w, h, n, fps) in (("embedded 64x64", videos["videos/a/item00001/none-L2-seed0.mp4"]),
                                ("embedded 96x64", (96, 64, 8, 10)),  # the extra media folder's
                                ("embedded 64x48", videos["videos/b/item00000/none-L1-seed0.mp4"]),
                                ("videos/wrist/episode7.mp4", videos["videos/wrist/episode7.mp4"])):
        v = by_src[key]
        assert (v["w"], v["h"]) == (w, h) and v["duration"] == pytest.approx(n / fps, abs=0.11), (key, v)
    assert by_src["embedded 64x64"]["shown"] >= 256  # small frames are scaled up to be seen
    assert widths["doc"] <= widths["win"] == 1280, widths  # nothing overflows the window
    assert any(widths["wrapped"]), widths  # the wide table scrolls inside its wrapper
    assert errors == [] and failed == [], (errors, failed)
    assert shot.stat().st_size > 10_000
    if os.environ.get("EMBEVAL_REPORT_SCREENSHOT"):
        shutil.copy(shot, os.environ["EMBEVAL_REPORT_SCREENSHOT"])


def test_media_captions_limits_and_problems(run_dir, tmp_path):
    """Captions name the unit a path names; limits link or leave out files; unreadable and
    non-browser videos are reported, not shown as broken players; symlinks are not followed."""
    from embeval.runs.export import results_frame
    from embeval.runs.runner import open_store

    with open_store(run_dir) as store:
        frame = results_frame(store)
    m = UnitMatcher(frame)
    assert m.match("videos/b/item00001/none-level2-s0.mp4") == {
        "subject": "b", "item": "item00001", "distortion": "none", "level": 2, "seed": 0}
    assert m.match("videos/b/item00001/none-L12-seed0.mp4") is None  # level 12 is not level 1 or 2
    assert m.match("videos/item00001-L2.mp4") is None  # subject a or b: two units, no label
    assert m.match("videos/ab/item00001-L2.mp4") is None  # "ab" is neither subject
    assert m.match("b_item00000_none2_seed0000.mp4")["level"] == 2  # the level joined to the distortion
    assert m.match("b_item00000_none_seed0000.mp4") is None  # no level named: level 1 or 2
    assert m.match("b_item00000_none_level_1_s0.mp4")["level"] == 1

    v = write_mp4(run_dir / "videos/a/item00000/none-L1-seed0.mp4", 48, 32, 12, 6)
    info = probe_video(v)
    assert (info.width, info.height, info.frames, info.codec) == (48, 32, 12, "h264")
    assert info.fps == 6 and info.duration_s == pytest.approx(2.0, abs=0.01)
    write_mp4(run_dir / "videos/old/mpeg4.mp4", 32, 32, 4, 4, codec="mpeg4")
    (run_dir / "videos/broken.mp4").write_bytes(b"\0" * 64)
    (run_dir / "videos/link.mp4").symlink_to(v)
    for i in range(3):
        write_mp4(run_dir / f"videos/z/more{i}.mp4", 16, 16, 2, 2)
    secs = media_sections(run_dir, tmp_path / "r.html", frame, MediaLimits(max_files=4, embed_total_bytes=v.stat().st_size))
    assert [s.title for s in secs] == ["Episode videos (6)"]  # link.mp4 skipped; the report is not an image
    body = secs[0].html
    assert "subject a · item item00000 · distortion none, level 1 · seed 0" in body
    assert "48×32 px, 12 frames at 6 fps = 2.00 s, H.264; embedded" in body
    assert "videos/broken.mp4</code>: not a readable video (Invalid data found when processing input)" in body
    assert "codec mpeg4 does not play in browsers; re-encode it as H.264" in body
    assert body.count("<video ") == 2 and body.count("data:video/mp4") == 1  # the total limit links the second
    assert "the report&#x27;s" in body or "the report's" in body
    assert "2 more videos under the run folder are not shown (at most 4" in body

    extra = tmp_path / "other" / "videos"
    write_mp4(extra / "b_item00000_none1_seed0.mp4", 16, 16, 2, 2)
    secs = media_sections(run_dir, tmp_path / "r.html", frame, MediaLimits(), [("Other videos", extra)])
    assert [s.title for s in secs] == ["Episode videos (6)", "Other videos (1)"]
    assert "subject b" not in secs[1].html and f"<code>{extra.as_posix()}/b_item00000_none1_seed0.mp4</code>" in secs[1].html  # not a unit of this run
    with pytest.raises(ConfigError, match="extra media 'Gone': .* is not a folder"):
        media_sections(run_dir, tmp_path / "r.html", frame, MediaLimits(), [("Gone", tmp_path / "nowhere")])

    for bad in ({"embed_file_bytes": -1}, {"max_files": 1.5}, {"embed_total_bytes": True}):
        with pytest.raises(ConfigError, match=f"MediaLimits.{next(iter(bad))}: must be a whole number >= 0"):
            MediaLimits(**bad)


def test_report_cli_embed_limit(run_dir, tmp_path, capsys):
    from embeval_cli import main

    write_mp4(run_dir / "videos/a/item00000/none-L1-seed0.mp4", 64, 64, 10, 10)
    out = tmp_path / "r.html"
    assert main(["report", str(run_dir), "--out", str(out), "--embed-max-mb", "0"]) == 0
    text = out.read_text()
    assert "data:video/mp4" not in text and 'src="run/videos/a/item00000/none-L1-seed0.mp4"' in text
    with pytest.raises(SystemExit) as e:
        main(["report", str(run_dir), "--embed-max-mb", "-1"])
    assert e.value.code == 2 and "--embed-max-mb" in capsys.readouterr().err
