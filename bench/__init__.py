"""Benchmarks run by ``make bench``. Each ``bench/bench_<area>.py`` defines
``run(quick: bool) -> list[dict]``; rows are printed as a table and saved to
``build/bench/<area>.json``. Targets are reported as ratios against a baseline
measured in the same process, never asserted in timed tests."""
