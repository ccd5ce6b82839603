#!/usr/bin/env bash
# Builds a BigCodeBench evaluation venv: VENV from the requirement files given, then the official
# evaluator without its generation dependencies, then matplotlib's font cache (copied into each judging
# sandbox, so a fresh sandbox does not rebuild it). Usage: bigcodebench-venv.sh VENV REQUIREMENTS...
# A venv of its own because the evaluation libraries pin numpy 1.x and the project's JAX needs numpy 2;
# the judge runs it inside the sandbox (docs/bigcodebench.md, "The evaluation venv").
set -euo pipefail
PYTHON=${PYTHON:-python3}
EVALUATOR="bigcodebench==0.2.5"   # its setup.cfg declares vLLM, transformers, datasets, ...: judging needs none
venv=$1
shift
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "the BigCodeBench evaluation venv needs CPython 3.11 (its pins are cp311 wheels): set PYTHON=python3.11")'
"$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
# --compile whatever the caller's pip settings (make test's set-up turns compiling off): the judge runs this venv
# read-only inside the sandbox, where no process can write the bytecode it did not find.
for requirements in "$@"; do
  "$venv/bin/python" -m pip install -q --compile -r "$requirements"
done
"$venv/bin/python" -m pip install -q --compile --no-deps "$EVALUATOR"
mkdir -p "$venv/share/bigcodebench-mplconfig"
MPLCONFIGDIR="$venv/share/bigcodebench-mplconfig" MPLBACKEND=Agg "$venv/bin/python" -c "import matplotlib.pyplot"
"$venv/bin/python" -c "import bigcodebench.eval, tree_sitter_python; print('BigCodeBench evaluator', bigcodebench.__version__)"
