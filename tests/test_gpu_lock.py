"""requirements/gpu-lock.txt, the resolved ``[gpu]`` set: one set of NVIDIA libraries, all CUDA 13,
on the tested vLLM and JAX; and it is still what the resolver gives.

The file is ``uv pip compile`` output (the command is in its header, with ``--exclude-newer``).
The first tests read the committed file; the last re-runs the recorded command with the lock
itself as constraints (metadata only: no wheel is downloaded) and compares: the committed set
must still be a complete resolution of the harness's ``[gpu]`` extra with the library
(requirements/gpu.in: a changed requirement in either pyproject.toml conflicts with it, a new one
adds a package). Why the constraints: the registry
this project installs from serves no upload times, so ``--exclude-newer`` alone does not hold the
answer still, and a release made after the lock (uvicorn 0.55.0 after 0.54.0, on 2 December 2026)
changed it while nothing here had.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tokenworth_agent.backbones import vllm_api

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "gpu-lock.txt"
HARNESS = REPO / "agent" / "pyproject.toml"  # the [gpu] extra is the harness's
# The CUDA libraries a process loads: no two may come from different CUDA majors or be installed twice.
CUDA_LIBRARIES = ("cublas", "cuda-cupti", "cuda-nvrtc", "cuda-runtime", "cudnn", "cufft", "cufile", "curand",
                  "cusolver", "cusparse", "cusparselt", "nccl", "nvjitlink", "nvshmem", "nvtx", "cuda-nvcc")
# nvidia-cutlass-dsl always installs its cu12 build beside the cu13 one its [cu13] extra adds: two
# folders (nvidia_cutlass_dsl/cu12, /cu13) the DSL chooses between at run time, not CUDA's libraries.
CU12_ALLOWED = {"nvidia-cutlass-dsl-libs-cu12"}


def pins(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.M))


def release(version: str) -> tuple[int, ...]:
    found = vllm_api.release(version)
    assert found is not None, version
    return found


def test_one_set_of_cuda_13_libraries():
    locked = pins(LOCK.read_text())
    assert not [n for n in locked if n.endswith("-cu12") and n not in CU12_ALLOWED]
    for library in CUDA_LIBRARIES:
        names = [n for n in locked if re.fullmatch(rf"nvidia-{library}(-cu\d+)?", n)]
        assert len(names) <= 1, f"{library} is installed twice: {names}"
        assert not names or not names[0].endswith("-cu12"), names
    assert {"nvidia-cublas", "nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cuda-runtime"} <= set(locked)
    for name in ("cuda-toolkit", "cuda-bindings", "cuda-python"):  # the monolithic cuda-python 12 would clash
        assert release(locked[name])[0] == 13, (name, locked[name])
    assert release(locked["jax-cuda13-plugin"]) == release(locked["jaxlib"])  # JAX's plugin is CUDA 13 too
    assert not [n for n in locked if n.startswith("jax-cuda12")]


def test_the_locked_vllm_and_jax_are_the_tested_ones():
    locked = pins(LOCK.read_text())
    extras = tomllib.loads(HARNESS.read_text())["project"]["optional-dependencies"]
    assert vllm_api.is_supported(locked["vllm"])
    jax_spec = next(r for r in extras["gpu"] if r.startswith("jax[cuda13]"))
    low, high = re.fullmatch(r"jax\[cuda13\]>=([\d.]+),<([\d.]+)", jax_spec).groups()
    assert release(low) <= release(locked["jax"]) < release(high)
    assert locked["jax"] == locked["jaxlib"]


def uv_command() -> list[str] | None:
    found = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    return [found] if found else None


@pytest.mark.skipif(uv_command() is None, reason="uv is not installed (it is in the [test] extra)")
def test_the_recorded_command_still_resolves_to_the_committed_set(tmp_path):
    header = re.search(r"^#\s+(uv pip compile .*)$", LOCK.read_text(), re.M)
    assert header and "--exclude-newer" in header.group(1), "the lock must record its --exclude-newer date"
    args = shlex.split(header.group(1))[1:]
    args[args.index("-o") + 1] = str(tmp_path / "lock.txt")
    pinned = tmp_path / "pinned.txt"  # the lock's pins as constraints (uv takes no `-e .` line there)
    pinned.write_text("".join(f"{name}=={version}\n" for name, version in pins(LOCK.read_text()).items()))
    done = subprocess.run([*uv_command(), *args, "-c", str(pinned), "--no-header", "--quiet"], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "UV_NO_PROGRESS": "1"})
    if done.returncode != 0 and re.search(r"(?i)connect|dns|network|timed? ?out|offline", done.stderr):
        pytest.skip(f"the package registry cannot be reached: {done.stderr.strip().splitlines()[-1:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert pins((tmp_path / "lock.txt").read_text()) == pins(LOCK.read_text())


def test_the_readme_install_line_installs_the_locked_gpu_set():
    """The README's GPU install line cannot run without CUDA wheels; what it names is checked here
    (its conversion and run lines run in tests/test_vllm_engine.py)."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index("\n## GPU\n"):], re.S).group(1)
    [line] = [shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("pip install")]
    extras = tomllib.loads(HARNESS.read_text())["project"]["optional-dependencies"]
    target = next(w for w in line if w.startswith("./agent["))
    assert set(re.fullmatch(r"\./agent\[(.*)\]", target).group(1).split(",")) <= set(extras)
    assert "." in line and "gpu" in target and line[line.index("-c") + 1] == str(LOCK.relative_to(REPO))
