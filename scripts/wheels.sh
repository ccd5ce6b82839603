#!/usr/bin/env bash
# What a user installs, checked from the built wheels (make test runs all three):
#   scripts/wheels.sh build DIST [PYTHON]             the three sdists and wheels from this checkout into DIST,
#       then `twine check --strict` on all six (PYTHON has build and twine: requirements/release.txt; make
#       wheels and the release workflow run this). In a git checkout they are built from a copy of the files
#       git does not ignore, so the build writes no egg-info into the checkout and can run beside the
#       editable installs of make test's set-up (which write theirs there).
#   scripts/wheels.sh library DIST VENV PYTHON [PIN...]
#       a fresh venv with the library's wheel alone (PINs: e.g. jax==0.10.0 for the range's lower
#       bound; what it installed is listed), then the library's tests and notebook 01 run against
#       it from a folder that holds no source; in two steps, as make test runs it (the venv in the
#       set-up, the check in a lane): `library-venv DIST VENV PYTHON [PIN...]`, then `library-check VENV`
#   scripts/wheels.sh harness DIST VENV PYTHON DATA
#       a fresh venv with the library's and the harness's wheels, non-editable, then `tokenworth run --limit 5`
#       in an empty folder; then the two example plugins of examples/plugins/, installed non-editable from
#       their folders, through tests/test_plugin_examples.py (DB with the example method, the example
#       benchmark with the paper's methods, a sweep, kill -9 and resume, a two-node Ray run), and the broken
#       plugins of tests/plugins/ through tests/test_plugin_isolation.py (it installs them itself, as wheels,
#       into folders of its own: the venv and the examples' tests never see them). In two steps, as make test
#       runs it: `harness-venv DIST VENV PYTHON` makes two venvs, VENV-bare (the two wheels alone, for the
#       run) and VENV (the two wheels with their test and ray extras and the examples), then
#       `harness-check VENV DATA` runs the checks in them
set -euo pipefail
cd "$(dirname "$0")/.."
# The library's tests: the files that declare `pytestmark = pytest.mark.library` (they import nothing
# of the harness).
library_tests() { grep -l '^pytestmark = .*pytest\.mark\.library' tests/test_*.py | sort; }

fresh_venv() {  # VENV PYTHON
  rm -rf "$1"
  "$2" -m venv "$1"
  "$1/bin/python" -m pip install -q --upgrade pip
}

# The library's tests and notebook 01, in VENV (made by library-venv), from a copy that holds no source of
# ours (the checkout's folder would put its own packages and egg-info on sys.path): it sees only what the
# wheel installed.
library_check() {  # VENV
  local venv=$1 files
  work=$(mktemp -d)  # global: the EXIT trap reads it
  trap 'rm -rf "$work"' EXIT
  cp -r tests examples notebooks README.md pyproject.toml "$work/"
  mkdir "$work/docs" && cp -r docs/api "$work/docs/"  # pages a test reads (tests/test_sharp_bits.py: its misuse table)
  mapfile -t files < <(library_tests)
  cd "$work"
  "$venv/bin/python" - <<'PY'
import importlib.metadata as md, importlib.util, sys
names = sorted(d.metadata["Name"].lower() for d in md.distributions())
ours = [n for n in names if n.startswith("tokenworth")]
assert ours == ["tokenworth-jax"], f"the library's wheel brought {ours}"
for generic in ("agent", "bench", "tokenworth_agent", "tokenworth_bench"):
    assert importlib.util.find_spec(generic) is None, f"`import {generic}` resolves after installing the library"
import jax, tokenworth_jax
assert "site-packages" in tokenworth_jax.__file__, tokenworth_jax.__file__
print(f"library venv: tokenworth-jax {tokenworth_jax.__version__}, jax {jax.__version__}, python "
      f"{sys.version.split()[0]}, {len(names)} distributions: {' '.join(names)}")
PY
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=5 "${files[@]}"
  # Notebook 01 as a script: it generates its own stream and needs only the library (and matplotlib).
  MPLBACKEND=Agg "$venv/bin/python" notebooks/01_quickstart.py | grep '^KEY_OUTPUTS '
}

# The harness's checks in VENV-bare and VENV (made by harness-venv), from an empty folder and a copy of tests/.
harness_check() {  # VENV DATA
  local venv=$1 data=$2 repo
  repo=$(pwd)
  work=$(mktemp -d)  # global: the EXIT trap reads it
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  TOKENWORTH_DATA_DIR=$data "$venv-bare/bin/tokenworth" run --limit 5 --no-progress --out run
  test -s run/summary.md
  "$venv-bare/bin/python" -c "import tokenworth_agent, tokenworth_jax; assert all('site-packages' in m.__file__ for m in (tokenworth_agent, tokenworth_jax)), (tokenworth_agent.__file__, tokenworth_jax.__file__)"
  echo "harness wheel: tokenworth run --limit 5 wrote $(ls run | wc -l) entries in its run folder"
  # The examples' tests and the broken plugins' run from a copy without our source.
  cp -r "$repo/tests" "$work/tests"
  TOKENWORTH_DATA_DIR=$data TOKENWORTH_PLUGIN_EXAMPLES=required \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=10 tests/test_plugin_examples.py \
    tests/test_plugin_isolation.py
}

