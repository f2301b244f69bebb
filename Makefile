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
KERNEL := $(VENV)/.kernel-stamp
# make lab PORT=8899 LAB_ARGS="--no-browser --ip=0.0.0.0": any JupyterLab option goes in LAB_ARGS.
PORT ?=
LAB_ARGS ?=
# ROLE=student (default) hides nbgrader's instructor tools (student-lab/README.md); ROLE=instructor keeps them.
ROLE ?= student
# The course's language. make lab: COURSE_LANG=en opens the labs in English (course/), COURSE_LANG=zh_CN in Simplified
# Chinese (course/zh_CN/); by default the language of the locale (LC_ALL, LC_MESSAGES, LANG: zh... is Chinese).
# make handout and make hub-release: the class's language (default English). Not LANG: that is the locale, which
# make passes on to every command.
COURSE_LANG ?=
LAB_LANG := $(or $(COURSE_LANG),$(if $(filter zh%,$(or $(LC_ALL),$(LC_MESSAGES),$(LANG))),zh_CN,en))
LAB_SUBDIR := $(if $(filter zh_CN,$(LAB_LANG)),/zh_CN)
# make hub: a local JupyterHub with the course (hub/__main__.py); docs/instructors.md, "Grading on JupyterHub".
HUB_DIR ?= /srv/paged-kv-hub
STUDENTS ?= 3
HUB_PORT ?= 8000
# A user's server idle this many seconds is stopped (JupyterHub's idle culler); 0: never.
HUB_IDLE_TIMEOUT ?= 3600
HUB := $(PY) -m hub --dir $(HUB_DIR)

.PHONY: help env lab test check test-triton36 release sync-colab bench bench-platforms bench-gpu gpu-check tune-gpu model lock clean handout collect grade gradebook insight gradescope prairielearn grader-report grader-bench hub hub-release hub-grade hub-clean new-lab format

