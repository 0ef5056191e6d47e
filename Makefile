# Two entry points for a fresh machine (see README):
#   make check   build the qr_v2 submission and check it (CPU path when no GPU)
#   make test    run the CPU test suite (in parallel, one worker per CPU)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv check test clean

venv: $(STAMP)

# torch==2.13.0 is a local CPU wheel on our CPU machines; installing it first
# keeps pip from resolving an unpinned (multi-GB CUDA) torch for the project.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

check: $(STAMP)
	$(PY) -m popcorn build qr_v2
	$(PY) -m popcorn check qr_v2

# One pytest-xdist worker per CPU; the nvcc tests stay together on one worker (their fixture starts all of
# the module's compiles at once), the rest are spread. A plain `python -m pytest` runs the suite serially.
test: $(STAMP)
	$(PY) -m pytest -n auto --dist loadgroup

clean:
	rm -rf $(VENV) build *.egg-info
