"""What a failure of a run means to the person who started it, for every command line.

A failure the user can cause or fix (bad input, a busy or foreign folder, a damaged checkpoint, a
full or read-only disk, a backbone that cannot be reached, Ctrl-C) is one line saying what failed,
where, and what to do, with the exit code a shell script can test; anything else is a bug, and
its traceback is kept. ``tokenworth`` (``cli.expected_failures``) and ``tokenworth-bench agent``
print the same lines from here.
"""

from __future__ import annotations

import errno

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


def describe_os_error(exc: OSError) -> str:
    """One line for a filesystem failure: what, where, what to do."""
    where = exc.filename or "the run folder"
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        return (f"disk full while writing {where}; free some space and rerun the same command "
                "(the run resumes after its last complete task)")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"cannot write {where} ({exc.strerror}); pass an --out folder you can write to"
    return f"{exc.strerror or exc} ({where})"


def describe_failure(exc: BaseException) -> tuple[str, int] | None:
    """(the one line a user reads, the exit code) for a failure the user can cause or fix; None for a bug."""
    from tokenworth_agent.backbones.base import BackboneError, ServerUnreachable
    from tokenworth_agent.core.harness import HarnessError
    from tokenworth_agent.core.plugins import PluginError
    from tokenworth_agent.envs.base import InfrastructureError
    from tokenworth_agent.experiment.config import ConfigError
    from tokenworth_agent.experiment.plan import ExecutorLost, LaunchError
    from tokenworth_agent.results.record import RecordError
    from tokenworth_agent.results.report import ReportError
    from tokenworth_agent.storage.checkpoint import CheckpointError
    from tokenworth_agent.storage.runfolder import RunFolderError
    from tokenworth_agent.tasks import DataError

    if isinstance(exc, KeyboardInterrupt):
        return ("interrupted: the records and checkpoints hold every finished task; rerun the same command to "
                "resume", INTERRUPTED)
    if isinstance(exc, (ConfigError, LaunchError, RunFolderError, CheckpointError, DataError, ReportError,
                        RecordError, HarnessError, PluginError)):
        return str(exc), 2
    if isinstance(exc, (ServerUnreachable, ExecutorLost)):  # its message is whole: what, the cause, "rerun to resume"
        return str(exc), 1
    if isinstance(exc, InfrastructureError):  # the environment's machinery, never a task's failure
        return (f"{str(exc).rstrip('.')}; the run stopped before recording that task: fix it and rerun the same "
                "command to resume (finished tasks are kept)", 1)
    if isinstance(exc, BackboneError):
        return (f"backbone failed: {str(exc).rstrip('.')}; fix the backbone settings (--base-url, --model) and "
                "rerun the same command to resume (finished tasks are kept)", 1)
    if isinstance(exc, OSError):
        return describe_os_error(exc), 1
    return None
