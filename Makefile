# paged-kv-course: `make lab` opens the course, `make test` runs every test. Both set up .venv first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
export PYTHONPATH := $(CURDIR)
# nbgrader runs helpers (alembic) from PATH: put the environment's bin first.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
NBCONFIG := --NbGrader.config_file=autograder/nbgrader_config.py
LABS := $(notdir $(wildcard solutions/[0-9][0-9]-*))

.PHONY: help env lab test test-package test-notebooks release bench model lock clean

help:
	@echo "make lab      - create .venv if missing, then start JupyterLab on course/"
	@echo "make test     - create .venv if missing, then run every test"
	@echo "make bench    - BlockManager allocate+free time per cycle vs pool size (writes bench/results/)"
	@echo "make release  - regenerate course/ from solutions/ with nbgrader"
	@echo "make model    - retrain lab 07's tiny model on CPython's docs (about 15 min on 2 cores; not in make test)"
	@echo "make lock     - rewrite requirements-lock.txt from the current .venv"

$(STAMP): requirements-lock.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ is needed, found " + sys.version.split()[0])'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	if $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
	  $(PY) -m pip install --quiet -r requirements-lock.txt; \
	else \
	  echo "Python 3.10: the lock needs 3.11+ (nbgrader 0.9.6 does); installing from pyproject ranges"; \
	  $(PY) -m pip install --quiet -e ".[course,test]"; \
	fi
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (paged-kv-course)" >/dev/null
	touch $(STAMP)

env: $(STAMP)

lab: env
	$(VENV)/bin/jupyter lab --notebook-dir=course $(if $(filter 0,$(shell id -u)),--allow-root)

test: env
	$(PY) -m pytest

release: env
	for lab in $(LABS); do $(VENV)/bin/nbgrader generate_assignment $$lab --force --log-level=WARN $(NBCONFIG) || exit 1; done

bench: env
	$(PY) bench/bench_block_manager.py

model: env
	$(PY) tools/train_tiny_model.py

lock: env
	{ sed -n '/^#/p' requirements-lock.txt; $(PY) -m pip freeze --exclude-editable | sed 's/+cpu//'; } > requirements-lock.tmp
	mv requirements-lock.tmp requirements-lock.txt

clean:
	rm -rf $(VENV) autograder/work bench/results .hypothesis
