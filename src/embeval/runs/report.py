"""``embeval report``: a self-contained HTML report built from a run's results store.

Tables are HTML; figures are matplotlib PNGs embedded as base64, so the file can be mailed or
archived alone. Every figure names the run spec hash and the code version(s) that produced it.
Evaluators add their own sections through :meth:`embeval.runs.registry.Evaluator.report_sections`.

Media in the run folder (episode videos ``*.mp4``, images ``*.png``/``*.jpg``) are shown as HTML5
``<video controls>`` and ``<img>`` elements. Each file up to :attr:`MediaLimits.embed_file_bytes` is
embedded as a ``data:`` URI while the report's total stays under :attr:`MediaLimits.embed_total_bytes`
(episode videos at 64..256 px are 10..500 KB, so a report normally stays self-contained); a larger
file is linked by its path relative to the report, and its caption says so. Captions name the unit
(subject, item/episode, distortion, level, seed) when the file's path names exactly one unit of the
run, the mp4's ``title`` tag when it has one, and always the path, size in pixels, frames and seconds.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from embeval.errors import ConfigError
from embeval.runs.registry import ReportSection, get_evaluator, import_plugins

_CSS = """*{box-sizing:border-box}body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 16px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}h1{font-size:22px}h2{font-size:18px;margin-top:1.6em;border-bottom:1px solid #ddd}
.scroll{max-width:100%;overflow-x:auto}.meta td{text-align:left;overflow-wrap:anywhere}
.failed td:last-child{text-align:left;white-space:pre-wrap;overflow-wrap:anywhere;min-width:20em}
pre{background:#f7f7f7;padding:8px;font-size:12px;overflow:auto}.cap{color:#555;font-size:12px}
img,video{max-width:100%;height:auto;border:1px solid #eee}video.px,img.px{image-rendering:pixelated}
.media{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}.media figure{margin:0;max-width:100%}
figcaption{font-size:12px;color:#444;max-width:100%;overflow-wrap:anywhere}figcaption b{color:#222}
.warn{color:#8a4b00}details summary{cursor:pointer;font-weight:600;margin-top:1.6em}"""

#: media found in the run folder, by extension: MIME type
VIDEO_TYPES = {".mp4": "video/mp4"}
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
#: video codecs that browsers (Chromium, Firefox, Safari) play from an mp4; others (MPEG-4 part 2, which
#: OpenCV's ``mp4v`` writes, or HEVC) are linked with a note instead of shown as a broken player
BROWSER_CODECS = {"h264": "H.264", "av1": "AV1", "vp9": "VP9"}
#: a video whose larger side is under this (CSS px) is shown scaled up by a whole factor, pixelated, so 64-px frames are visible
MIN_VIDEO_DISPLAY_PX = 256


@dataclass(frozen=True)
class MediaLimits:
    """How the run folder's videos and images go into the report. Sizes in bytes."""

    embed_file_bytes: int = 4 * 2**20  # a file up to this is embedded as a data: URI (else linked)
    embed_total_bytes: int = 32 * 2**20  # all embedded media of one report together
    max_files: int = 48  # videos (and, separately, images) shown; the rest are counted, not shown

    def __post_init__(self):
        for k in ("embed_file_bytes", "embed_total_bytes", "max_files"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"MediaLimits.{k}: must be a whole number >= 0, got {v!r}")


@dataclass(frozen=True)
class VideoInfo:
    """What PyAV reads from a video file's headers."""

    width: int  # pixels
    height: int
    frames: int
    fps: float  # frames per second
    duration_s: float
    codec: str  # FFmpeg's codec name, e.g. "h264"
    title: str = ""  # the container's title tag


def probe_video(path: str | os.PathLike) -> VideoInfo:
    """Read a video's size, frame count, rate, duration and codec (PyAV); ``ValueError`` if it is not one."""
    import av

    try:
        with av.open(str(path)) as c:
            if not c.streams.video:
                raise ValueError("no video stream")
            s = c.streams.video[0]
            fps = float(s.average_rate or s.guessed_rate or 0)
            frames = int(s.frames or 0)
            if s.duration is not None and s.time_base:
                dur = float(s.duration * s.time_base)
            elif c.duration is not None:
                dur = c.duration / av.time_base
            else:
                dur = frames / fps if fps else 0.0
            if not frames:
                frames = sum(1 for _ in c.demux(s) if _.size)
            return VideoInfo(int(s.codec_context.width), int(s.codec_context.height), frames, fps, dur,
                             s.codec_context.name, str(c.metadata.get("title", "")))
    except av.error.FFmpegError as exc:  # the message without FFmpeg's errno and the path
        raise ValueError(getattr(exc, "strerror", None) or str(exc)) from exc


def _natural_key(p: Path) -> list:
    """``seed2`` before ``seed10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.as_posix())]


def find_media(run_dir: Path, skip: Path | None = None) -> tuple[list[Path], list[Path]]:
    """Videos and images under ``run_dir`` (no symlinks, no hidden files or folders), in natural order."""
    vids, imgs = [], []
    skip = skip.resolve() if skip is not None else None
    for p in run_dir.rglob("*"):
        rel = p.relative_to(run_dir)
        if any(part.startswith(".") for part in rel.parts) or p.is_symlink() or not p.is_file():
            continue
        ext = p.suffix.lower()
        if ext in VIDEO_TYPES:
            vids.append(p)
        elif ext in IMAGE_TYPES and p.resolve() != skip:
            imgs.append(p)
    return sorted(vids, key=_natural_key), sorted(imgs, key=_natural_key)


_NB = r"(?<![A-Za-z0-9])"  # no letter or digit before (underscores, dashes, slashes and dots separate)
_NA = r"(?![A-Za-z0-9])"
_UNIT_PATTERNS = {  # field: pattern of one value in a path (level: see UnitMatcher._level_named)
    "subject": lambda v: _NB + re.escape(str(v)) + _NA,
    "item": lambda v: _NB + re.escape(str(v)) + _NA,
    "distortion": lambda v: _NB + re.escape(str(v)) + r"(?![A-Za-z])",  # digits may follow: white_noise4
    "level": None,
    "seed": lambda v: _NB + rf"(?:seed|s)[-_=]?0*{int(v)}(?![0-9])",  # s3, seed3, seed_3, seed0003
}


class UnitMatcher:
    """Finds the one unit of a run that a media file's path names, e.g.
    ``videos/tiny-vla/item00003/white_noise-L3-seed0.mp4`` or ``tiny-vla_item00003_white_noise3_seed0000.mp4``:
    every key field that varies in the run must appear in the path (subject, item and distortion as words;
    level as ``L3``/``level3``/``level_3`` or joined to the distortion, ``white_noise3``; seed as ``s0``/``seed0``)."""

    def __init__(self, frame):
        self.fields = list(_UNIT_PATTERNS)
        self.keys = [] if frame.empty else list(frame[self.fields].drop_duplicates().itertuples(index=False, name=None))
        self.varying = [i for i, f in enumerate(self.fields) if len({k[i] for k in self.keys}) > 1]
        self.values = {i: sorted({k[i] for k in self.keys}, key=str) for i in self.varying}

    @staticmethod
    def _level_named(path: str, distortion: str, level) -> bool:
        lv = rf"0*{int(level)}(?![0-9])"
        return bool(re.search(_NB + rf"(?:level|L)[-_=]?{lv}", path)
                    or re.search(_NB + re.escape(str(distortion)) + rf"[-_]?(?:level|L)?[-_]?{lv}", path))

    def match(self, rel_path: str) -> dict | None:
        """The unit's key as a dict, or None when the path names no unit or several."""
        lvl, dist = self.fields.index("level"), self.fields.index("distortion")
        hits = {}
        for i in self.varying:
            if i == lvl:
                continue
            found = {v for v in self.values[i] if re.search(_UNIT_PATTERNS[self.fields[i]](v), rel_path)}
            if not found:
                return None
            hits[i] = found
        cands = [k for k in self.keys if all(k[i] in found for i, found in hits.items())]
        if lvl in self.varying:
            named = {p: self._level_named(rel_path, *p) for p in {(k[dist], k[lvl]) for k in cands}}
            cands = [k for k in cands if named[(k[dist], k[lvl])]]
        return dict(zip(self.fields, cands[0])) if len(cands) == 1 else None


def unit_label(key: dict) -> str:
    """``subject tiny-vla · item item00003 · distortion white_noise, level 3 · seed 0``."""
    return (f"subject {key['subject']} · item {key['item']} · distortion {key['distortion']}, level {key['level']} · "
            f"seed {key['seed']}")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{max(1, round(n / 1024))} KB"


class _Embedder:
    """Embeds files as data: URIs within :class:`MediaLimits`, links the rest relative to the report."""

    def __init__(self, limits: MediaLimits, report: Path):
        self.limits, self.report_dir, self.used = limits, report.resolve().parent, 0

    def src(self, path: Path, mime: str) -> tuple[str, str]:
        """(src attribute, how: 'embedded, 12 KB' or why it is linked)."""
        n = path.stat().st_size
        if n <= self.limits.embed_file_bytes and self.used + n <= self.limits.embed_total_bytes:
            self.used += n
            return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}", f"embedded, {_size(n)}"
        why = (f"over the {_size(self.limits.embed_file_bytes)} embedding limit per file"
               if n > self.limits.embed_file_bytes else
               f"the report's {_size(self.limits.embed_total_bytes)} of embedded media are used up")
        return self.link(path), f"linked, {_size(n)} ({why}): keep the report next to the run folder"

    def link(self, path: Path) -> str:
        """``path`` relative to the report's folder, as a URL."""
        return urllib.parse.quote(Path(os.path.relpath(path.resolve(), self.report_dir)).as_posix())


def _caption(rel: str, matcher: UnitMatcher, title: str, details: str) -> str:
    """Bold: the unit the path names and/or the file's title tag (else the path); then the path and ``details``."""
    key = matcher.match(rel)
    head = [t for t in (unit_label(key) if key else "", title) if t]
    lines = [f"<b>{html.escape(h)}</b>" for h in head] + [f"<code>{html.escape(rel)}</code>", html.escape(details)]
    if not head:
        lines[0] = f"<b>{lines[0]}</b>"
    return "<figcaption>" + "<br>".join(lines) + "</figcaption>"


def _video_html(path: Path, rel: str, emb: _Embedder, matcher: UnitMatcher) -> tuple[str, str | None]:
    """(a <figure> with the player, or '' and the problem)."""
    try:
        v = probe_video(path)
    except ValueError as exc:
        return "", f"<code>{html.escape(rel)}</code>: not a readable video ({html.escape(str(exc))}); not shown"
    if v.codec not in BROWSER_CODECS:
        return "", (f"<a href='{emb.link(path)}'><code>{html.escape(rel)}</code></a>: codec {html.escape(v.codec)} does "
                    f"not play in browsers; re-encode it as H.264 (libx264, yuv420p) to see it here")
    src, how = emb.src(path, VIDEO_TYPES[path.suffix.lower()])
    scale = max(1, -(-MIN_VIDEO_DISPLAY_PX // max(v.width, v.height, 1)))
    details = (f"{v.width}×{v.height} px, {v.frames} frames at {v.fps:g} fps = {v.duration_s:.2f} s, "
               f"{BROWSER_CODECS[v.codec]}; {how}")
    cls = ' class="px"' if scale > 1 else ""
    player = (f'<video controls preload="auto"{cls} width="{v.width * scale}" height="{v.height * scale}" '
              f'data-frames="{v.frames}" data-duration-s="{v.duration_s:.4f}" src="{src}"></video>')
    return f"<figure>{player}{_caption(rel, matcher, v.title, details)}</figure>", None


def _image_html(path: Path, rel: str, emb: _Embedder, matcher: UnitMatcher) -> tuple[str, str | None]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            w, h = im.size
            im.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        return "", f"<code>{html.escape(rel)}</code>: not a readable image ({html.escape(str(exc))}); not shown"
    src, how = emb.src(path, IMAGE_TYPES[path.suffix.lower()])
    return (f'<figure><img alt="{html.escape(rel)}" width="{w}" height="{h}" src="{src}">'
            f"{_caption(rel, matcher, '', f'{w}×{h} px; {how}')}</figure>"), None


def _media_section(title: str, files: list[Path], root: Path, emb: _Embedder, matcher: UnitMatcher,
                   limits: MediaLimits, where: str, shown_root: str = "") -> ReportSection:
    """One section of videos and/or images under ``root`` (captions show paths relative to it, after
    ``shown_root``), at most ``limits.max_files`` of each kind shown; ``where`` names the folder in the note
    about the rest."""
    figs, problems, notes = [], [], []
    for exts, render, what in ((VIDEO_TYPES, _video_html, "videos"), (IMAGE_TYPES, _image_html, "images")):
        kind = [p for p in files if p.suffix.lower() in exts]
        if len(kind) > limits.max_files:
            notes.append(f'<p class="cap">{len(kind) - limits.max_files} more {what} under {html.escape(where)} are not '
                         f"shown (at most {limits.max_files}; see MediaLimits.max_files).</p>")
        for p in kind[:limits.max_files]:
            fig, problem = render(p, shown_root + p.relative_to(root).as_posix(), emb, matcher)
            figs.append(fig) if fig else problems.append(problem)
    body = f'<div class="media">{"".join(figs)}</div>' + "".join(f'<p class="cap warn">{p}</p>' for p in problems)
    body += "".join(notes)
    return ReportSection(f"{title} ({len(files)})", html=body)


def media_sections(run_dir: Path, report: Path, frame, limits: MediaLimits,
                   extra: list[tuple[str, Path]] | tuple = ()) -> list[ReportSection]:
    """"Episode videos" and "Images in the run folder" sections (none when the folder has neither), then one
    section per ``extra`` ``(title, folder)`` with that folder's videos and images (captions: the path as
    ``folder/...``; units are named only for the run's own files). All share the embedding budget."""
    vids, imgs = find_media(run_dir, skip=report)
    emb, matcher = _Embedder(limits, report), UnitMatcher(frame)
    out = [_media_section(title, files, run_dir, emb, matcher, limits, "the run folder")
           for title, files in (("Episode videos", vids), ("Images in the run folder", imgs)) if files]
    none = UnitMatcher(frame.iloc[0:0])
    for title, folder in extra:
        folder = Path(folder)
        if not folder.is_dir():
            raise ConfigError(f"extra media {title!r}: {folder} is not a folder; give a folder of videos or images")
        v, i = find_media(folder, skip=report)
        if v or i:
            out.append(_media_section(title, v + i, folder, emb, none, limits, str(folder), folder.as_posix() + "/"))
    return out


def figure_html(fig) -> str:
    """A matplotlib figure as an embedded PNG ``<img>`` (the figure is closed); alt text: its titles."""
    import matplotlib.pyplot as plt

    titles = [t for t in [fig.get_suptitle()] + [ax.get_title() for ax in fig.axes] if t]
    alt = titles[0].splitlines()[0] if titles else "figure"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _section_html(s: ReportSection) -> str:
    parts = [f"<h2>{html.escape(s.title)}</h2>"]
    if s.html:
        parts.append(f'<div class="scroll">{s.html}</div>')  # a wide table scrolls inside, the page does not
    parts += [f"<div>{figure_html(f)}</div>" for f in s.figures]
    if s.caption:
        parts.append(f'<p class="cap">{html.escape(s.caption)}</p>')
    return "\n".join(parts)


def _generic_sections(frame, shards, stamp) -> list[ReportSection]:
    import matplotlib.pyplot as plt
    import pandas as pd

    out = []
    if not frame.empty:
        by_subject = frame.groupby(["subject", "status"]).size().unstack(fill_value=0)
        by_subject = by_subject.reindex(columns=["done", "failed"], fill_value=0).reset_index()
        by_subject.columns.name = None
        out.append(ReportSection("Units by subject", html=by_subject.to_html(index=False)))
    shard_tab = pd.DataFrame(shards)[["shard", "num_shards", "done", "failed", "total", "rate_per_s"]]
    shard_tab = shard_tab.rename(columns={"num_shards": "of", "rate_per_s": "units/s (recent)"})
    out.append(ReportSection("Shards", html=shard_tab.to_html(index=False, float_format="%.1f", na_rep="-")))
    done = frame[frame["status"] == "done"] if not frame.empty else frame
    if not done.empty:
        fig, ax = plt.subplots(figsize=(5.5, 3))
        ax.hist(done["duration_s"] * 1000, bins=40, color="#4472c4")
        ax.set_xlabel("unit duration (ms)")
        ax.set_ylabel("units")
        ax.set_title(f"time per unit (wall clock)\n{stamp}", fontsize=8)
        fig.tight_layout()
        ms = done.assign(ms=done["duration_s"] * 1000).groupby("subject")["ms"]
        per = pd.DataFrame({"units": ms.size(), "mean (ms)": ms.mean(), "median (ms)": ms.median(),
                            "max (ms)": ms.max()}).reset_index()
        out.append(ReportSection("Time per unit", html=per.to_html(index=False, float_format="%.2f"), figures=[fig],
                                 caption="Milliseconds per unit as measured on the worker, including the watchdog overhead."))
    failed = frame[frame["status"] == "failed"] if not frame.empty else frame
    if not failed.empty:
        cols = ["subject", "item", "distortion", "level", "seed", "attempts", "error"]
        out.append(ReportSection(f"Failed units ({len(failed)}; retried by `embeval resume`)",
                                 html=f'<div class="failed">{failed[cols].head(100).to_html(index=False)}</div>'))
    return out


def build_report(run_dir: str | os.PathLike, out: str | os.PathLike | None = None,
                 media: MediaLimits | None = None, extra_media: list[tuple[str, str | os.PathLike]] | tuple = ()) -> Path:
    """Write ``out`` (default ``<run dir>/report.html``) from the run's store and media; returns its path.
    ``extra_media``: ``(section title, folder)`` pairs whose videos and images are shown too (e.g. the episode
    videos of other commands), with the same embedding and caption rules; a missing folder is a ConfigError."""
    import yaml

    from embeval.runs.export import results_frame
    from embeval.runs.runner import load_run_spec, open_store

    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report.html"
    media = media if media is not None else MediaLimits()
    with open_store(run_dir) as store:
        info = store.run_info()
        frame = results_frame(store, info["run_id"])
        shards = store.shard_status(info["run_id"])
    versions = sorted(set(frame["code_version"].dropna())) if not frame.empty else [info["code_version"]]
    stamp = f"run spec {info['spec_hash']} | {', '.join(versions)}"
    evaluator_secs = []
    try:
        spec = load_run_spec(run_dir)
        import_plugins(spec)
        evaluator = get_evaluator(spec.evaluator)
        done = frame[frame["status"] == "done"] if not frame.empty else frame
        evaluator_secs = evaluator.report_sections(spec, done, stamp)
    except Exception as exc:  # noqa: BLE001 - the generic report is still worth writing
        evaluator_secs = [ReportSection("Evaluator sections unavailable", html=f"<p>{html.escape(str(exc))}</p>")]
    sections = (evaluator_secs + media_sections(run_dir, out, frame, media, [(t, Path(f)) for t, f in extra_media])
                + _generic_sections(frame, shards, stamp))
    n_done = int((frame["status"] == "done").sum()) if not frame.empty else 0
    n_failed = int((frame["status"] == "failed").sum()) if not frame.empty else 0
    meta = [("run", info["name"] or "-"), ("evaluator", info["evaluator"]), ("run spec hash", info["spec_hash"]),
            ("code version(s)", ", ".join(versions)), ("units", f"{n_done} done, {n_failed} failed, {info['total']} planned"),
            ("created", _dt.datetime.fromtimestamp(info["created"], _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")),
            ("report written", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))]
    body = [f"<h1>embeval run report: {html.escape(info['name'] or info['evaluator'])}</h1>",
            '<div class="scroll"><table class="meta">' + "".join(
                f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in meta) + "</table></div>"]
    body += [_section_html(s) for s in sections]
    body.append("<details><summary>Run spec (YAML)</summary><pre>" + html.escape(yaml.safe_dump(info["spec"], sort_keys=False))
                + "</pre></details>")
    doc = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
           f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>embeval report {info['spec_hash']}</title>"
           f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(doc)
    return out
