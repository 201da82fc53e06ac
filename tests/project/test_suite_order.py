"""The test suite's own lists in tests/conftest.py: the real-time files (`serial`) and the long files handed out first
to the parallel part's workers name real test files, and the collection puts the long files first."""
from pathlib import Path
from types import SimpleNamespace

import conftest

TESTS = Path(__file__).resolve().parents[1]


def _files(name):
    return sorted(TESTS.rglob(name))


def test_every_listed_file_is_one_test_file():
    for name in [*conftest.SERIAL_FILES, *conftest.LONG_FILES]:
        assert len(_files(name)) == 1, f"{name} (tests/conftest.py) names {len(_files(name))} test files, not one"
    assert len(set(conftest.LONG_FILES)) == len(conftest.LONG_FILES)
    assert not set(conftest.LONG_FILES) & conftest.SERIAL_FILES, "a real-time file never runs in the parallel part"


def test_the_long_files_come_first_in_their_order_and_the_rest_keep_theirs():
    names = ["test_a.py", conftest.LONG_FILES[2], "test_b.py", conftest.LONG_FILES[0], "test_a.py"]
    items = [SimpleNamespace(path=Path("tests") / n, name=f"{n}:{i}", add_marker=lambda m: None)
             for i, n in enumerate(names)]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.name for i in items] == [f"{conftest.LONG_FILES[0]}:3", f"{conftest.LONG_FILES[2]}:1",
                                       "test_a.py:0", "test_b.py:2", "test_a.py:4"]


def test_the_suite_script_keeps_the_order():
    """pytest-xdist reorders files by their number of tests unless told not to."""
    script = (TESTS.parent / "scripts" / "test.sh").read_text()
    assert "--dist loadfile --no-loadscope-reorder" in script