help:
	@echo "make lab      - create .venv if missing, then start JupyterLab on course/ (COURSE_LANG=zh_CN: course/zh_CN/,"
	@echo "               the labs in Simplified Chinese; default: your locale's language; PORT=8899,"
	@echo "               LAB_ARGS='--no-browser ...', ROLE=instructor for nbgrader's instructor tools)"
	@echo "make test     - create .venv if missing, then run every test"
	@echo "make check    - the fast loop: lint, the package's tests, the layer rules, the docs' links, one lab graded end to end"
	@echo "make check LAB=09-chunked-prefill - one lab's inner loop: lint and every test marked lab09 (its checks, catalogue,"
	@echo "               notebook, editions, package tests; not its class simulation or browser run: make test)"
	@echo "make bench    - BlockManager time per request life vs pool size (writes bench/results/);"
	@echo "               NANOVLLM=PATH adds nano-vllm's figure (PATH holds its nanovllm/ folder)"
	@echo "make bench-gpu - paged decode attention kernels on a GPU, GB/s vs attainable copy and HBM peak (CPU: dry run)"
	@echo "make tune-gpu  - sweep the package kernel's TILE/warps/stages on this GPU into paged_kv/kernels/launch_table.json"
	@echo "make gpu-check OUT=DIR - bench/gpu_check.sh: kernel tests, lab 06 notebook, benchmark, sweep (CPU: dry run)"
	@echo "make test-triton36 - the kernel tests in the interpreter under Triton 3.6 (Colab's GPU runtime), in \$$(VENV36)"
	@echo "make release  - regenerate course/ from solutions/ with nbgrader (runs sync-colab first), then the translations"
	@echo "               (course/zh_CN/: from course/ and each lab's catalog, solutions/<lab>/zh_CN.po)"
	@echo "make sync-colab - rewrite the Colab and ModelScope badges and install lines from pyproject.toml's Repository and ModelScope"
	@echo "make model    - retrain lab 07's tiny model on CPython's docs (about 80 min on 2 cores: the weights record 4,897 s; not in make test)"
	@echo "make lock     - rewrite requirements-lock.txt from the current .venv"
	@echo "make format   - ruff format and ruff check --fix (make test and make check fail on what it would change)"
	@echo "make new-lab ID=09-name TITLE='...' TODO=cache/ledger.py:fn EXAMPLE='10, 4' - scaffold a graded lab"
	@echo "             (its notebook, autograder/labs/labNN_name/, its release; docs/maintainers.md, Adding a lab)"
	@echo "make handout [LAB=05-prefix-cache] [COURSE_LANG=zh_CN] - what students get (no solutions, no graders); with LAB,"
	@echo "               a class's handout for that lab: labs up to it, the package without its TODOs' or later labs'"
	@echo "               answers; COURSE_LANG: its language (en, default, or zh_CN: the notebooks and README in Chinese)"
	@echo "make collect LAB=02-atomic-prefill FROM=export.zip|folder - students' notebooks (Canvas, Moodle, folders)"
	@echo "make grade LAB=02-atomic-prefill - hardened autograde + feedback + grades CSV, one worker per core"
	@echo "make gradebook LAB=02-atomic-prefill LMS=canvas ASSIGNMENT_ID=123 [POINTS=10] - the lab's grades as Canvas's"
	@echo "               gradebook CSV (LMS=moodle: Moodle's grading worksheet) in autograder/work/reports/LAB/"
	@echo "make gradescope [LAB=02-atomic-prefill] - dist/gradescope/<LAB>-autograder.zip for Gradescope (every graded lab without LAB)"
	@echo "make prairielearn [LAB=02-atomic-prefill] - dist/prairielearn/<LAB>/, an externally graded PrairieLearn question"
	@echo "make insight [LAB=02-atomic-prefill] - what the class got wrong (reports/LAB/insight.html; make grade writes it too;"
	@echo "               without LAB: the class across every graded lab, reports/across.html and across.csv)"
	@echo "make grader-report - grade a simulated class per lab: bugs caught, hostile cases handled, s/student"
	@echo "make grader-bench [N=30] - a class of N per lab with one endless loop: seconds per student"
	@echo "make bench-platforms [LAB=..] - Gradescope's run_autograder per upload vs make grade, one core"
	@echo "make hub [STUDENTS=3 HUB_PORT=8000 HUB_DIR=/srv/paged-kv-hub HUB_IDLE_TIMEOUT=3600] - JupyterHub with the course (root:"
	@echo "               makes local accounts: an instructor and N students, demo password printed)"
	@echo "make hub-release LAB=02-atomic-prefill [COURSE_LANG=zh_CN] - release the labs up to LAB; students get LAB's"
	@echo "               package edition (no answers to LAB or later labs); no LAB: every lab and the whole package"
	@echo "               (self-study); COURSE_LANG: the class's language (en, default, or zh_CN)"
	@echo "make hub-grade LAB=02-atomic-prefill - collect from the exchange, grade as make grade does, release feedback"
	@echo "make hub-clean - stop the hub, remove its accounts (with their homes) and HUB_DIR"

# A $(VENV) that is a symbolic link is another checkout's environment: make never installs into it (that would
# point its editable install at this clone, and every checkout using it would import this clone's paged_kv).
# Update it with make in the checkout it belongs to. Where its stamps are missing, make only checks that it imports
# the course's packages (paged_kv from this clone: PYTHONPATH) and fails, saying so, where it does not.
BORROWED_VENV := $(shell test -L $(VENV) && echo yes)
ifeq ($(BORROWED_VENV),yes)
$(STAMP) $(KERNEL):
	@$(PY) -c 'import paged_kv, nbgrader, torch, triton' || { echo "$(VENV) links to $$(readlink $(VENV)), which cannot import the course's packages: run make there"; exit 1; }
	@echo "$(VENV) links to another checkout's environment ($$(readlink $(VENV))): nothing is installed into it"
else
$(STAMP): requirements-lock.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ is needed, found " + sys.version.split()[0])'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	if $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
	  $(PY) -m pip install --quiet -r requirements-lock.txt; \
	else \
	  echo "Python 3.10: the lock needs 3.11+ (nbgrader 0.9.6 does); installing from pyproject ranges"; \
	  $(PY) -m pip install --quiet -e ".[course,hub,test]"; \
	fi
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The notebooks' kernel (paged_kv/lab/notebook_kernel.py: reports what the notebooks store, so they open saved).
$(KERNEL): $(STAMP) paged_kv/lab/notebook_kernel.py
	$(PY) -m paged_kv.lab.notebook_kernel install >/dev/null
	touch $(KERNEL)
