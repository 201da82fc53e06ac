"""rosbag2 (MCAP) writing and reading over the pure-Python ``rosbags`` library, safe to kill.

A bag is a rosbag2 directory (``metadata.yaml`` + MCAP files) that ``ros2 bag`` and
``rosbags`` read unchanged. :class:`BagRecorder` writes it in *segments*: each segment
is a complete MCAP file written by ``rosbags``; when a segment closes (every
``segment_s`` seconds of message time or ``segment_bytes`` bytes) it is moved into the
bag and ``metadata.yaml`` is rewritten atomically (write + rename). So after ``kill -9``
the bag on disk is always readable; at most the open segment (``segment_s`` seconds)
is lost, and it stays aside in a hidden ``.open_<n>/`` folder. :func:`recover_bag`
rebuilds ``metadata.yaml`` from the complete segment files (for a bag killed before its
first metadata write or with hand-deleted files) and removes the partial segment.

Timestamps are nanoseconds (``int``); data is CDR-serialised bytes exactly as
rclpy (``raw=True`` subscriptions) or ``rosbags`` serialises them.
"""
from __future__ import annotations

import contextlib
import functools
import shutil
import time
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any, Iterable, Iterator

from embeval.errors import ConfigError, EmbevalError, InvalidInputError, MissingFileError

BAG_VERSION = 9
STORAGE = "mcap"
OPEN_PREFIX = ".open_"
#: where `embeval bag recover` sets aside partial and unreadable segments (inside the bag folder; never deleted)
DAMAGED_DIR = "damaged"


@functools.lru_cache(maxsize=1)
def typestore():
    """The ROS 2 Kilted type store of ``rosbags`` (standard message definitions); built once (~0.2 s)."""
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_KILTED)


@dataclass
class _Topic:
    name: str
    msgtype: str
    qos: list = field(default_factory=list)  # rosbags Qos profiles (offered)
    count: int = 0


@dataclass
class _Segment:
    path: Path  # file inside the bag once closed
    start_ns: int
    end_ns: int
    count: int


@dataclass(frozen=True)
class BagMessage:
    """One message read back: ``timestamp_ns`` is the bag's receive time."""

    topic: str
    msgtype: str
    timestamp_ns: int
    msg: Any  # rosbags message object (attribute access like the ROS message)
    raw: bytes


