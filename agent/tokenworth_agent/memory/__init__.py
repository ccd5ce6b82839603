"""Memory construction per environment (App. B.4): what a successful task writes.

Every method uses the same construction, so they differ only in what they keep and
retrieve. Invariants (spec §5, §8):

* only a success writes a memory (:func:`writes_memory`): reward 1 from the environment's
  grader and, under the default ``memory_from="completed"`` (LAB's rule for its
  previous-sample memories), an episode that ended by its own answer/finish action; with
  ``memory_from="reward"`` the reward alone decides (a DB write task that passed on the table
  hash after the round limit also counts);
* a memory is built only from the agent's *own* trajectory — its replies, the actions the
  environment parsed from them and the observations it returned — plus the task's question.
  Reference SQL, gold rows, evaluation scripts and answer lists are never read here;
* a memory's text never exceeds the block room L_max leaves after the block headings, and it
  is cut between steps, never inside an action (:func:`fit`), so a single injected memory is
  never cut by the injection block.

Formats (``memory_format``, :mod:`tokenworth_agent.core.harness`):

* **compact** (default): every action exactly as the environment's parser wants it, so a
  model can copy it (``tests/copy_backbone.py`` replays memories verbatim;
  ``bench/tokenworth_bench/copy_replay.py`` measures it on every DB and OS task):

  * **DB** — the question, the valid SQL operations as ``Action: Operation`` + a ```` ```sql ````
    block (an operation whose observation is a SQL error is dropped), each observation cut to
    :data:`OBSERVATION_CHARS`, and ``Action: Answer`` / ``Final Answer: …``;
  * **OS** — the task, each script the agent ran as ``Act: bash`` + a ```` ```bash ```` block,
    as it ran (user names and paths included: a placeholder would not run), then
    ``Act: finish``. Observations are left out (instance-specific output);
  * **KG** — the tool calls that succeeded, ``Action: tool(args)``, each with its observation
    cut to :data:`OBSERVATION_CHARS`, and ``Final Answer: #k`` (failed calls made no variable,
    so leaving them out keeps the numbering);
  * **BigCodeBench** — the task, then the solution as the official sanitiser kept it, in a
    ```` ```python ```` block (the reply's prose left out).

* **abstract**: compact, but OS scripts and the task have instance-specific details
  abstracted by regex (OS: :func:`tokenworth_agent.benchmarks.os_env.memory.abstract_bash`): user and group names the task's own commands
  create or use → ``<user>``/``<group>``, ``/home/<name>`` → ``/home/<user>``, process ids
  → ``<pid>`` (the paper's "transferable Bash patterns"; DB and KG are as compact).
* **transcript**: as LAB's previous-sample utilisation shows a solved sample: the question,
  then every raw reply (``assistant: …``) and every observation the model was sent
  (``user: …``).

Layout: :mod:`tokenworth_agent.memory.base` (the records, fitting, the transcript format),
each benchmark's compact rendering in its folder (``memory.py`` of :mod:`tokenworth_agent.benchmarks`), and
:mod:`tokenworth_agent.memory.build`, which asks the task's benchmark for it.

When the text is over the limit, observations go first (compact), then the question is
shortened, then whole steps are cut from the end with a note saying how many.

The memory keeps the source task's ``skill_list`` (only the simulated backbone reads it, through
its request facts, :mod:`tokenworth_agent.sim.facts`), a ``key_text`` — the source question — that
similarity-based methods index, and an ``action_text``: the executable actions the text shows
(SQL, scripts, tool calls), which TokenWorth+'s learned ranker reads beside the question.
"""

from tokenworth_agent.memory.base import (CUT_NOTE, HEAD_KEEP, OBSERVATION_CHARS, Memory, Step, Turn, fit, memory_char_limit,
                               writes_memory)
from tokenworth_agent.memory.build import build_memory

__all__ = ["Memory", "Turn", "Step", "OBSERVATION_CHARS", "HEAD_KEEP", "CUT_NOTE", "fit", "memory_char_limit",
           "writes_memory", "build_memory"]