case "${1:?usage: scripts/wheels.sh build|library|harness ...}" in
build)
  dist=$(realpath -m "${2:?DIST}") python=${3:-python3}
  rm -rf "$dist" build agent/build bench/build
  src=.
  if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    # What git does not ignore (tracked or not, as the files are now), copied with their relative paths.
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
    git ls-files -z --cached --others --exclude-standard |
      while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
      tar --null -T - -cf - | tar -xf - -C "$src"
  fi
  # The library's wheel is built from its sdist, as pip builds it for a user with no wheel: that proves
  # the sdist complete. The harness's (agent/) and the benchmark programs' (bench/) are built from their
  # folders: their setup.py reads the version from ../tokenworth_jax/_version.py, which their sdists do
  # not hold (docs/release.md, "Publishing").
  "$python" -m build -q -o "$dist" "$src"
  "$python" -m build -q -o "$dist" --sdist --wheel "$src/agent"
  "$python" -m build -q -o "$dist" --sdist --wheel "$src/bench"
  rm -rf build agent/build bench/build
  ls "$dist"
  # What a release uploads: three sdists and three wheels, each wheel with its sdist.
  for wheel in "$dist"/*.whl; do
    base=$(basename "$wheel"); sdist="$dist/${base%%-py3-*}.tar.gz"
    test -f "$sdist" || { echo "scripts/wheels.sh: $base has no sdist ($(basename "$sdist"))" >&2; exit 1; }
  done
  test "$(ls "$dist" | wc -l)" -eq 6 || { echo "scripts/wheels.sh: expected 3 sdists and 3 wheels in $dist" >&2; exit 1; }
  # The library's sdist holds the library alone (MANIFEST.in): its package, licence, metadata and long description.
  extra=$(tar tzf "$dist"/tokenworth_jax-*.tar.gz | sed 's|^[^/]*/||' | grep -vE '^(tokenworth_jax(\.egg-info)?/.*|docs/|docs/pypi-library\.md|LICENSE|MANIFEST\.in|PKG-INFO|pyproject\.toml|setup\.cfg|)$' || true)
  test -z "$extra" || { echo "scripts/wheels.sh: the library's sdist holds more than the library:" $extra >&2; exit 1; }
  # Their metadata, and each long description as PyPI renders it (an error, or a warning, fails).
  "$python" -m twine --no-color check --strict "$dist"/*
  ;;
library-venv | library)
  dist=$(realpath -m "${2:?DIST}") venv=$(realpath -m "${3:?VENV}") python=${4:?PYTHON}; step=$1; shift 4
  fresh_venv "$venv" "$python"
  wheel=$(ls "$dist"/tokenworth_jax-*.whl)
  # The library alone first: what a user's `pip install tokenworth-jax` brings (the pins too, if any).
  "$venv/bin/python" -m pip install -q "$wheel" "$@"
  (cd / && "$venv/bin/python" -c "import importlib.metadata as md; n = sorted(d.metadata['Name'].lower() for d in md.distributions()); n.remove('pip'); print(f'the library wheel installs {len(n)} distributions: {\" \".join(n)}')")
  # Then what the checks need: the test extra, and matplotlib for notebook 01's figure.
  "$venv/bin/python" -m pip install -q "$wheel[test]" matplotlib "$@"
  if [ "$step" = library ]; then library_check "$venv"; fi
  ;;
library-check)
  library_check "$(realpath -m "${2:?VENV}")"
  ;;
harness-venv | harness)
  dist=$(realpath -m "${2:?DIST}") venv=$(realpath -m "${3:?VENV}") python=${4:?PYTHON}
  # The harness's wheel alone (with the library's), for `tokenworth run`: what a user's install brings.
  fresh_venv "$venv-bare" "$python"
  "$venv-bare/bin/python" -m pip install -q "$dist"/tokenworth_jax-*.whl "$dist"/tokenworth_agent-*.whl
  # The example plugins, as a user installs a plugin: pip from its folder, non-editable, beside the harness's
  # wheel with its test and ray extras (the two-node Ray run).
  fresh_venv "$venv" "$python"
  wheel=$(ls "$dist"/tokenworth_agent-*.whl)
  "$venv/bin/python" -m pip install -q "$dist"/tokenworth_jax-*.whl "$wheel[test,ray]" \
    "$(pwd)/examples/plugins/tokenworth-example-method" "$(pwd)/examples/plugins/tokenworth-example-benchmark"
  if [ "$1" = harness ]; then harness_check "$venv" "${5:?DATA}"; fi
  ;;
harness-check)
  harness_check "$(realpath -m "${2:?VENV}")" "${3:?DATA}"
  ;;
*) echo "scripts/wheels.sh: unknown command $1" >&2; exit 2 ;;
esac
