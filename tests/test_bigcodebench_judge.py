"""The BigCodeBench judge: the official evaluator in the sandbox passes reference solutions and fails wrong
ones; a broken evaluator is an infrastructure error, never a failed task; verdicts are reused soundly."""

from __future__ import annotations

import concurrent.futures
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine  # the BigCodeBench judge's venv (make test-quick leaves it out)

from tokenworth_agent.benchmarks.bigcodebench.eval_venv import VenvError, open_venv
from tokenworth_agent.envs.base import InfrastructureError
from tokenworth_agent.benchmarks.bigcodebench.judge import CANARY, CANARY_RIGHT, RUNNER, BigCodeBenchJudge, JudgeError
from tokenworth_agent.benchmarks.bigcodebench.sanitiser import Sanitiser
from tokenworth_agent.benchmarks.bigcodebench.verdicts import VerdictCache
from tokenworth_agent.benchmarks.bigcodebench.replies import mutant, solution_reply
from tokenworth_agent.benchmarks.bigcodebench.tasks import BCBTask
from tokenworth_agent.tasks import load_tasks
from tests.bigcodebench_fixtures import CI_IDS, ci_subset, eval_venv, small_judge


@pytest.fixture(scope="module")
def tasks(data_dir) -> list[BCBTask]:
    return load_tasks("bigcodebench", data_dir)


@pytest.fixture(scope="module")
def venv():
    return eval_venv()


def gold(task: BCBTask) -> str:
    return solution_reply(task.code_prompt + task.canonical_solution)


def test_the_ci_subset_is_the_documented_rule(tasks):
    assert [t.number for t in ci_subset(tasks)] == list(CI_IDS)
    assert not any(t.hard for t in ci_subset(tasks))


@pytest.mark.slow(reason="the official evaluator in the sandbox on every reference solution of the CI subset, and "
                         "on wrong ones (26 s on a quiet machine, 76 s in CI's loaded run)")
def test_reference_solutions_pass_and_wrong_ones_fail_on_the_ci_subset(tasks, venv):
    judge = small_judge(venv, time_limit=60.0, slots=2)
    subset = ci_subset(tasks)
    # every reference solution; the simulator's wrong reply on every fifth task (the gold replay's --mutants
    # judges all 1,140), to keep `make test` short
    work = [(t, "gold", gold(t)) for t in subset] + [(t, "mutant", solution_reply(mutant(t))) for t in subset[::5]]
    first = subset[0]
    work += [(first, "stub", solution_reply(first.code_prompt + "    return None")),
             (first, "no code", "I am not able to write this function, sorry."),
             (first, "other task", gold(subset[5]))]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(lambda item: (item[0], item[1], judge.judge(item[0], item[2])), work))
    for task, kind, verdict in verdicts:
        assert verdict.passed == (kind == "gold"), (task.task_id, kind, verdict.status, verdict.reason,
                                                    list(verdict.details.items())[:2])
        assert verdict.reason == "" and not verdict.cached
        assert verdict.defines_entry_point == (kind != "no code")  # the raw reply reaches the judge either way
    assert all(v.memory_peak_bytes for _, _, v in verdicts)


def test_verdicts_are_reused_by_reply_and_by_sanitised_solution(tasks, venv, tmp_path):
    task = ci_subset(tasks)[1]
    cache = VerdictCache(tmp_path / "verdicts.jsonl")
    judge = BigCodeBenchJudge(venv, small_judge(venv, time_limit=60.0).settings, cache=cache)  # room for a loaded host
    first = judge.judge(task, gold(task))
    started = time.monotonic()
    again = judge.judge(task, gold(task))
    assert time.monotonic() - started < 0.5 and again.cached and again.status == first.status == "pass"
    prose = judge.judge(task, "Thought: the key step is counting.\n" + gold(task))  # same solution, other text
    assert prose.cached and prose.passed and cache.counts == {"reply": 1, "solution": 1, "tested": 1}
    wrong = judge.judge(task, solution_reply(mutant(task)))
    assert not wrong.cached and not wrong.passed  # another solution is tested
    other = judge.judge(ci_subset(tasks)[2], gold(task))  # the same text for another task is another question
    assert not other.cached
    reloaded = VerdictCache(tmp_path / "verdicts.jsonl")
    assert len(reloaded) == len(cache)
    with (tmp_path / "verdicts.jsonl").open("a") as handle:
        handle.write('{"kind": "reply", "key": "torn')  # a kill mid-line
    assert len(VerdictCache(tmp_path / "verdicts.jsonl")) == len(cache)


# ------------------------------------------------------------------------- the host's sanitiser
REPLIES = [  # for the canary task: what models write around their code
    CANARY_RIGHT,
    "Thought: add them up.\n" + CANARY_RIGHT + "\nThis sums the values.",
    "```python\nimport math\ndef helper(v):\n    return v\ndef task_func(values):\n    return sum(helper(v) for v in values)\n"
    "if __name__ == '__main__':\n    print(task_func([1]))\n```",
    "First try:\n```python\ndef task_func(values):\n    return 0\n```\nBetter:\n```python\ndef task_func(values):\n"
    "    total = 0\n    for v in values:\n        total += v\n    return total\n```",
    "def task_func(values):\n    return sum(values)",  # no fence
    "I cannot write this.",  # no code
    "```python\ndef task_func(values:\n    return sum(values\n```",  # does not parse
]


