# make lab   : venv, install, sample data, then JupyterLab on the first tutorial
# make test  : venv, install, every test (small data; real browser; torch and tensorflow;
#              two pytest-xdist workers, the browser and notebook tests on one of them)
# make quick : the quick tests only (what plain `pytest` runs), in the venv of `make test`
# make lock  : refresh requirements.lock, the exact versions CI passed with
# make bench : the benchmarks against the peers (full-size data)
#
# Installs go through uv (parallel downloads and installs). uv itself is installed by pip
# into a bootstrap venv of its own ($(UV_VENV)); the project venv is $(VENV).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
UV_VENV ?= .venv-uv
UV := $(UV_VENV)/bin/uv
UV_VERSION ?= 0.13.9
LOCK := requirements.lock
# Python writes its bytecode cache in every recipe, whatever the shell says: this kind of
# machine image sets PYTHONDONTWRITEBYTECODE, and then each Python process the tests, the
# kernels and the benchmarks start compiles every module it imports again (tests/conftest.py
# does the same for a plain `pytest`)
unexport PYTHONDONTWRITEBYTECODE
# requirements replaced for every package that asks for them (see the file)
OVERRIDES := overrides.txt
# torch's CPU build lies on this kind of machine's disk; uv looks there only when told to
FIND_LINKS := $(if $(wildcard /opt/wheels/*.whl),--find-links /opt/wheels)
INSTALL = $(UV) pip install -q -p $(PY) $(FIND_LINKS) -c $(LOCK) --overrides $(OVERRIDES)
# every extra the lock covers (`test` includes lab, distributed, torch, tf and cloud)
LOCK_EXTRAS := --extra test --extra bench

.PHONY: lab test quick bench lint lock clean

$(UV):
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/python -m pip install -q --disable-pip-version-check "uv==$(UV_VERSION)"

$(PY): | $(UV)
	$(UV) venv -q -p $(PYTHON) $(VENV)

$(VENV)/.installed-test: pyproject.toml $(LOCK) $(OVERRIDES) | $(PY)
	$(INSTALL) -e ".[test,bench]"
	touch $@

$(VENV)/.installed-lab: pyproject.toml $(LOCK) $(OVERRIDES) | $(PY)
	$(INSTALL) -e ".[lab,distributed,torch,tf,cloud]" "moto[server]>=5.0"
	touch $@

lab: $(VENV)/.installed-lab
	$(PY) -c "import tsexplore as tse; print(tse.sample_data('cube', 'data/cube.zarr'))"
	$(PY) -m jupyter lab --allow-root notebooks/01_explore.ipynb

# -m "": every test, also those plain `pytest` leaves out (pyproject.toml's addopts)
test: $(VENV)/.installed-test
	TSEXPLORE_SAMPLE_SIZE=small $(PY) -m pytest -q -m "" -n 2 --dist loadgroup

quick: $(VENV)/.installed-test
	TSEXPLORE_SAMPLE_SIZE=small $(PY) -m pytest -q

bench: $(VENV)/.installed-test
	$(PY) -m benchmarks all

lint: $(VENV)/.installed-test
	$(PY) -m ruff check tsexplore tests benchmarks
	$(PY) -m mypy tsexplore

lock: | $(UV)
	$(UV) pip compile pyproject.toml $(LOCK_EXTRAS) $(FIND_LINKS) --overrides $(OVERRIDES) -p $(PYTHON) -q -o $(LOCK)

clean:
	rm -rf $(VENV) $(UV_VENV) .pytest_cache .hypothesis
