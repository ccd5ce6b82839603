#!/usr/bin/env bash
# Build ALFWorld's engine venv: scripts/alfworld-venv.sh VENV [PYTHON]
#
# The two sdists (fast-downward-textworld: C++ via cmake, a few minutes on one core; jericho: C) are
# built once into a wheel folder outside the repository, keyed by platform and Python, since both
# wheels are tagged py3-none-any although they hold x86-64 .so files:
#   ${TOKENWORTH_WHEEL_CACHE:-~/.cache/tokenworth/wheels}/<sysconfig platform>-cp<XY>/
# Every later build installs from that folder (~10 s). The build backend's cmake is pinned.
set -euo pipefail
VENV=${1:?usage: alfworld-venv.sh VENV [PYTHON]}
PYTHON=${2:-python3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
REQS="$HERE/requirements/alfworld.txt"
"$PYTHON" -m venv "$VENV"
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --upgrade pip
KEY=$("$VPY" -c 'import sys, sysconfig; print(f"{sysconfig.get_platform()}-cp{sys.version_info[0]}{sys.version_info[1]}")')
WHEELS="${TOKENWORTH_WHEEL_CACHE:-$HOME/.cache/tokenworth/wheels}/$KEY"
mkdir -p "$WHEELS"
if ! ls "$WHEELS"/fast_downward_textworld-20.6.4-*.whl >/dev/null 2>&1 || ! ls "$WHEELS"/jericho-3.3.1-*.whl >/dev/null 2>&1; then
  echo "alfworld-venv: building fast-downward-textworld and jericho wheels into $WHEELS (once; a few minutes)"
  CONSTRAINTS=$(mktemp)
  echo "cmake==4.4.5" > "$CONSTRAINTS"
  start=$(date +%s)
  PIP_CONSTRAINT="$CONSTRAINTS" "$VPY" -m pip wheel -q --no-deps "fast-downward-textworld==20.6.4" "jericho==3.3.1" -w "$WHEELS"
  echo "alfworld-venv: wheels built in $(( $(date +%s) - start )) s"
  rm -f "$CONSTRAINTS"
fi
"$VPY" -m pip install -q --no-deps --find-links "$WHEELS" -r "$REQS"
# the engine must import (and find its planner library) before the venv counts as built
ALFWORLD_DATA="$VENV/alfworld-data" "$VPY" -c "import textworld, fast_downward; from textworld.envs.pddl import PddlEnv; from alfworld.agents.environment.alfred_tw_env import AlfredDemangler"
