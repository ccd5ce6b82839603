#!/usr/bin/env bash
# What a user installs, checked from the built wheels (make test runs all three):
#   scripts/wheels.sh build DIST [PYTHON]             the three sdists and wheels from this checkout into DIST,
#       then `twine check --strict` on all six (PYTHON has build and twine: requirements/release.txt; make
#       wheels and the release workflow run this)
#   scripts/wheels.sh library DIST VENV PYTHON [PIN...]
#       a fresh venv with the library's wheel alone (PINs: e.g. jax==0.10.0 for the range's lower
#       bound; what it installed is listed), then the library's tests and notebook 01 run against
#       it from a folder that holds no source
#   scripts/wheels.sh harness DIST VENV PYTHON DATA
#       a fresh venv with the library's and the harness's wheels, non-editable, then `tokenworth run --limit 5`
#       in an empty folder; then the two example plugins of examples/plugins/, installed non-editable from
#       their folders, through tests/test_plugin_examples.py (DB with the example method, the example
#       benchmark with the paper's methods, a sweep, kill -9 and resume, a two-node Ray run), and the broken
#       plugins of tests/plugins/ through tests/test_plugin_isolation.py (it installs them itself, as wheels,
#       into folders of its own: the venv and the examples' tests never see them)
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

case "${1:?usage: scripts/wheels.sh build|library|harness ...}" in
build)
  dist=${2:?DIST} python=${3:-python3}
  rm -rf "$dist" build agent/build bench/build
  # The library's wheel is built from its sdist, as pip builds it for a user with no wheel: that proves
  # the sdist complete. The harness's (agent/) and the benchmark programs' (bench/) are built from their
  # folders: their setup.py reads the version from ../tokenworth_jax/_version.py, which their sdists do
  # not hold (docs/release.md, "Publishing").
  "$python" -m build -q -o "$dist" .
  "$python" -m build -q -o "$dist" --sdist --wheel ./agent
  "$python" -m build -q -o "$dist" --sdist --wheel ./bench
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
library)
  dist=$(realpath -m "${2:?DIST}") venv=$(realpath -m "${3:?VENV}") python=${4:?PYTHON}; shift 4
  fresh_venv "$venv" "$python"
  wheel=$(ls "$dist"/tokenworth_jax-*.whl)
  # The library alone first: what a user's `pip install tokenworth-jax` brings (the pins too, if any).
  "$venv/bin/python" -m pip install -q "$wheel" "$@"
  (cd / && "$venv/bin/python" -c "import importlib.metadata as md; n = sorted(d.metadata['Name'].lower() for d in md.distributions()); n.remove('pip'); print(f'the library wheel installs {len(n)} distributions: {\" \".join(n)}')")
  # Then what the checks need: the test extra, and matplotlib for notebook 01's figure.
  "$venv/bin/python" -m pip install -q "$wheel[test]" matplotlib "$@"
  # Everything below runs in a copy that holds no source of ours (the checkout's folder would put its
  # own packages and egg-info on sys.path), so it sees only what the wheel installed.
  work=$(mktemp -d)
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
  ;;
harness)
  dist=$(realpath -m "${2:?DIST}") venv=$(realpath -m "${3:?VENV}") python=${4:?PYTHON} data=${5:?DATA}
  fresh_venv "$venv" "$python"
  "$venv/bin/python" -m pip install -q "$dist"/tokenworth_jax-*.whl "$dist"/tokenworth_agent-*.whl
  repo=$(pwd)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  TOKENWORTH_DATA_DIR=$data "$venv/bin/tokenworth" run --limit 5 --no-progress --out run
  test -s run/summary.md
  "$venv/bin/python" -c "import tokenworth_agent, tokenworth_jax; assert all('site-packages' in m.__file__ for m in (tokenworth_agent, tokenworth_jax)), (tokenworth_agent.__file__, tokenworth_jax.__file__)"
  echo "harness wheel: tokenworth run --limit 5 wrote $(ls run | wc -l) entries in its run folder"
  # The example plugins, as a user installs a plugin: pip from its folder, non-editable, beside the harness's
  # wheel with its test and ray extras (the two-node Ray run); their tests run from a copy without our source.
  wheel=$(ls "$dist"/tokenworth_agent-*.whl)
  "$venv/bin/python" -m pip install -q "$dist"/tokenworth_jax-*.whl "$wheel[test,ray]" \
    "$repo/examples/plugins/tokenworth-example-method" "$repo/examples/plugins/tokenworth-example-benchmark"
  cp -r "$repo/tests" "$work/tests"
  TOKENWORTH_DATA_DIR=$data TOKENWORTH_PLUGIN_EXAMPLES=required \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=10 tests/test_plugin_examples.py \
    tests/test_plugin_isolation.py
  ;;
*) echo "scripts/wheels.sh: unknown command $1" >&2; exit 2 ;;
esac
