# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-all lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/vdla layers --model resnet18 --backend sim --vthreads auto --json out/resnet18_layers.json
	$(VENV)/bin/vdla roofline --backend sim --out out

test: $(STAMP)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m ''

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m vdla.runtime.rtl.lint

bench: $(STAMP)
	$(PY) benchmarks/sim_speed.py --json out/sim_speed.json

clean:
	rm -rf out .pytest_cache
