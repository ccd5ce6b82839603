"""The OS environment: action parsing, the task lifecycle in a real sandbox, judging,
and a sampled replay of the dataset's reference solutions."""

from __future__ import annotations

import concurrent.futures
import subprocess
import time

import pytest

from tokenworth_agent.benchmarks.os_env.tasks import CommandItem, OSTask
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.envs.base import conversation
from tokenworth_agent.benchmarks.os_env.env import (
    INSTRUCTIONS,
    OSEnvironment,
    TaskInitError,
    format_observation,
    parse_action,
)
from tokenworth_agent.sandbox import CommandResult, sandbox_unavailable_reason
from tests.sandbox_fakes import ManualClock

needs_sandbox = pytest.mark.skipif(
    sandbox_unavailable_reason() is not None, reason=f"OS sandbox unavailable: {sandbox_unavailable_reason()}"
)


def make_task(evaluation: str, init: str | None = None, truth: str | None = None, index: int = 0) -> OSTask:
    return OSTask(
        sample_index=index,
        instruction="Do the thing.",
        init=CommandItem("bash", init) if init is not None else None,
        evaluation=CommandItem("bash", evaluation),
        ground_truth=CommandItem("bash", truth) if truth is not None else None,
        skill_list=("echo",),
        entry_hash=0,
    )


def bash(script: str) -> str:
    return f"Let me run it.\nAct: bash\n\n```bash\n{script}\n```"


# --------------------------------------------------------------------------- parsing


def test_parse_joins_every_bash_block_with_a_blank_line():
    reply = "Think.\nAct: bash\n\n```bash\necho one\n```\ntext\n```bash\necho two\n```\n```python\nprint(3)\n```"
    action = parse_action(reply)
    assert action.kind == "bash"
    assert action.script == "echo one\n\necho two"


def test_parse_finish_and_case_insensitive_prefix():
    assert parse_action("done\nAct: finish").kind == "finish"
    assert parse_action("Act: FINISH now").kind == "finish"
    assert parse_action("Act:bash\n```bash\nls\n```").script == "ls"


def test_parse_first_act_line_decides():
    assert parse_action("Act: finish\nAct: bash\n```bash\nls\n```").kind == "finish"


def test_parse_bash_without_block_runs_empty_script():
    action = parse_action("Act: bash\nls -l")
    assert action.kind == "bash" and action.script == ""


@pytest.mark.parametrize("reply", ["I will list files.\n```bash\nls\n```", "Act: python\n```bash\nls\n```", ""])
def test_parse_invalid_replies(reply):
    action = parse_action(reply)
    assert action.kind == "invalid" and action.reason


def test_observation_wording():
    assert format_observation(CommandResult(0, "hi\n", False), 20) == "The output of the OS:\n\nhi\n"
    assert format_observation(CommandResult(1, "", False), 20) == "The output of the OS is empty."
    timed_out = format_observation(CommandResult(None, "partial", True), 20)
    assert timed_out == "The command is marked as timeout since it did not finish within 20 seconds."


def test_instructions_and_conversation_shape():
    env = OSEnvironment()
    task = make_task("true")
    turns = conversation(env, task)
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    assert turns[1]["content"] == INSTRUCTIONS and "Act: bash" in INSTRUCTIONS and "Act: finish" in INSTRUCTIONS
    assert turns[3]["content"] == "Do the thing."


def test_constructor_rejects_bad_options():
    with pytest.raises(ValueError, match="max_rounds"):
        OSEnvironment(max_rounds=0)
    with pytest.raises(ValueError, match="command_timeout"):
        OSEnvironment(command_timeout=0)


def test_step_before_reset_is_an_error():
    with pytest.raises(RuntimeError, match="reset"):
        OSEnvironment().step("Act: finish")


# --------------------------------------------------------------------------- lifecycle


@pytest.fixture
def env():
    environment = OSEnvironment(command_timeout=10)
    yield environment
    environment.close()


@needs_sandbox
def test_background_processes_persist_but_cwd_and_env_do_not(env):
    env.reset(make_task("true"))
    first = env.step(bash("cd /tmp; export FOO=bar; sleep 300 >/dev/null 2>&1 & echo started"))
    assert first.observation == "The output of the OS:\n\nstarted\n" and not first.done
    # the background job may still be a forked shell that has not exec'd `sleep` yet on a loaded machine:
    # look a few times (it never appears if the sandbox killed it between the steps)
    second = env.step(bash('for i in 1 2 3 4 5 6 7 8 9 10; do pgrep -x sleep >/dev/null && { echo alive; break; }; '
                           'sleep 0.2; done; pwd; echo "FOO=${FOO:-unset}"'))
    assert second.observation == "The output of the OS:\n\nalive\n/\nFOO=unset\n"


