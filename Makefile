# make lab   : venv, install, sample data, then JupyterLab on the first tutorial
# make test  : venv, install, every test (small data; real browser; torch and tensorflow)
# make bench : the benchmarks against the peers (full-size data)
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: lab test bench lint clean

$(VENV)/.installed-test: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,bench]"
	touch $@

$(VENV)/.installed-lab: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[lab,distributed,torch,tf,cloud]" "moto[server]>=5.0"
	touch $@

lab: $(VENV)/.installed-lab
	$(PY) -c "import tsexplore as tse; print(tse.sample_data('cube', 'data/cube.zarr'))"
	$(PY) -m jupyter lab --allow-root notebooks/01_explore.ipynb

test: $(VENV)/.installed-test
	TSEXPLORE_SAMPLE_SIZE=small $(PY) -m pytest -q

bench: $(VENV)/.installed-test
	$(PY) -m benchmarks all

lint: $(VENV)/.installed-test
	$(PY) -m ruff check tsexplore tests benchmarks
	$(PY) -m mypy tsexplore

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
