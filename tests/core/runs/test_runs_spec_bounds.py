"""Hostile run specs, round 3, each run as a user runs it: `python -m embeval_cli` in its own
process, with a time bound, its peak memory measured (wait4) and the whole folder tree around it compared before and
after. A 423-byte YAML alias bomb, a name or output_dir that leaves the output root, a NUL byte in a name or path,
seeds, counts, levels and timeouts far out of range, a 5000-digit integer, 1000-deep nesting: each ends in exactly one
line on stderr naming the field, the problem and the fix, exit 2, within seconds, and creates nothing anywhere."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
#: CPU-time bound of one refused command (the interpreter starts and imports in ~0.5 s)
FAST_S = 8.0
#: peak resident memory of one refused command, MiB (a bare `embeval run --check` needs ~40 MiB)
SMALL_MIB = 300
#: a child that runs away (the old behaviour) is killed after this long / limited to this much address space
KILL_AFTER_S = 30
ADDRESS_SPACE = 4 << 30

BOMB = """\
evaluator: synthetic
items: {source: synthetic, count: 1}
sim:
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
BOMB_LINE = ("is refused (line 9, column 6: its aliases expand to more than 100000 values (an alias bomb?); write the "
             "values out instead of nesting aliases)")
GOOD = "evaluator: synthetic\nitems: {source: synthetic, count: 2}\nbackend: {progress: false}\n"


#: `python -m embeval_cli ARGV` with its address space limited first: a runaway child cannot take the machine down.
#: At exit it writes its own peak RSS (VmHWM of its own address space) to $EMBEVAL_TEST_HWM: wait4's ru_maxrss is no
#: measure here, since Linux carries the forking parent's high-water mark (the whole test process, GBs with torch
#: loaded) across exec into the child's
LIMITED_CLI = ("import atexit, os, resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, ({0}, {0})); "
               "atexit.register(lambda: open(os.environ['EMBEVAL_TEST_HWM'], 'w').write("
               "next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])); "
               "sys.argv[0] = 'embeval'; runpy.run_module('embeval_cli', run_name='__main__', alter_sys=True)")


