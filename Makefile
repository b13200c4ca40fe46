# The two commands of the README: `make run` and `make test`.
# Both set everything up on a fresh machine (venv, pip install, compiled kernel).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ocms-installed

.PHONY: test run install bench results clean

$(STAMP): pyproject.toml setup.py cms_core/_kernel.c collector/exactly_once/_keytable.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[dev,data,rocksdb]'
	touch $(STAMP)

install: $(STAMP)

# `python -m pytest` from the root puts the checkout first on sys.path; CI sees the 20 slowest tests.
# 3 processes, a test file each at a time (pyproject.toml says why); TEST_PROCESSES=0 runs them in this one.
TEST_PROCESSES ?= 3
# The fault schedules (tests/benchmarks/test_fault_schedules.py) and the rolling upgrade (tests/upgrade) run after
# the rest, without it: each deployment (a broker, four workers, two collectors and their load) takes about a core
# for minutes, and beside the other tests' processes their waits ran out. The two run side by side, the schedules'
# file in one process and the upgrade in the other: 2 min 17 s, against 5 min 51 s one after another.
test: $(STAMP)
	./scripts/ensure_system_packages.sh
	OCMS_REQUIRE_KERNEL=1 OCMS_REQUIRE_SYSTEM_TOOLS=1 $(PY) -m pytest tests -m "not fault_schedules" --durations=20 -n $(TEST_PROCESSES) --dist loadfile
	OCMS_REQUIRE_KERNEL=1 OCMS_REQUIRE_SYSTEM_TOOLS=1 $(PY) -m pytest tests -m fault_schedules -rA --durations=5 -n 2 --dist loadfile

run: $(STAMP)
	$(VENV)/bin/ocms run $(RUN_ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.bench_decode
	$(PY) -m benchmarks.bench_producer
	$(PY) -m benchmarks.bench_worker

# Regenerates docs/results/ (paper replication, peers, mechanism choice, pipeline matrix + 10-min
# memory run): ~26 min on 2 cores, as the README says (parts' last runs: ~7 min, 171 s, 972 s).
results: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,data,rocksdb,bench]'
	$(PY) -m benchmarks.experiments

clean:
	rm -rf $(VENV) build *.egg-info cms_core/*.so