def test_the_host_sanitiser_finds_the_solution_the_sandbox_tests(venv):
    judge = small_judge(venv)
    for reply in REPLIES:
        sandboxed = judge._run(CANARY, reply)  # the runner's own answer, in a sandbox
        hosted = judge.sanitiser.sanitise(reply, CANARY["entry_point"])
        assert hosted is not None, reply
        assert (hosted.solution, hosted.defines_entry_point) == (sandboxed.solution, sandboxed.defines_entry_point)


def test_a_known_solution_in_new_prose_is_found_without_a_sandbox(tasks, venv, tmp_path, monkeypatch):
    task = ci_subset(tasks)[1]
    judge = BigCodeBenchJudge(venv, small_judge(venv, time_limit=60.0).settings,
                              cache=VerdictCache(tmp_path / "verdicts.jsonl"))
    first = judge.judge(task, gold(task))
    assert not first.cached and first.passed
    import tokenworth_agent.benchmarks.bigcodebench.judge as judge_module

    def no_sandbox(*args, **kwargs):
        raise AssertionError("a known solution started a sandbox")

    monkeypatch.setattr(judge_module, "Sandbox", no_sandbox)
    again = judge.judge(task, "Thought: reuse the pattern.\n" + gold(task))
    assert again.cached and again.as_dict() | {"cached": False} == first.as_dict()
    with pytest.raises(AssertionError, match="started a sandbox"):  # a new solution still goes to the sandbox
        judge.judge(task, solution_reply(mutant(task)))


@pytest.mark.parametrize("runner, timeout", [
    ("import time\ntime.sleep(60)\n", 2.0),  # never ready: late
    ("raise SystemExit(1)\n", 20.0),  # dies at start
])
def test_a_sanitiser_that_cannot_answer_leaves_the_judging_to_the_sandbox(tasks, venv, tmp_path, runner, timeout):
    task = ci_subset(tasks)[1]
    judge = BigCodeBenchJudge(venv, small_judge(venv, time_limit=60.0).settings,
                              cache=VerdictCache(tmp_path / "verdicts.jsonl"))
    judge.judge(task, gold(task))
    judge.sanitiser = Sanitiser(venv, runner, timeout=timeout)
    started = time.monotonic()
    assert judge.sanitiser.sanitise(CANARY_RIGHT, "task_func") is None
    assert time.monotonic() - started < timeout + 5 and judge.sanitiser.failures == 1
    verdict = judge.judge(task, "Thought: again.\n" + gold(task))
    assert verdict.cached and verdict.passed  # found by the sandboxed runner instead
    assert judge.sanitiser.failures == 2
    judge.sanitiser.close()


def test_a_sanitiser_that_died_is_started_again(venv):
    sanitiser = Sanitiser(venv, RUNNER)
    assert sanitiser.sanitise(CANARY_RIGHT, "task_func").defines_entry_point
    assert sanitiser._proc is not None
    sanitiser._proc.kill()
    sanitiser._proc.wait()
    again = sanitiser.sanitise(CANARY_RIGHT, "task_func")
    assert again is not None and again.solution.startswith("def task_func")
    sanitiser.close()
    assert sanitiser._proc is None


# ------------------------------------------------------------------------- a broken evaluator stops the run
def fake_venv(root: Path, evaluator: str | None) -> Path:
    """A venv on this interpreter whose ``bigcodebench`` is ``evaluator`` (None: listed but not importable)."""
    site = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "bigcodebench-0.2.5.dist-info").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(Path(sys.base_prefix) / "bin" / "python3")
    (root / "pyvenv.cfg").write_text(f"home = {Path(sys.base_prefix) / 'bin'}\ninclude-system-site-packages = false\n")
    if evaluator is not None:
        package = site / "bigcodebench"
        (package / "eval").mkdir(parents=True)
        (package / "__init__.py").write_text("__version__ = 'fake'\n")
        (package / "sanitize.py").write_text("def sanitize(code, entrypoint=None):\n"
                                             "    return code.split('```python')[-1].split('```')[0]\n")
        (package / "eval" / "__init__.py").write_text("TIMEOUT_LIMIT = 240.0\n" + evaluator)
    return root


@pytest.mark.parametrize("evaluator, message", [
    (None, "failed before judging: ModuleNotFoundError"),
    ("def untrusted_check(*args):\n    return 'pass', {}\n", "passes a wrong solution"),
    ("def untrusted_check(*args):\n    return 'fail', {'ALL': 'broken'}\n", "fails its canary task"),
    ("import os\ndef untrusted_check(*args):\n    os._exit(1)\n", "fails its canary task .*evaluator-died"),
])
def test_a_broken_evaluator_is_an_infrastructure_error_not_a_failed_task(tasks, tmp_path, evaluator, message):
    eval_venv()  # the sandbox must be available
    judge = small_judge(open_venv(fake_venv(tmp_path / "venv", evaluator)))
    with pytest.raises(JudgeError, match=message) as raised:
        judge.judge(ci_subset(tasks)[0], gold(ci_subset(tasks)[0]))
    assert isinstance(raised.value, InfrastructureError)


def test_a_missing_or_incomplete_venv_says_how_to_build_one(tmp_path, monkeypatch):
    monkeypatch.delenv("TOKENWORTH_BCB_VENV", raising=False)
    with pytest.raises(VenvError, match="does not exist or is incomplete.*make bcb-setup"):
        open_venv(tmp_path / "nothing")
    root = fake_venv(tmp_path / "venv", None)
    (root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" /
     "bigcodebench-0.2.5.dist-info").rmdir()
    with pytest.raises(VenvError, match="lacks the evaluator"):
        open_venv(root)
    monkeypatch.setenv("TOKENWORTH_BCB_VENV", str(root))
    with pytest.raises(VenvError, match=str(root)):
        open_venv()  # the variable names the venv
