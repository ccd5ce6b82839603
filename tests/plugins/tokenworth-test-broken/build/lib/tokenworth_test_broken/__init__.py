"""Broken plugins, one entry per misuse (see pyproject.toml), and one valid benchmark (:mod:`.valid`);
:mod:`.common` is the small valid benchmark each broken benchmark entry spoils in exactly one way.

Importing any of it appends this package's name to the file ``$TOKENWORTH_TEST_IMPORT_LOG`` names (when set):
the tests read it to prove the harness never imports a plugin nobody asked for."""

import os

if os.environ.get("TOKENWORTH_TEST_IMPORT_LOG"):
    with open(os.environ["TOKENWORTH_TEST_IMPORT_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{__name__}\n")