endif

env: $(STAMP) $(KERNEL)

lab: env
	$(if $(filter-out student instructor,$(ROLE)),$(error ROLE must be student or instructor, not '$(ROLE)'))
	$(if $(filter-out en zh_CN,$(LAB_LANG)),$(error COURSE_LANG must be en or zh_CN, not '$(LAB_LANG)'))
	$(if $(filter student,$(ROLE)),JUPYTER_CONFIG_PATH="$(CURDIR)/student-lab$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))") \
	$(VENV)/bin/jupyter lab --notebook-dir=course$(LAB_SUBDIR) $(if $(PORT),--port=$(PORT)) $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# Test files run side by side on TEST_WORKERS workers (pytest-xdist; a file stays on one worker, so its
# fixtures are made once). Files are handed out in testpaths' order (--no-loadscope-reorder: xdist would
# otherwise order them by their number of tests, leaving the slowest files, which have few tests, for last):
# the two halves of the class simulation first, one per worker, then the other slow files, longest first,
# so that no long file starts when the other worker is nearly done. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
# The live hub (make hub) closes this checkout to every other account while it runs (hub/checkout.py), so that no
# student reads an answer; a test that meanwhile runs a kernel as another uid from the checkout would fail. Its
# browser tests therefore run alone, after the rest.
HUB_BROWSER_TESTS := tests/notebooks/test_hub_in_browser.py

test: env
	$(PY) -m ruff check
	$(PY) -m ruff format --check
	$(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) --durations=25 \
		--ignore=$(HUB_BROWSER_TESTS)
	$(PY) -m pytest $(HUB_BROWSER_TESTS)

# The fast inner loop (a few minutes on 2 cores): lint, the package's tests, the layer rules, the Makefile's
# rules, the docs' links, the engine tables (tests/test_engine_maps.py), and one lab graded end to end (lab 02: its solution full marks, its release 0). `make test` runs everything.
CHECK_TESTS := tests/cache tests/engine tests/kernels tests/lab tests/bench tests/test_layers.py tests/test_autograder_layers.py tests/test_makefile.py tests/test_docs.py \
	tests/test_engine_maps.py autograder/tests/test_one_lab_end_to_end.py autograder/tests/test_insight.py
# make check LAB=NN-name: that lab's tests instead (the marker conftest.py gives them: autograder/labs/markers.py),
# but its class simulation and its run in a browser, which make test runs.
CHECK_LAB_TESTS = -m lab$(firstword $(subst -, ,$(LAB))) --ignore=autograder/tests/test_class_simulation_a.py \
	--ignore=autograder/tests/test_class_simulation_b.py --ignore=tests/notebooks/test_labs_in_browser.py
check: env
	$(if $(LAB),$(if $(filter $(LAB),$(LABS)),,$(error LAB=$(LAB) is no lab; the labs are $(LABS))))
	$(PY) -m ruff check
	$(PY) -m ruff format --check
	$(PY) -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) $(if $(LAB),$(CHECK_LAB_TESTS),$(CHECK_TESTS))

format: env
	$(PY) -m ruff format
	$(PY) -m ruff check --fix

new-lab: env
	$(PY) -m tools.new_lab "$(ID)" --title "$(TITLE)" --todo "$(TODO)" --example "$(EXAMPLE)"

sync-colab: env
	$(PY) -m tools.sync_colab

# course/ by nbgrader, then each translation's catalogs brought in line with the notebooks (a changed English cell's
# translation marked stale) and its release, course/<language>/, generated from course/ and them (tools/translations.py).
release: env sync-colab
	for lab in $(LABS); do $(VENV)/bin/nbgrader generate_assignment $$lab --force --log-level=WARN $(NBCONFIG) || exit 1; done
	$(PY) -m tools.translations update
	$(PY) -m tools.translations release

bench: env
	$(PY) bench/bench_block_manager.py $(if $(NANOVLLM),--nanovllm $(NANOVLLM))

bench-gpu: env
	$(PY) bench/bench_paged_attention.py

tune-gpu: env
	$(PY) bench/tune_paged_attention.py --write

