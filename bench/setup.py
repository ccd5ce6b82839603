"""The benchmark programs' version and their pin on the harness, read from the library's one version file.

As agent/setup.py: setuptools' ``attr:`` reads only inside this folder, and the version is written once,
in ../tokenworth_jax/_version.py. A wheel built from here depends on exactly that release of
tokenworth-agent (which pins tokenworth-jax the same way).
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

setup(version=VERSION, install_requires=[f"tokenworth-agent=={VERSION}"])