def _cli(cwd: Path, *argv) -> tuple[int, str, str, float, float]:
    """``embeval ARGV`` in its own process in ``cwd``: (exit code, stdout, stderr, CPU seconds, peak RSS in MiB).
    CPU, not wall time: the old behaviours burnt minutes of CPU, and a loaded machine (the suite's other workers)
    stretches the wall time of a refusal that takes well under a second of CPU."""
    hwm = Path(tempfile.mkdtemp(prefix="embeval-hwm-")) / "kib"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "analysis"),
                                                       os.environ.get("PYTHONPATH", "")]), EMBEVAL_TEST_HWM=str(hwm))
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:  # outside the sandbox
        p = subprocess.Popen([sys.executable, "-c", LIMITED_CLI.format(ADDRESS_SPACE), *map(str, argv)], cwd=cwd, env=env,
                             stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
        killer = threading.Timer(KILL_AFTER_S, lambda: os.kill(p.pid, signal.SIGKILL))
        killer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            killer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        seconds = usage.ru_utime + usage.ru_stime
        fo.seek(0)
        fe.seek(0)
        texts = fo.read(), fe.read()
    peak_kib = float(hwm.read_text()) if hwm.exists() else float("inf")  # killed before its exit: unknown
    hwm.unlink(missing_ok=True)
    hwm.parent.rmdir()
    return p.returncode, texts[0], texts[1], seconds, peak_kib / 1024


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture()
def box(tmp_path) -> tuple[Path, Path]:
    """(the whole sandbox, the working folder two levels down): ../../x from the working folder is still inside."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    return tmp_path, work


def _refused(box, spec_text: str | bytes, *extra, problem: str, name: str = "spec.yaml") -> str:
    """Run ``embeval run SPEC *extra`` on a spec; assert one line with ``problem``, exit 2, fast, small, nothing created."""
    root, work = box
    spec = root / name
    spec.write_bytes(spec_text if isinstance(spec_text, bytes) else spec_text.encode())
    before = _tree(root)
    rc, out, err, seconds, mib = _cli(work, "run", spec, *extra)
    assert rc == 2 and out == "", (rc, out, err[-2000:])
    assert err.count("\n") == 1 and err.startswith("embeval: error: ") and "Traceback" not in err, err[-2000:]
    assert problem in err, err
    assert seconds < FAST_S, f"{seconds:.1f} s"
    assert mib < SMALL_MIB, f"{mib:.0f} MiB"
    assert _tree(root) == before  # nothing created, inside the output root or outside it
    return err.rstrip("\n")


# ------------------------------------------------------------------ the YAML loader: aliases, nesting, digits
@pytest.mark.parametrize("extra", [["--check"], []])
def test_an_alias_bomb_under_sim_is_refused_in_one_line_at_once(box, extra):
    """Old: `--check` ran past 60 s and 1 GB hashing 9**9 strings; now one line naming the line and column."""
    line = _refused(box, BOMB, *extra, problem=BOMB_LINE)
    assert line == f"embeval: error: run spec {box[0] / 'spec.yaml'} {BOMB_LINE}"


def test_an_alias_bomb_in_a_listed_subject_file_and_in_a_run_folder(box):
    root, work = box
    bomb_subject = "id: s\nkind: synthetic\nparams:\n" + BOMB.split("sim:\n", 1)[1]
    (root / "subj.yaml").write_text(bomb_subject)
    line = _refused(box, GOOD + "subjects: [subj.yaml]\n", "--check", problem="spec.subjects[0]: subject file")
    assert line.endswith(f"subject file {root / 'subj.yaml'} is refused (line 9, column 6: its aliases expand to more "
                         "than 100000 values (an alias bomb?); write the values out instead of nesting aliases)")
    # `embeval resume` of a run folder whose spec.yaml was replaced by a bomb
    run = root / "run"
    run.mkdir()
    (run / "run.json").write_text('{"spec_hash": "0123456789abcdef", "base_dir": "."}')
    (run / "spec.yaml").write_text(BOMB)
    before = _tree(root)
    rc, out, err, seconds, mib = _cli(work, "resume", run)
    assert (rc, out) == (2, "") and seconds < FAST_S and mib < SMALL_MIB
    assert err == f"embeval: error: run spec {run / 'spec.yaml'} {BOMB_LINE}; was it edited? start a new run folder\n"
    assert _tree(root) == before


@pytest.mark.parametrize("text, problem", [
    ("evaluator: synthetic\nsim: &a {x: *a}\n",
     "line 2, column 13: the alias *a is used inside the value it names (a cycle); write the value out instead"),
    ("evaluator: synthetic\nparams: {x: " + "[" * 1000 + "]" * 1000 + "}\n",
     "line 2, column 111: nested deeper than 100 levels; flatten the data"),
    ("evaluator: synthetic\nseeds: [" + "7" * 5000 + "]\n",
     "line 2, column 9: an integer of 5000 digits (at most 1000); give a smaller number"),
])
def test_cycles_deep_nesting_and_endless_integers_are_one_line(box, text, problem):
    """Old: a RecursionError / ValueError traceback (PyYAML's composer recurses; Python refuses 4300+ digit ints)."""
    line = _refused(box, text, "--check", problem=problem)
    assert line == f"embeval: error: run spec {box[0] / 'spec.yaml'} is refused ({problem})"


def test_anchors_for_shared_settings_still_work_and_hash_as_written_out(box):
    root, work = box
    shared = GOOD + "subjects:\n  - {id: a, kind: synthetic, params: &p {offset: 0.5}}\n  - {id: b, kind: synthetic, params: *p}\n"
    plain = GOOD + "subjects:\n  - {id: a, kind: synthetic, params: {offset: 0.5}}\n  - {id: b, kind: synthetic, params: {offset: 0.5}}\n"
    hashes = []
    for name, text in (("shared.yaml", shared), ("plain.yaml", plain)):
        (root / name).write_text(text)
        rc, out, err, _, _ = _cli(work, "run", root / name, "--check")
        assert rc == 0 and err == "" and "2 subject(s), 4 units" in out, (out, err)
        hashes.append(out.split("hash ")[1].split(",")[0])
    assert hashes[0] == hashes[1]


def test_the_loader_bounds_in_process():
    from embeval.errors import yaml_problem
    from embeval.safe_yaml import MAX_ALIAS_NODES, YAMLLimitError, loads

    t0 = time.thread_time()  # CPU time of this thread: a loaded machine does not count
    with pytest.raises(YAMLLimitError) as exc:
        loads(BOMB)
    assert time.thread_time() - t0 < 1 and yaml_problem(exc.value).startswith("line 9, column 6: its aliases expand")
    # merge keys and a few aliases are fine; exactly at the bound is fine, one value over is not
    assert loads("a: &a {x: 1}\nb: {<<: *a, y: 2}\n") == {"a": {"x": 1}, "b": {"x": 1, "y": 2}}
    n = MAX_ALIAS_NODES // 10  # a list of 9 scalars is 10 values; n aliases of it add 10 * n: exactly the bound
    text = "a: &a [1,2,3,4,5,6,7,8,9]\nb: [" + ", ".join(["*a"] * n) + "]\n"
    assert len(loads(text)["b"]) == n
    with pytest.raises(YAMLLimitError, match="more than 100000 values"):
        loads(text + "c: *a\n")  # 10 more
    assert loads("x: " + "9" * 1000) == {"x": int("9" * 1000)}


# ------------------------------------------------------------------ names and folders
@pytest.mark.parametrize("name, problem", [
    ("../../x", "spec.name: holds '/'"),
    ("..", "spec.name: is '..'"),
    ("a\\\\b", "spec.name: holds '\\\\'"),
    ("a\\nb", "spec.name: holds '\\n'"),
    ("x" * 101, "spec.name: is 101 characters long (at most 100)"),
    ("a\\0b", "spec.name: contains a NUL character (\\0) at position 1; remove it"),
])
@pytest.mark.parametrize("extra", [["--check"], []])
def test_a_name_that_is_not_one_folder_name_is_refused(box, name, problem, extra):
    """Old: `name: "../../x"` made the run folder ../../x-<hash> beside the working folder (outside runs/); a NUL in
    the name passed --check and ended in `ValueError: embedded null byte` at mkdir."""
    line = _refused(box, GOOD + f'name: "{name}"\n', *extra, problem=problem)
    if "NUL" not in problem:
        written = yaml.safe_load(f'"{name}"')
        shown = written if len(written) <= 60 else written[:60] + "..."
        assert line.endswith("the name becomes a folder name, so it must be one path component (no '/', '\\', '..', NUL "
                             f"or control characters, at most 100 characters), got {shown!r}; give a plain name such as "
                             "quality-smoke")


@pytest.mark.parametrize("out_dir, problem", [
    ("../../y", "spec.output_dir: leaves the current folder through '..', got '../../y'"),
    ("runs/../../y", "spec.output_dir: leaves the current folder through '..'"),
    ("{root}/abs", "spec.output_dir: is an absolute path"),
    ("~/y", "spec.output_dir: starts with '~' (not expanded here)"),
    ("$HOME/y", "spec.output_dir: names '$' variables (not expanded here)"),
    ("a\\0b", "spec.output_dir: contains a NUL character (\\0) at position 1; remove it"),
])
@pytest.mark.parametrize("extra", [["--check"], []])
def test_an_output_dir_outside_the_current_folder_is_refused(box, out_dir, problem, extra):
    root, _ = box
    line = _refused(box, GOOD + f'output_dir: "{out_dir.format(root=root)}"\n', *extra, problem=problem)
    if "NUL" not in problem:
        assert line.endswith("a spec's output_dir must be a relative folder inside the current folder, such as "
                             "runs/my-run (to write anywhere else, give --out DIR on the command line)")


def test_plain_names_and_folders_land_inside_the_output_root(box):
    root, work = box
    (root / "named.yaml").write_text(GOOD + "name: quality smoke (v2)\n")
    rc, _, err, _, _ = _cli(work, "run", root / "named.yaml")
    assert rc == 0, err
    made = _tree(root) - {"named.yaml"}
    run = next(p for p in made if p.count("/") == 3 and p.startswith("a/b/runs/quality smoke (v2)-"))
    assert {p for p in made if not p.startswith(run + "/")} == {"a", "a/b", "a/b/runs", run}
    (root / "dir.yaml").write_text(GOOD + "output_dir: out/r1\n")
    assert _cli(work, "run", root / "dir.yaml")[0] == 0 and (work / "out" / "r1" / "results.sqlite").is_file()
    # --out (the command line, trusted) may still name any folder
    assert _cli(work, "run", root / "dir.yaml", "--out", root / "elsewhere")[0] == 0
    assert (root / "elsewhere" / "results.sqlite").is_file()


@pytest.mark.parametrize("where, text", [
    ("spec.subjects[0].path", 'subjects: [{id: s, kind: synthetic, path: "w\\0.pt"}]'),
    ("spec.items.path", 'items: {source: folder, path: "im\\0g"}'),
    ("spec.params.fail_flag", 'params: {fail_flag: "f\\0"}'),
    ("spec.plugins[0]", 'plugins: ["os\\0"]'),
])
def test_a_nul_anywhere_in_the_spec_names_its_field(box, where, text):
    spec = GOOD.replace("items: {source: synthetic, count: 2}\n", "") if "items" in text else GOOD
    _refused(box, spec + text + "\n", "--check", problem=f"{where}: contains a NUL character (\\0)")


# ------------------------------------------------------------------ numbers
@pytest.mark.parametrize("text, problem", [
    ("seeds: [1180591620717411303424]",
     "spec.seeds[0]: must lie in 0..4294967295, got 1180591620717411303424 (a seed is a 32-bit unsigned integer)"),
    ("seeds: [4294967296]", "spec.seeds[0]: must lie in 0..4294967295, got 4294967296"),
    ("levels: [0, 1180591620717411303424]", "spec.levels[1]: must lie in 0..1000000, got 1180591620717411303424"),
    ("items: {source: synthetic, count: 1.0e+30}", "spec.items.count: must be an integer in 1..1000000, got 1e+30"),
    ("items: {source: synthetic, count: 1000000000000000000000000000000}",
     ("spec.items.count: must lie in 1..1000000, got a 31-digit integer (at most 1000000 items per run; split "
      "a bigger evaluation into several specs)")),
    ("items: {source: synthetic, count: 2, limit: 1000000000000}", "spec.items.limit: must lie in 1..1000000"),
    ("backend: {unit_timeout_s: 1.0e+308}",
     "spec.backend.unit_timeout_s: must lie in 0..604800, got 1e+308 (at most a week; 0 or null turns the watchdog off)"),
    ("backend: {unit_timeout_s: .inf}", "spec.backend.unit_timeout_s: must be a finite number in 0..604800, got inf"),
    ("backend: {num_workers: 1000000000000}", "spec.backend.num_workers: must lie in 1..10000"),
    ("backend: {batch_size: 1000000000000}", "spec.backend.batch_size: must lie in 1..10000"),
    ("backend: {retries: 1000000000000}", "spec.backend.retries: must lie in 0..100"),
    ("backend: {num_gpus_per_worker: 1.0e+300}", "spec.backend.num_gpus_per_worker: must lie in 0..1024"),
    ("params: {hang_s: 1.0e+308}", "spec.params.hang_s: must lie in 0..604800, got 1e+308 (seconds, at most a week)"),
    ("params: {work_ms: .nan}", "spec.params.work_ms: must be a finite number in 0..3600000, got nan"),
])
@pytest.mark.parametrize("extra", [["--check"], []])
def test_numbers_out_of_range_are_one_line_at_check(box, text, problem, extra):
    """Old: seeds [2**70] passed --check and every run ended in `OverflowError: Python int too large to convert to
    SQLite INTEGER`; count 10**21 planned forever; unit_timeout_s 1e308 failed every unit."""
    spec = GOOD.replace("items: {source: synthetic, count: 2}\n", "") if text.startswith("items") else GOOD
    _refused(box, spec + text + "\n", *extra, problem=problem)


@pytest.mark.parametrize("extra", [["--check"], []])
def test_unit_timeout_option_out_of_range(box, extra):
    """Old: `--unit-timeout 1e308` was taken (the watchdog's wait then failed every unit) and --check never looked."""
    line = _refused(box, GOOD, "--unit-timeout", "1e308", *extra, problem="--unit-timeout")
    assert line == ("embeval: error: --unit-timeout: must lie in 0..604800 s, got 1e+308 (at most a week; 0: no "
                    "watchdog)")
    line = _refused(box, GOOD, "--unit-timeout", "-1", *extra, problem="--unit-timeout")
    assert line == "embeval: error: --unit-timeout: must lie in 0..604800 s, got -1.0 (at most a week; 0: no watchdog)"


def test_a_grid_over_the_unit_bound_is_refused_before_any_unit_is_made(box):
    line = _refused(box, "evaluator: synthetic\nitems: {source: synthetic, count: 1000000}\nseeds: [0, 1, 2]\n",
                    "--check", problem="spec: 1 subjects x 1000000 items x 1 distortions x 1 levels x 3 seeds = "
                                       "3000000 units, more than the 1000000 a run may have")
    assert line.endswith("split it into several specs (e.g. by subject or seed) or lower items.count / items.limit")


def test_a_long_id_list_with_a_late_duplicate_is_found_in_linear_time(box):
    """Old: the duplicate check compared every pair of ids (60 000 ids: 1.8 * 10**9 comparisons, minutes)."""
    ids = [f"i{i}" for i in range(60_000)] + ["i7"]
    text = "evaluator: synthetic\nitems: {source: list, ids: [" + ", ".join(ids) + "]}\n"
    _refused(box, text, "--check", problem="spec.items.ids: duplicate entry 'i7'")


def test_lists_are_bounded(box):
    text = GOOD + "levels: [" + ", ".join(map(str, range(10_001))) + "]\n"
    _refused(box, text, "--check", problem="spec.levels: has 10001 entries, at most 10000 are allowed")


def test_image_sizes_and_episode_steps_are_bounded(box):
    spec = ("evaluator: distortion-quality\nsubjects: [{id: m, kind: metric, params: {metrics: [psnr]}}]\n"
            "items: {source: synthetic, count: 1, params: {size: [100000, 100000]}}\ndistortions: [none]\n")
    _refused(box, spec, "--check", problem="spec.items.params.size: must be [width, height] in pixels, each in 8..4096; "
                                           "got [100000, 100000]")
    spec = ("evaluator: sim-iqa\nsubjects: [{id: e, kind: policy, adapter: sim_expert}]\nitems: {source: synthetic, "
            "count: 1}\nsim: {backend: pybullet, env: Pick, max_steps: 1000000000000}\ndistortions: [none]\n")
    _refused(box, spec, "--check", problem="spec.sim.max_steps: must lie in 1..100000, got 1000000000000 (steps of one "
                                           "episode); or null for the task's own limit")
