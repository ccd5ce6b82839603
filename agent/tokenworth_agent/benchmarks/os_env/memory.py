"""OS memories (compact and abstract): the task, each script the agent ran as it ran, then ``Act: finish``.

The ``abstract`` format replaces instance-specific user and group names, home paths and PIDs by
placeholders (:func:`abstract_bash`). (Named ``os_env``, as the environment's module is, so it
never reads as the standard library's ``os``.)
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Sequence

from tokenworth_agent.memory.base import Step, Turn

_BASH_BLOCK = re.compile(r"```(?:bash|sh)?\s*\n?(.*?)```", re.S | re.I)
_OS_ACT = re.compile(r"Act:\s*(bash|finish)", re.I)


def _os_action(turn: Turn) -> tuple[str, str] | None:
    action = turn.action or {}
    script = action.get("script") or action.get("bash") or action.get("command")
    if script:
        return "bash", str(script).strip()
    if action.get("kind") == "finish":
        return "finish", ""
    match = _OS_ACT.search(turn.reply)
    if not match:
        return None
    if match.group(1).lower() == "finish":
        return "finish", ""
    blocks = [b.strip() for b in _BASH_BLOCK.findall(turn.reply[match.end() :]) if b.strip()]
    return ("bash", "\n".join(blocks)) if blocks else None

# ---------------------------------------------------------------- OS abstraction
_USER_COMMANDS = frozenset({"useradd", "adduser", "userdel", "deluser", "usermod", "chage", "chsh", "passwd", "su", "runuser"})
_GROUP_COMMANDS = frozenset({"groupadd", "addgroup", "groupdel", "groupmod"})
_GROUP_OPTIONS = frozenset({"-g", "-G", "-aG", "--gid", "--groups", "--ingroup"})
_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")
_COMMAND_SPLIT = re.compile(r"[;&|\n]+|\$\(|`")
_HOME = re.compile(r"/home/([A-Za-z_][\w.-]*)")
_PID_ARG = re.compile(r"\b(kill|wait|renice|disown|tail\s+--pid=?|ps\s+(?:-\w+\s+)*-p|pidstat\s+-p)(\s+(?:-\w+\s+)*)(\d{2,7})\b")
_PROC = re.compile(r"/proc/\d+")
_NOT_NAMES = frozenset({"root", "bash", "sh", "sudo", "echo", "true", "false", "nobody", "the", "a"})


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:  # unbalanced quotes: fall back to whitespace
        return command.split()


def _add_name(names: set[str], word: str) -> None:
    if _NAME.match(word):
        names.add(word)


def instance_names(scripts: Sequence[str]) -> tuple[set[str], set[str]]:
    """User and group names that the commands themselves create or operate on.

    Per simple command (split on ``; & | newline $( `)``): the last bare word of a user
    command (useradd, usermod, passwd, su, ...) is a user and the value of its group options
    (-g/-G/-aG) are groups; the last bare word of groupadd & co. is a group; ``chown u:g``
    and ``chgrp g`` name a user and groups; ``gpasswd -a u g`` both; ``/home/<name>`` a user.
    """
    users: set[str] = set()
    groups: set[str] = set()
    for script in scripts:
        users.update(m.group(1) for m in _HOME.finditer(script))
        for command in _COMMAND_SPLIT.split(script):
            words = [w for w in _words(command) if w != "sudo"]
            if not words:
                continue
            head, args = words[0], words[1:]
            bare = [a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] not in _GROUP_OPTIONS)]
            if head in _USER_COMMANDS and bare and _NAME.match(bare[-1]):
                users.add(bare[-1])
                for i, a in enumerate(args[:-1]):
                    if a in _GROUP_OPTIONS:
                        groups.update(g for g in args[i + 1].split(",") if _NAME.match(g))
            elif head in _GROUP_COMMANDS and bare and _NAME.match(bare[-1]):
                groups.add(bare[-1])
            elif head == "gpasswd" and len(bare) >= 2:
                _add_name(users, bare[0])
                _add_name(groups, bare[1])
            elif head == "chown" and bare:
                owner, _, group = bare[0].partition(":")
                _add_name(users, owner)
                _add_name(groups, group)
            elif head == "chgrp" and bare and _NAME.match(bare[0]):
                groups.add(bare[0])
    users -= _NOT_NAMES
    groups -= _NOT_NAMES
    return users, groups - users


def abstract_bash(text: str, users: set[str], groups: set[str]) -> str:
    """Replace instance-specific names, home paths and PIDs by placeholders."""
    text = _HOME.sub("/home/<user>", text)
    text = _PROC.sub("/proc/<pid>", text)
    text = _PID_ARG.sub(lambda m: f"{m.group(1)}{m.group(2)}<pid>", text)
    # Longest names first so "bob" never eats part of "bobby".
    for name in sorted(users, key=len, reverse=True):
        text = re.sub(rf"(?<![\w<./-]){re.escape(name)}(?![\w>-])", "<user>", text)
    for name in sorted(groups, key=len, reverse=True):
        text = re.sub(rf"(?<![\w<./-]){re.escape(name)}(?![\w>-])", "<group>", text)
    return text

# ---------------------------------------------------------------- construction
def _os_steps(turns: Sequence[Turn], abstract: bool) -> tuple[list[Step], Any]:
    scripts = [value for parsed in map(_os_action, turns) if parsed for kind, value in [parsed] if kind == "bash"]
    users, groups = instance_names(scripts) if abstract else (set(), set())

    def shown(text: str) -> str:
        return abstract_bash(text, users, groups) if abstract else text

    # Every script as the OS parser wants it, then the finishing action: the task was solved
    # after these scripts, so finishing is the right next reply even if the episode ran out.
    steps = [Step(f"Act: bash\n```bash\n{shown(script)}\n```", code=shown(script)) for script in scripts]
    return steps + [Step("Act: finish")], shown


def compact(question: str, turns: Sequence[Turn], *, abstract: bool = False) -> tuple[str, list[Step]]:
    """(the task line, the steps) of a compact OS memory; no steps when the agent ran no script (only the finish)."""
    steps, shown = _os_steps(turns, abstract)
    return f"Task: {shown(question.strip())}", steps if len(steps) > 1 else []