@needs_sandbox
def test_output_is_stdout_and_stderr_interleaved_and_untruncated(env):
    env.reset(make_task("true"))
    result = env.step(bash("echo out; echo err >&2; head -c 300000 /dev/zero | tr '\\0' x; echo"))
    body = result.observation.removeprefix("The output of the OS:\n\n")
    assert body.startswith("out\nerr\n") and body.count("x") == 300000
    assert env.step(bash("true")).observation == "The output of the OS is empty."


@needs_sandbox
def test_timeout_reports_and_later_commands_still_run():
    clock = ManualClock()
    environment = OSEnvironment(command_timeout=1.5, clock=clock)
    try:
        environment.reset(make_task("true"))
        # The sandbox reads its clock to set the deadline, once more in its wait loop,
        # and then finds 100 s gone: the command times out on the injected clock.
        clock.jump_after(2, 100.0)
        result = environment.step(bash("echo begin; sleep 30"))
        assert result.observation == "The command is marked as timeout since it did not finish within 1.5 seconds."
        assert not result.done
        # the original leaves a timed-out command running; the sandbox goes on working
        follow = environment.step(bash("pgrep -f 'sleep 30' >/dev/null && echo still-running"))
        assert follow.observation == "The output of the OS:\n\nstill-running\n"
    finally:
        environment.close()


@needs_sandbox
def test_command_ends_when_its_shell_exits_even_if_a_job_holds_its_output(env):
    env.reset(make_task("grep -q tick /root/ticks"))
    result = env.step(bash("(sleep 0.5; echo late) & (while true; do sleep 0.2; echo tick >> /root/ticks; echo tick; done) & echo early"))
    # no "late" and no "tick": the step returned when the shell exited, before its jobs wrote
    assert result.observation == "The output of the OS:\n\nearly\n"
    time.sleep(0.6)
    # the loop is between two sleeps now and then (longer on a loaded host): look a few times
    follow = env.step(bash("for i in 1 2 3 4 5 6 7 8 9 10; do pgrep -c sleep >/dev/null && echo loop-alive && break; "
                           "sleep 0.05; done"))
    assert follow.observation == "The output of the OS:\n\nloop-alive\n"  # the job outlived its pipe reader
    assert env.judge().reward == 1


@needs_sandbox
def test_useradd_and_chown_work_inside_and_leave_no_trace(env):
    passwd_before = open("/etc/passwd").read()
    env.reset(make_task("true"))
    result = env.step(bash(
        "useradd -m tw_probe_user && groupadd tw_probe_group && chown tw_probe_user:tw_probe_group /home/tw_probe_user"
        " && chage -M 30 tw_probe_user && stat -c '%U:%G' /home/tw_probe_user && id -u tw_probe_user"
    ))
    assert "tw_probe_user:tw_probe_group" in result.observation
    env.close()
    assert open("/etc/passwd").read() == passwd_before
    assert subprocess.run(["id", "tw_probe_user"], capture_output=True).returncode != 0


@needs_sandbox
def test_judge_passes_and_fails_on_the_evaluation_exit_code(env):
    task = make_task("test -f /srv/done", init="mkdir -p /srv")
    env.reset(task)
    assert env.step(bash("touch /srv/done")).done is False
    assert env.step("Act: finish").status == "completed"
    verdict = env.judge()
    assert verdict.reward == 1 and verdict.details["evaluation_exit_code"] == 0
    env.reset(task)  # a fresh sandbox: the file is gone
    env.step("Act: finish")
    verdict = env.judge()
    assert verdict.reward == 0 and verdict.details["evaluation_exit_code"] == 1


@needs_sandbox
def test_judge_runs_after_an_invalid_action(env):
    env.reset(make_task("grep -q ready /root/state", init="echo ready > /root/state"))
    result = env.step("I am not sure what to do.")
    assert result.done and result.status == "invalid_action"
    assert env.judge().reward == 1


@needs_sandbox
def test_round_limit_runs_the_last_action_then_ends():
    environment = OSEnvironment(max_rounds=2, command_timeout=10)
    try:
        environment.reset(make_task("test $(cat /root/count) -eq 2"))
        assert not environment.step(bash("echo 1 > /root/count")).done
        last = environment.step(bash("echo 2 > /root/count"))
        assert last.done and last.status == "round_limit"
        with pytest.raises(RuntimeError, match="already ended"):
            environment.step("Act: finish")
        assert environment.judge().reward == 1
    finally:
        environment.close()


@needs_sandbox
def test_failing_init_script_refuses_the_task(env):
    with pytest.raises(TaskInitError, match="exit code 3"):
        env.reset(make_task("true", init="echo broken; exit 3"))
    assert env.judge().reward == 0


# --------------------------------------------------------------------------- fidelity


@needs_sandbox
def test_sampled_reference_solutions_pass(data_dir):
    from tokenworth_bench.os_fidelity import replay

    tasks = load_tasks("os", data_dir)
    sample = tasks[::25]  # 20 tasks spread over the stream
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        records = list(pool.map(replay, sample))
    failed = [r for r in records if not r["passed"]]
    assert not failed, failed