gpu-check: env
	bash bench/gpu_check.sh $(or $(OUT),bench/results/gpu-check)

# Triton 3.6 (with torch 2.11, as Colab's GPU runtime ships them) beside the lock's 3.7: a second venv, the
# kernel tests in the interpreter. PyPI's torch 2.11 is a CUDA build (several GB; it runs on a CPU too);
# TORCH36="torch==2.13.0" takes the CPU build this machine holds instead. numpy < 2.4: Triton 3.6's interpreter
# converts 1-element arrays to ints, which numpy 2.4 refuses (triton-lang/triton#9171, fixed in 3.7 by #9172).
# Not part of `make test`.
VENV36 ?= .venv-triton36
TORCH36 ?= torch==2.11.*
TRITON36 ?= triton==3.6.*
$(VENV36)/.installed-stamp:
	test -x $(VENV36)/bin/python || $(PYTHON) -m venv $(VENV36)
	$(VENV36)/bin/pip install --quiet "$(TORCH36)" "$(TRITON36)" "numpy<2.4" xxhash matplotlib pytest hypothesis
	touch $@

test-triton36: $(VENV36)/.installed-stamp
	TRITON_INTERPRET=1 $(VENV36)/bin/python -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
	TRITON_INTERPRET=1 $(VENV36)/bin/python -m pytest -q -p no:cacheprovider -o addopts= tests/kernels

model: env
	$(PY) tools/train_tiny_model.py

handout: env
	$(PY) -m autograder.handout.handout $(if $(LAB),--lab $(LAB)) $(if $(COURSE_LANG),--language $(COURSE_LANG))

collect: env
	@test -n "$(LAB)" -a -n "$(FROM)" || { echo "usage: make collect LAB=<NN-lab> FROM=<zip or folder>"; exit 2; }
	$(PY) -m autograder.collect.collect $(LAB) "$(FROM)"

grade: env
	@test -n "$(LAB)" || { echo "usage: make grade LAB=<NN-lab>"; exit 2; }
	$(PY) -m autograder.grade.grade $(LAB)

# The LMS's ids come from the download collected (make collect); Canvas's assignment id from its address.
gradebook: env
	@test -n "$(LAB)" -a -n "$(LMS)" || { echo "usage: make gradebook LAB=<NN-lab> LMS=canvas|moodle [ASSIGNMENT_ID=<Canvas assignment id>] [POINTS=<LMS maximum>]"; exit 2; }
	$(PY) -m autograder.grade.lms_gradebook $(LAB) --lms $(LMS) $(if $(ASSIGNMENT_ID),--assignment-id $(ASSIGNMENT_ID)) $(if $(POINTS),--points $(POINTS))

gradescope: env
	$(PY) -m autograder.platforms.gradescope build $(LAB)

prairielearn: env
	$(PY) -m autograder.platforms.prairielearn build $(LAB)

insight: env
	$(PY) -m autograder.feedback.insight $(if $(LAB),$(LAB),--across)

grader-report: env
	$(PY) -m autograder.proof.report

grader-bench: env
	$(PY) -m autograder.proof.report --bench $(or $(N),30)

# Gradescope's run_autograder per honest upload vs make grade's s/student, on one core (root: it mounts /autograder).
bench-platforms: env
	taskset -c 0 $(PY) bench/bench_platforms.py $(LAB)

hub: env
	$(HUB) up --students $(STUDENTS) --port $(HUB_PORT) --idle-timeout $(HUB_IDLE_TIMEOUT)

hub-release: env
	$(HUB) release $(LAB) $(if $(COURSE_LANG),--language $(COURSE_LANG))

hub-grade: env
	@test -n "$(LAB)" || { echo "usage: make hub-grade LAB=<NN-lab>"; exit 2; }
	$(HUB) grade $(LAB)

hub-clean: env
	$(HUB) clean

lock: env
	{ sed -n '/^#/p' requirements-lock.txt; $(PY) -m pip freeze --exclude-editable | sed 's/+cpu//'; } > requirements-lock.tmp
	mv requirements-lock.tmp requirements-lock.txt
	$(PY) tools/student_lock.py

clean:
	rm -rf $(VENV) $(VENV36) autograder/work bench/results .hypothesis dist
