# embeval: the two commands are `make demo` and `make test` (see README.md).
# Every target first runs scripts/install.sh, which is a fast no-op when nothing changed.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Localhost-only DDS, offline hubs and Agg plots are set by the programs themselves (embeval.env.configure():
# the embeval CLI, the ROS nodes, the benchmarks and the tests' conftest). Opt out: see README, "Real robot network".
# Python keeps each module's bytecode (.pyc) on its first import, also where the caller's environment says not to (as
# CI machines do): the install compiles none (scripts/install.sh), and every process would compile torch again.
unexport PYTHONDONTWRITEBYTECODE
PYTEST_ARGS ?=
# Test worker processes (pytest-xdist; a file's tests stay in one worker; the real-time tests run first in one process:
# scripts/test.sh). Empty: one more than the cores, at most 8. PYTEST_WORKERS=0 runs in this process, one at a time.
PYTEST_WORKERS ?=

.PHONY: install demo test bench clean help

help:
	@echo "make demo   - install (if needed) and run the end-to-end pipeline offline on the CPU"
	@echo "make test   - install (if needed) and run the test suite"
	@echo "make bench  - install (if needed) and run the benchmarks (reports ratios against baselines)"

install:
	@bash scripts/install.sh

demo: install
	$(VENV)/bin/embeval demo

test:  # scripts/test.sh installs (as `install` does) around its real-time part
	PYTEST_WORKERS=$(PYTEST_WORKERS) VENV=$(VENV) bash scripts/test.sh $(PYTEST_ARGS)

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info
