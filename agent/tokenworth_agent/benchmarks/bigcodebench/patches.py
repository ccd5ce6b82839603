"""BigCodeBench v0.1.4, rebuilt from the first release by the edits upstream made.

**Provenance.** The data folder holds the first Hugging Face release, ``v0.1.0_hf``
(``bigcode-project/bigcodebench-annotation``, ``hf_data/BigCodeBench.jsonl.gz``, sha256
``58142744…a7ef7a``; tag ``v0.1.0_hf``, commit d8a1b7b). The paper's App. C uses ``v0.1.4``.
Upstream made each later release with one script in ``bigcode-project/bigcodebench`` ``tools/``
(read at commit 47eff25, 2025-09-02): ``load_dataset(...)[previous].map(map_ds)`` where
``map_ds`` does literal ``str.replace`` edits on a few tasks, for the full and the Hard split
alike:

==========  ==================  =====================  ===================================================
release     script              tasks                  what changed
==========  ==================  =====================  ===================================================
v0.1.1      tools/fix_v019.py   178, 760, 1006         1006: a test that downloads a zip replaced by a
                                                       mocked one; 760: the prompts' import matches the
                                                       solution; 178: a stray import removed everywhere
v0.1.2      tools/fix_v020.py   16, 37, 241, 267       16: a message without its full stop (solution and
                                                       test); 37: ``import pandas as pd`` the solution
                                                       needs; 241, 267: the plot title the tests check
v0.1.3      tools/fix_v022.py   1005                   a download URL that had gone away
v0.1.4      tools/fix_v023.py   211, 215               mocked responses get ``status_code = 200``; a typo
==========  ==================  =====================  ===================================================

:data:`EDITS` restates those edits as data, in upstream's order and field scopes ("every
field", or upstream's "every field whose name holds ``prompt``": ``complete_prompt``,
``instruct_prompt``, ``code_prompt``). :func:`to_release` applies them and refuses a record set
on which an edit matches nothing: a different base file is caught, never half-patched.
Nothing of the dataset is restated but the replaced snippets.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

EVERY_FIELD = ("task_id", "complete_prompt", "instruct_prompt", "canonical_solution", "code_prompt", "test",
               "entry_point", "doc_struct", "libs")
PROMPTS = ("complete_prompt", "instruct_prompt", "code_prompt")  # upstream: every field whose name holds "prompt"
RELEASES = ("v0.1.0_hf", "v0.1.1", "v0.1.2", "v0.1.3", "v0.1.4")
BASE_RELEASE = RELEASES[0]
PAPER_RELEASE = "v0.1.4"


class ReleaseError(ValueError):
    """The records are not the release the edits start from (an edit matched nothing)."""


@dataclasses.dataclass(frozen=True)
class Edit:
    """One ``str.replace`` (or, with ``prepend``, one prefix) upstream applied to some fields of one task."""

    release: str  # the release it made
    task: int  # BigCodeBench/<task>
    fields: tuple[str, ...]
    old: str
    new: str
    prepend: bool = False  # put ``new`` in front of the field instead of replacing ``old``


_ZIP_TEST_OLD = '''\
    def test_valid_zip_url(self):
        """Test a valid ZIP URL."""
        url = "https://getsamplefiles.com/download/zip/sample-1.zip"
        result = task_func(url)
        self.assertTrue(result.startswith("mnt/data/downloads/"))
        self.assertTrue(result.endswith("sample-1"))
        shutil.rmtree("mnt/data/downloads")
'''
_ZIP_TEST_NEW = '''\
    @patch("requests.get")
    def test_non_zip_content(self, mock_get):
        """Test a valid ZIP URL."""
        mock_get.return_value.status_code = 200
        mock_get.return_value.headers = {"Content-Type": "application/zip"}
        mock_get.return_value.content = b"1"
        url = "https://valid-url.com/sample.zip"
        result = task_func(url)
'''

EDITS: tuple[Edit, ...] = (
    Edit("v0.1.1", 1006, ("test",), _ZIP_TEST_OLD, _ZIP_TEST_NEW),
    Edit("v0.1.1", 760, PROMPTS, "from datetime import datetime", "import datetime"),
    Edit("v0.1.1", 178, EVERY_FIELD, "from urllib import request\n", ""),
    Edit("v0.1.1", 178, EVERY_FIELD, "    - urllib.request\n", ""),
    Edit("v0.1.2", 16, EVERY_FIELD, "No logs found to backup.", "No logs found to backup"),
    Edit("v0.1.2", 37, PROMPTS, "", "import pandas as pd\n", prepend=True),
    Edit("v0.1.2", 37, PROMPTS, "Requirements:\n    - sklearn.ensemble\n",
         "Requirements:\n    - pandas\n    - sklearn.ensemble\n"),
    Edit("v0.1.2", 241, PROMPTS, "The function will plot the original and normalized arrays using matplotlib.",
         "The function will plot the original and normalized arrays with a title of 'Original vs. Normalized Data'."),
    Edit("v0.1.2", 267, PROMPTS, "Plots and returns the FFT of the signal.",
         "Plots and returns the FFT of the signal with a title of 'FFT of the signal'."),
    Edit("v0.1.3", 1005, EVERY_FIELD, "https://getsamplefiles.com/download/zip/sample-2.zip",
         "https://getsamplefiles.com/download/zip/sample-5.zip"),
    Edit("v0.1.3", 1005, EVERY_FIELD, "sample_2", "sample_5"),
    Edit("v0.1.3", 1005, EVERY_FIELD, "Sample 2", "Sample 5"),
    Edit("v0.1.4", 211, ("test",), "\n        mock_response = MagicMock()\n        mock_response.content = MOCK_CONTENT\n",
         "\n        mock_response = MagicMock()\n        mock_response.content = MOCK_CONTENT\n"
         "        mock_response.status_code = 200\n"),
    Edit("v0.1.4", 215, ("test",), "\n        mock_response = Mock()\n",
         "\n        mock_response = Mock()\n        mock_response.status_code = 200\n"),
    Edit("v0.1.4", 215, ("test",), "\n        mock_response.text =", "\n        MOCK_TEXT ="),
    Edit("v0.1.4", 215, ("test",), "\n        mock_get.return_value = mock_response\n",
         "\n        mock_response.text = MOCK_TEXT\n        mock_response.json = lambda: json.loads(MOCK_TEXT)\n"
         "        mock_get.return_value = mock_response\n"),
    Edit("v0.1.4", 215, ("complete_prompt", "instruct_prompt", "doc_struct"),
         "Thif function will raise", "This function will raise"),
)


def changed_tasks(release: str = PAPER_RELEASE) -> tuple[int, ...]:
    """The tasks that differ between the base release and ``release``, ascending."""
    return tuple(sorted({e.task for e in _edits_up_to(release)}))


def _edits_up_to(release: str) -> list[Edit]:
    if release not in RELEASES:
        raise ReleaseError(f"unknown BigCodeBench release {release!r}; known: {', '.join(RELEASES)}")
    wanted = set(RELEASES[1:RELEASES.index(release) + 1])
    return [e for e in EDITS if e.release in wanted]


def apply_edit(record: dict[str, str], edit: Edit) -> None:
    """Apply one edit to ``record`` in place, as upstream's ``map_ds`` did; ReleaseError if it matches nothing."""
    hits = 0
    for field in edit.fields:
        if edit.prepend:
            record[field] = edit.new + record[field]
            hits += 1
        else:
            hits += record[field].count(edit.old)
            record[field] = record[field].replace(edit.old, edit.new)
    if hits == 0:
        raise ReleaseError(f"the {edit.release} edit of BigCodeBench/{edit.task} ({edit.old[:50]!r}) matches nothing: "
                           f"the data is not BigCodeBench {BASE_RELEASE}")


def to_release(records: Iterable[Mapping[str, str]], release: str = PAPER_RELEASE) -> list[dict[str, str]]:
    """Copies of ``records`` (the base release, any order) as ``release`` has them, in the same order."""
    out = [dict(r) for r in records]
    by_id = {r["task_id"]: r for r in out}
    for edit in _edits_up_to(release):
        record = by_id.get(f"BigCodeBench/{edit.task}")
        if record is None:
            raise ReleaseError(f"BigCodeBench/{edit.task}, which {edit.release} edits, is missing from the data")
        apply_edit(record, edit)
    return out


__all__ = ["Edit", "EDITS", "RELEASES", "BASE_RELEASE", "PAPER_RELEASE", "ReleaseError", "changed_tasks",
           "apply_edit", "to_release"]
