"""The docs host's configuration and the release workflow, checked without the network: each says what
the Makefile and scripts/wheels.sh do, so they cannot drift apart.

- .readthedocs.yaml builds docs/api/conf.py (warnings as errors) from this checkout with the `docs`
  extra alone, the extra `make docs`'s venv installs, on a Python the library supports.
- .github/workflows/release.yml runs on a version tag, builds with `make wheels` (the target `make test`
  builds with: both sdists and wheels, `twine check --strict`), checks the library's wheel alone with
  scripts/wheels.sh, and publishes what it built by PyPI trusted publishing: the upload job alone may
  mint an OIDC token, in an environment, and no password or token secret appears anywhere.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
RTD = yaml.safe_load((REPO / ".readthedocs.yaml").read_text())
WORKFLOW_PATH = REPO / ".github" / "workflows" / "release.yml"
WORKFLOW = yaml.safe_load(WORKFLOW_PATH.read_text())
PUBLISH_ACTION = "pypa/gh-action-pypi-publish@"


def make_commands(*args: str) -> list[str]:
    """What `make -n -B ARGS` would run (nothing runs), one command a line."""
    done = subprocess.run(["make", "-n", "-B", "--no-print-directory", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def steps(job: str) -> list[dict]:
    return WORKFLOW["jobs"][job]["steps"]


def runs(job: str) -> list[str]:
    return [step["run"] for step in steps(job) if "run" in step]


def uses(job: str) -> list[str]:
    return [step["uses"] for step in steps(job) if "uses" in step]


# -- Read the Docs -------------------------------------------------------------------------------------

def test_read_the_docs_builds_the_api_reference_with_warnings_as_errors() -> None:
    assert RTD["version"] == 2
    conf = RTD["sphinx"]["configuration"]
    assert conf == "docs/api/conf.py" and (REPO / conf).is_file()
    assert RTD["sphinx"]["fail_on_warning"] is True  # as make docs's -W
    assert "mkdocs" not in RTD


def test_read_the_docs_installs_the_library_with_the_docs_extra_alone() -> None:
    assert RTD["python"]["install"] == [{"method": "pip", "path": ".", "extra_requirements": ["docs"]}]
    assert "docs" in PROJECT["optional-dependencies"]
    assert not any("requirements" in step for step in RTD["python"]["install"])  # nothing of the harness


def test_read_the_docs_python_is_one_the_library_supports() -> None:
    python = str(RTD["build"]["tools"]["python"])
    assert f"Programming Language :: Python :: {python}" in PROJECT["classifiers"]
    floor = re.fullmatch(r">=(\d+)\.(\d+)", PROJECT["requires-python"])
    assert floor is not None and tuple(map(int, python.split("."))) >= (int(floor[1]), int(floor[2]))


def test_make_docs_builds_the_same_in_its_own_venv(tmp_path: Path) -> None:
    venv = tmp_path / "docs-venv"
    setup = make_commands(f"DOCS_VENV={venv}", "docs-setup")
    installs = [line for line in setup if " -m pip install " in line and "--upgrade pip" not in line]
    assert installs == [f'{venv}/bin/python -m pip install -q -e ".[docs]"'], setup  # the extra RTD installs
    sphinx = [line for line in make_commands(f"DOCS_VENV={venv}", "docs") if " -m sphinx " in line]
    source = str(Path(RTD["sphinx"]["configuration"]).parent)
    assert [line.split(" -b ")[1].split()[0] for line in sphinx] == ["html", "doctest"]
    assert all(line.startswith(f"{venv}/bin/python -m sphinx -W ") and f" {source} " in line for line in sphinx)


# -- the release workflow ------------------------------------------------------------------------------

def test_the_release_runs_on_a_version_tag_only() -> None:
    trigger = WORKFLOW.get("on", WORKFLOW.get(True))  # YAML 1.1 reads a bare `on` as true
    assert trigger == {"push": {"tags": ["v*"]}}


def test_the_release_builds_what_make_test_builds_and_twine_checks_it() -> None:
    build = runs("build")
    assert build[0] == "make wheels DIST=dist"
    wheels = make_commands("DIST=dist", "wheels")
    assert "bash scripts/wheels.sh build dist .venv-release/bin/python" in wheels
    assert any("-r requirements/release.txt" in line for line in wheels)
    pins = (REPO / "requirements" / "release.txt").read_text()
    assert re.search(r"^build==\S+$", pins, re.M) and re.search(r"^twine==\S+$", pins, re.M)
    script = (REPO / "scripts" / "wheels.sh").read_text()
    build_section = script.split("\nbuild)\n", 1)[1].split("\n  ;;\n", 1)[0]
    assert re.search(r'-m twine (--no-color )?check --strict "\$dist"/\*', build_section)
    assert build_section.count('-m build ') == 3  # the library's, the harness's and the benchmark programs' sdist and wheel
    # The make test lane builds with the same target.
    assert any(line == "bash scripts/wheels.sh build dist .venv-release/bin/python"
               for line in make_commands("DIST=dist", "wheel-checks"))


def test_the_release_checks_the_library_wheel_alone_and_the_tag() -> None:
    build = runs("build")
    assert any(re.fullmatch(r"bash scripts/wheels\.sh library dist \S+ python3", line) for line in build)
    assert any("${GITHUB_REF_NAME#v}" in line and "tokenworth_jax-" in line for line in build)
    version = (REPO / "tokenworth_jax" / "_version.py").read_text()
    assert re.search(r'^__version__ = "\d+\.\d+\.\d+[^"]*"$', version, re.M)  # what the tag is compared with


def test_the_release_publishes_what_it_built_by_trusted_publishing() -> None:
    jobs = WORKFLOW["jobs"]
    assert jobs["publish"]["needs"] == "build"
    assert jobs["publish"]["environment"]["name"]
    assert jobs["publish"]["permissions"] == {"id-token": "write"}
    # Only the upload job may mint the token; everything else reads.
    assert WORKFLOW["permissions"] == {"contents": "read"}
    assert [name for name, job in jobs.items() if "id-token" in job.get("permissions", {})] == ["publish"]
    publish = [step for step in steps("publish") if step.get("uses", "").startswith(PUBLISH_ACTION)]
    assert len(publish) == 1 and not {"password", "user", "repository-url"} & set(publish[0].get("with", {}))
    upload = next(step for step in steps("build") if step.get("uses", "").startswith("actions/upload-artifact@"))
    download = next(step for step in steps("publish") if step.get("uses", "").startswith("actions/download-artifact@"))
    assert upload["with"]["name"] == download["with"]["name"]
    assert upload["with"]["path"] == download["with"]["path"] == publish[0]["with"]["packages-dir"] == "dist/"


def test_no_secret_in_the_workflows() -> None:
    workflows = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
    assert workflows == [WORKFLOW_PATH]
    for workflow in workflows:
        text = yaml.safe_dump(yaml.safe_load(workflow.read_text()))  # its values, not its comments
        assert not re.search(r"secrets\.|password|api[-_]token|pypi[-_]token", text, re.I), workflow.name
