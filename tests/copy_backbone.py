"""A test backbone that copies the injected memory's actions verbatim, one per round.

Not a product backbone: it checks that memories are written the way a model must write its
replies. It reads the injected block out of the first user turn (after the block heading) and
answers round r with the memory's r-th action, exactly as it appears there:

* compact memories: the action snippets (``Act: bash`` + the fenced script, ``Act: finish``;
  ``Action: Operation`` + the ```` ```sql ```` block, ``Action: Answer`` + ``Final Answer: …``;
  ``Action: tool(args)``, ``Final Answer: #k``);
* transcript memories: each ``assistant:`` reply, whole.

With no memory, or after the memory's last action, it replies with nothing usable (the
environment rejects it). Tokens are whitespace words; a reply longer than ``max_tokens``
words is cut there, as a capped model's would be.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from tokenworth_agent.backbones.base import Generation
from tokenworth_agent.core.budget import BLOCK_HEADER
from tokenworth_agent.sim.facts import Facts

_ACTIONS = {
    "os": re.compile(r"Act: bash\n```bash\n.*?\n```|Act: finish", re.S),
    "db": re.compile(r"Action: Operation\n```sql\n.*?\n```|Action: Answer\nFinal Answer: [^\n]*", re.S),
    "kg": re.compile(r"Action: [^\n]*|Final Answer: [^\n]*"),
}
_TURN = re.compile(r"(?:^|\n)(assistant|user): ")
NOTHING = "(no memory to copy)"


def injected_block(conversation: Sequence[Mapping[str, str]]) -> str:
    first = conversation[1]["content"]
    at = first.find(BLOCK_HEADER)
    return "" if at == -1 else first[at + len(BLOCK_HEADER):]


def memory_actions(block: str, env: str) -> list[str]:
    """The replies a verbatim copier gives, in order."""
    if "\nassistant: " in block:  # a transcript: the raw replies
        pieces = _TURN.split(block)
        return [text.rstrip("\n") for role, text in zip(pieces[1::2], pieces[2::2]) if role == "assistant"]
    return [match.group(0) for match in _ACTIONS[env].finditer(block)]


class CopyingBackbone:
    name = "copy"
    reads_facts = True  # it needs the task's env and the round (tokenworth_agent.sim.facts)

    def __init__(self) -> None:
        self.replies: list[str] = []

    def generate(self, conversations: Sequence[Any], max_tokens: Sequence[int], stop: Sequence[str] | None = None,
                 *, facts: Sequence[Facts]) -> list[Generation]:
        out = []
        for conversation, cap, item in zip(conversations, max_tokens, facts):
            actions = memory_actions(injected_block(conversation), item.task.env)
            text = actions[item.round] if item.round is not None and item.round < len(actions) else NOTHING
            words = list(re.finditer(r"\S+", text))
            if len(words) > cap:  # cut like a capped model: the first `cap` words
                text, tokens, reason = text[: words[cap - 1].end()], cap, "length"
            else:
                tokens, reason = len(words), "stop"
            self.replies.append(text)
            out.append(Generation(text, tokens, reason))
        return out