class BagRecorder:
    """Write topics to a rosbag2 MCAP bag in kill-safe segments.

    >>> rec = BagRecorder("runs/bag1")            # doctest: +SKIP
    >>> rec.add_topic("/chatter", "std_msgs/msg/String")
    >>> rec.write("/chatter", time.time_ns(), cdr_bytes)
    >>> rec.close()

    ``segment_s``: seconds of message time per segment (bounded loss on kill -9);
    ``segment_bytes``: size bound per segment. The path must not exist yet.
    """

    def __init__(self, path: str | Path, *, segment_s: float = 1.0, segment_bytes: int = 256 * 2**20,
                 custom_data: dict[str, str] | None = None):
        self.path = Path(path)
        if self.path.exists():
            raise ConfigError(f"bag folder {self.path} exists already; choose a new bag_dir (bags are never overwritten)")
        if segment_s <= 0 or segment_bytes <= 0:
            raise ConfigError(f"segment_s and segment_bytes must be > 0, got {segment_s}, {segment_bytes}")
        self.segment_ns = int(segment_s * 1e9)
        self.segment_bytes = int(segment_bytes)
        self.custom_data = dict(custom_data or {})
        self.topics: dict[str, _Topic] = {}
        self.segments: list[_Segment] = []
        self._ts = typestore()
        self._writer = None
        self._conns: dict[str, Any] = {}
        self._seg_index = 0
        self._seg_start = None
        self._seg_end = 0
        self._seg_count = 0
        self._seg_counts: dict[str, int] = {}
        self._seg_bytes = 0
        self._closed = False
        self.path.mkdir(parents=True)
        self._write_metadata()  # readable (empty) from the first moment

    # -- topics -------------------------------------------------------------------------------
    def add_topic(self, topic: str, msgtype: str, qos: Iterable | None = None) -> None:
        """Register ``topic`` with a standard message type such as ``sensor_msgs/msg/Image``."""
        if msgtype not in self._ts.fielddefs:
            raise ConfigError(
                f"unknown message type {msgtype!r} for topic {topic}: only standard ROS 2 messages are recorded "
                "(e.g. sensor_msgs/msg/Image, std_msgs/msg/String)"
            )
        if topic in self.topics:
            if self.topics[topic].msgtype != msgtype:
                raise ConfigError(f"topic {topic} already recorded as {self.topics[topic].msgtype}, not {msgtype}")
            return
        self.topics[topic] = _Topic(topic, msgtype, list(qos or []))
        if self._writer is not None:
            self._add_conn(self.topics[topic])

    def _add_conn(self, t: _Topic) -> None:
        self._conns[t.name] = self._writer.add_connection(
            t.name, t.msgtype, typestore=self._ts, offered_qos_profiles=t.qos
        )

    # -- writing ------------------------------------------------------------------------------
    def write(self, topic: str, timestamp_ns: int, data: bytes | memoryview) -> None:
        """Append one CDR-serialised message (``timestamp_ns``: receive time, ns)."""
        if self._closed:
            raise InvalidInputError(f"bag {self.path} is closed; open a new BagRecorder to record more")
        if topic not in self.topics:
            raise ConfigError(f"topic {topic} was not added; call add_topic({topic!r}, msgtype) first")
        ts = int(timestamp_ns)
        if self._writer is not None and (
            ts - self._seg_start >= self.segment_ns or self._seg_bytes >= self.segment_bytes
        ):
            self.flush()
        if self._writer is None:
            self._open_segment(ts)
        self._writer.write(self._conns[topic], ts, data)
        self._seg_start = min(self._seg_start, ts)
        self._seg_end = max(self._seg_end, ts)
        self._seg_count += 1
        self._seg_counts[topic] = self._seg_counts.get(topic, 0) + 1
        self._seg_bytes += len(data)

    def write_msg(self, topic: str, msg: Any, timestamp_ns: int) -> None:
        """Serialise a ``rosbags`` message object and append it."""
        self.write(topic, timestamp_ns, self._ts.serialize_cdr(msg, self.topics[topic].msgtype))

    def _open_segment(self, ts: int) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        tmp = self.path / f"{OPEN_PREFIX}{self._seg_index}"
        self._writer = Writer(tmp, version=BAG_VERSION, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self._conns = {}
        for t in self.topics.values():
            self._add_conn(t)
        self._seg_start, self._seg_end, self._seg_count, self._seg_bytes = ts, ts, 0, 0
        self._seg_counts = {}

    def flush(self) -> None:
        """Close the open segment into the bag and rewrite ``metadata.yaml`` (atomic)."""
        if self._writer is None:
            return
        tmp = self._writer.path
        self._writer.close()
        self._writer = None
        final = self.path / f"{self.path.name}_{self._seg_index}.mcap"
        (tmp / f"{tmp.name}.mcap").replace(final)
        shutil.rmtree(tmp, ignore_errors=True)
        self.segments.append(_Segment(final, self._seg_start, self._seg_end, self._seg_count))
        for name, n in self._seg_counts.items():
            self.topics[name].count += n
        self._seg_index += 1
        self._write_metadata()

    def tick(self, now_ns: int) -> None:
        """Close the open segment when it is older than ``segment_s`` (call periodically when idle)."""
        if self._writer is not None and int(now_ns) - self._seg_start >= self.segment_ns:
            self.flush()

    def close(self) -> None:
        """Flush and close; the bag is complete. Safe to call twice."""
        if self._closed:
            return
        self.flush()
        self._closed = True

    def discard_if_empty(self) -> bool:
        """Close; when no message was written, remove the bag folder (its metadata.yaml and nothing else:
        a folder holding other files is kept). For a recording that never started (the graph stopped on a
        configuration error): no empty bag is left behind. Returns whether the folder was removed."""
        self.close()
        if self.message_count or self.segments:
            return False
        (self.path / "metadata.yaml").unlink(missing_ok=True)
        try:
            self.path.rmdir()
        except OSError:  # not empty (someone else's files): keep it
            return False
        return True

    def __enter__(self) -> "BagRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def message_count(self) -> int:
        """Messages written so far (closed segments plus the open one, if any: after :meth:`flush` the last
        segment's count lives in ``segments`` only). Equals ``bag_info(path)["message_count"]`` once closed."""
        return sum(s.count for s in self.segments) + (self._seg_count if self._writer is not None else 0)

    def _write_metadata(self) -> None:
        write_metadata(self.path, self.segments, list(self.topics.values()), self.custom_data)


def write_metadata(path: Path, segments: list[_Segment], topics: list[_Topic], custom_data: dict | None = None) -> None:
    """Write a rosbag2 v9 ``metadata.yaml`` for ``segments`` atomically (temp file + rename)."""
    from rosbags.rosbag2.metadata import dump_qos_v9
    from ruamel.yaml import YAML

    start = min((s.start_ns for s in segments), default=0)
    end = max((s.end_ns for s in segments), default=0)
    count = sum(s.count for s in segments)
    info = {
        "version": BAG_VERSION,
        "storage_identifier": STORAGE,
        "relative_file_paths": [s.path.name for s in segments],
        "duration": {"nanoseconds": max(0, end - start)},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": count,
        "topics_with_message_count": [
            {
                "topic_metadata": {
                    "name": t.name,
                    "type": t.msgtype,
                    "serialization_format": "cdr",
                    "offered_qos_profiles": dump_qos_v9(t.qos),
                    "type_description_hash": typestore().hash_rihs01(t.msgtype),
                },
                "message_count": t.count,
            }
            for t in topics
        ],
        "compression_format": "",
        "compression_mode": "",
        "files": [
            {
                "path": s.path.name,
                "starting_time": {"nanoseconds_since_epoch": s.start_ns},
                "duration": {"nanoseconds": max(0, s.end_ns - s.start_ns)},
                "message_count": s.count,
            }
            for s in segments
        ],
        "custom_data": custom_data or None,
        "ros_distro": "kilted",
    }
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    buf = StringIO()
    yaml.dump({"rosbag2_bagfile_information": info}, buf)
    tmp = path / "metadata.yaml.tmp"
    tmp.write_text(buf.getvalue(), "utf8")
    tmp.replace(path / "metadata.yaml")


@dataclass
class RecoveryReport:
    """What :func:`recover_bag` found: kept segment files and the ones set aside in ``DIR/damaged/``."""

    kept: list[str]
    discarded: list[str]
    message_count: int


def _has_segments(path: Path) -> bool:
    return any(path.glob("*.mcap")) or any(path.glob(f"{OPEN_PREFIX}*"))


def require_bag(path: str | Path) -> Path:
    """``path`` as a readable rosbag2 folder or single ``.mcap`` file (rosbags reads both), or a
    :class:`MissingFileError` that says what is wrong."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"bag folder {path} does not exist; pass the folder that holds metadata.yaml "
                               f"(the recorder writes runs/bags/embeval_<time>) or a .mcap file")
    if path.is_file() and path.suffix == ".mcap":
        return path
    if not path.is_dir():
        raise MissingFileError(f"{path} is a file but not .mcap; a rosbag2 bag is the folder that holds metadata.yaml "
                               f"and the .mcap files, or a single .mcap file")
    if not (path / "metadata.yaml").exists():
        if _has_segments(path):
            raise MissingFileError(f"{path} has MCAP segments but no metadata.yaml (the recorder was killed?); "
                                   f"run `embeval bag recover {path}` first")
        raise MissingFileError(f"{path} is not a rosbag2 folder (no metadata.yaml, no .mcap files)")
    return path


def recover_bag(path: str | Path) -> RecoveryReport:
    """Make a killed or damaged bag consistent: keep every MCAP file whose messages all read, set the others aside.

    Each ``*.mcap`` file is read in full with ``rosbags`` (header, summary, every message deserialised, the count
    checked against its summary); ``metadata.yaml`` is rebuilt from the good ones (topics, counts, times). Partial
    ``.open_<n>`` segments and unreadable files are moved into ``DIR/damaged/`` (:data:`DAMAGED_DIR`), never
    deleted: a salvage tool (``mcap recover``) may still get messages out of them.
    """
    from rosbags.rosbag2.storage_mcap import McapReader

    _bound_decompression()

    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(f"no bag folder at {path}; pass the bag directory (it holds metadata.yaml)")
    if not _has_segments(path):
        raise MissingFileError(f"{path} holds no MCAP segments (*.mcap, {OPEN_PREFIX}*): not a bag folder; "
                               f"pass the folder the recorder wrote (e.g. runs/bags/embeval_<time>)")
    segments: list[_Segment] = []
    topics: dict[str, _Topic] = {}
    kept, discarded = [], []

    def set_aside(f: Path) -> None:
        (path / DAMAGED_DIR).mkdir(exist_ok=True)
        dest = path / DAMAGED_DIR / f.name
        if dest.exists():  # a second recovery of the same name: keep both
            dest = dest.with_name(f"{f.name}.{time.time_ns()}")
        f.rename(dest)
        discarded.append(f.name)

    for f in sorted(path.glob("*.mcap"), key=_segment_order):
        if _segment_problem(f, deep=True) is not None:  # truncated, foreign or with corrupt messages
            set_aside(f)
            continue
        reader = McapReader(f)
        reader.open()
        try:
            md = reader.metadata
            for conn in reader.connections:
                t = topics.setdefault(conn.topic, _Topic(conn.topic, conn.msgtype, list(conn.ext.offered_qos_profiles)))
                t.count += conn.msgcount
            n = md.message_count
            segments.append(_Segment(f, md.start_time if n else 0, max(md.end_time - 1, 0) if n else 0, n))
            kept.append(f.name)
        finally:
            reader.close()
    for d in sorted(path.glob(f"{OPEN_PREFIX}*")):
        set_aside(d)
    write_metadata(path, segments, list(topics.values()))
    return RecoveryReport(kept, discarded, sum(s.count for s in segments))


def _segment_order(p: Path):
    stem = p.stem
    tail = stem.rsplit("_", 1)[-1]
    return (0, int(tail), stem) if tail.isdigit() else (1, 0, stem)


def read_bag(path: str | Path, topics: Iterable[str] | None = None) -> Iterator[BagMessage]:
    """Yield the bag's messages in timestamp order, deserialised with the ROS 2 type store.

    ``topics``: restrict to these topic names (default: all). A bag that cannot be read (bad
    ``metadata.yaml``, a truncated, empty or corrupt segment) is an :class:`InvalidInputError`
    naming the file and the fix (see :func:`open_reader`), also when it is found mid-way.
    """
    ts = typestore()
    wanted = set(topics) if topics is not None else None
    with open_reader(path) as reader:
        path = Path(reader.path)
        conns = [c for c in reader.connections if wanted is None or c.topic in wanted]
        if not conns:
            return
        it = reader.messages(connections=conns)
        n = 0
        while True:
            try:
                conn, t_ns, raw = next(it)
                msg = ts.deserialize_cdr(raw, conn.msgtype)
            except StopIteration:
                break
            except _corrupt_errors() as exc:
                raise _unreadable(path, exc, opened=True) from None
            n += 1
            yield BagMessage(conn.topic, conn.msgtype, t_ns, msg, bytes(raw))
        listed = sum(c.msgcount for c in conns)
        if n != listed:  # a corrupt chunk index can make rosbags skip messages without an error
            raise _unreadable(path, InvalidInputError(f"read {n} of the {listed} messages its metadata lists"),
                              opened=True)


def bag_info(path: str | Path) -> dict[str, Any]:
    """Summary of a bag: message count, duration (s), topics with type and count (from its metadata)."""
    with open_reader(path) as reader:
        return {
            "path": str(reader.path),
            "message_count": reader.message_count,
            "duration_s": reader.duration / 1e9 if reader.message_count else 0.0,
            "topics": {
                name: {"type": info.msgtype, "count": info.msgcount} for name, info in reader.topics.items()
            },
        }


#: most bytes one MCAP chunk may decompress to (embeval's own segments are at most 256 MiB): an 11 KB chunk of
#: zstd-compressed zeros decompressed to 300 MB, and rosbags decompresses without a bound
MAX_CHUNK_BYTES = 256 << 20


def _bounded_decompressor(kind: str):
    """rosbags' ``(data, declared size) -> bytes`` for ``kind`` (lz4 | zstd), reading at most one byte more than the
    chunk declares (rosbags then refuses the size mismatch) and refusing a declared size over :data:`MAX_CHUNK_BYTES`."""
    def run(data: bytes, size: int) -> bytes:
        from rosbags.rosbag2 import ReaderError

        if size > MAX_CHUNK_BYTES:
            raise ReaderError(f"a chunk declares {size} bytes uncompressed, over the limit of {MAX_CHUNK_BYTES} "
                              "(a compression bomb or a damaged chunk header)")
        if kind == "zstd":
            try:
                from compression import zstd  # Python >= 3.14
            except ImportError:
                from backports import zstd
            return zstd.ZstdDecompressor().decompress(data, max_length=size + 1)
        import lz4.frame

        return lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=size + 1)
    return run


def _bound_decompression() -> None:
    """Make rosbags' MCAP reader decompress chunks with :func:`_bounded_decompressor` (idempotent)."""
    from rosbags.rosbag2 import storage_mcap

    for kind in ("lz4", "zstd"):
        if getattr(storage_mcap.DECOMPRESSORS.get(kind), "__qualname__", "").split(".")[0] != "_bounded_decompressor":
            storage_mcap.DECOMPRESSORS[kind] = _bounded_decompressor(kind)


def _corrupt_errors() -> tuple[type[BaseException], ...]:
    """What ``rosbags`` raises on bytes that are not a valid bag: its own errors, and the decoding errors of
    a corrupt record or message (bad UTF-8, a length past the end, an absurd size to allocate)."""
    import struct

    from rosbags.rosbag2 import ReaderError
    from rosbags.serde import SerdeError

    return ReaderError, SerdeError, struct.error, ValueError, OverflowError, IndexError, KeyError, MemoryError


@contextlib.contextmanager
def open_reader(path: str | Path):
    """An open ``rosbags`` :class:`~rosbags.rosbag2.Reader` on bag ``path`` (folder or single ``.mcap`` file).

    Untrusted bags are answered in one line: a missing folder is :func:`require_bag`'s
    :class:`MissingFileError`; a ``metadata.yaml`` that is not a rosbag2 one or lists missing segments, and a
    truncated, empty or corrupt segment, are an :class:`InvalidInputError` naming the file and the fix
    (``embeval bag recover DIR``, which rebuilds the metadata from the complete segments).
    """
    from rosbags.rosbag2 import Reader

    path = require_bag(path)
    _bound_decompression()
    try:
        reader = Reader(path)
        reader.open()
    except EmbevalError:
        raise
    except _corrupt_errors() as exc:
        raise _unreadable(path, exc, opened=False) from None
    try:
        yield reader
    finally:
        reader.close()


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


#: schema encodings rosbags reads (MCAP ``Schema.encoding``)
SCHEMA_ENCODINGS = ("ros2msg", "ros2idl")


def _schema_problem(f: Path) -> str | None:
    """A schema in MCAP file ``f``'s summary that rosbags cannot read (wrong encoding, text not UTF-8), named with
    its channel; ``None`` when the schemas look readable or the summary itself is unreadable."""
    from mcap.reader import make_reader

    try:
        with open(f, "rb") as fh:
            summary = make_reader(fh).get_summary()
    except Exception:  # noqa: BLE001 - the caller reports the file as corrupt
        return None
    if summary is None:
        return None
    topics = {}
    for ch in summary.channels.values():
        topics.setdefault(ch.schema_id, ch.topic)
    for sid, schema in summary.schemas.items():
        where = f"schema {schema.name[:80]!r} of topic {topics.get(sid, '?')[:80]}"
        if schema.encoding not in SCHEMA_ENCODINGS:
            return f"{where} has encoding {schema.encoding[:40]!r}; embeval reads ROS 2 bags ({', '.join(SCHEMA_ENCODINGS)})"
        try:
            schema.data.decode("utf-8")
        except UnicodeDecodeError:
            return f"{where} is not UTF-8 text (a ROS 2 message definition)"
    return None


def _segment_problem(f: Path, deep: bool) -> str | None:
    """Why MCAP file ``f`` cannot be read (``None`` if it can): its header, footer and summary; with ``deep``
    also every record and message (the error path only: a corrupt chunk passes the cheap check)."""
    from rosbags.rosbag2.storage_mcap import McapReader

    _bound_decompression()

    reader = McapReader(f)
    try:
        reader.open()
    except _corrupt_errors() as exc:
        return _schema_problem(f) or _reason(exc)
    try:
        if deep:
            ts = typestore()
            n = 0
            for conn, _, raw in reader.messages(reader.connections):
                ts.deserialize_cdr(raw, conn.msgtype)
                n += 1
            if n != reader.metadata.message_count:
                return f"read {n} of the {reader.metadata.message_count} messages its summary lists"
    except _corrupt_errors() as exc:
        return _reason(exc)
    finally:
        reader.close()
    return None


def _unreadable(path: Path, exc: BaseException, opened: bool) -> InvalidInputError:
    """The one-line error for bag ``path`` that ``rosbags`` could not read: the broken segment (found by
    reading each one) or the metadata, and the fix."""
    if path.is_file():
        schema = _schema_problem(path)
        if schema:
            return InvalidInputError(f"MCAP file {path}: {schema}; record it again with "
                                     "`ros2 bag record -s mcap`")
        return InvalidInputError(f"MCAP file {path} is truncated, corrupt or empty ({_reason(exc)}); it cannot be read: "
                                 "use the bag folder it came from (`embeval bag recover DIR` repairs a folder) "
                                 "or record it again")
    for f in sorted(path.glob("*.mcap"), key=_segment_order):
        problem = _segment_problem(f, deep=opened)
        if problem is None:
            continue
        if opened:  # the segment opens (header, footer, summary), its content is corrupt
            return InvalidInputError(f"bag segment {f} is corrupt ({problem}); run `embeval bag recover {path}`: it "
                                     f"sets the segment aside in {path / DAMAGED_DIR} and keeps the other segments")
        return InvalidInputError(f"bag segment {f} is truncated, corrupt or empty ({problem}); run "
                                 f"`embeval bag recover {path}` to set it aside and keep the complete segments")
    return InvalidInputError(f"bag {path}: metadata.yaml is not valid rosbag2 metadata or does not match the segments "
                             f"({_reason(exc)}); run `embeval bag recover {path}` to rebuild it from the MCAP segments")


def now_ns() -> int:
    """Wall-clock time in ns (the receive timestamp the recorder uses)."""
    return time.time_ns()
