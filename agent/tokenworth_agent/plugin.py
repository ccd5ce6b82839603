"""The harness's public plugin interface: every name a method, benchmark or backbone plugin needs, in one module.

A plugin imports from here and nowhere else in ``tokenworth_agent``::

    from tokenworth_agent.plugin import Benchmark, BenchmarkOption, Environment, StepResult, Judgement

The harness's own modules (``tokenworth_agent.benchmarks.base``, ``policies.base``, ``envs.base``, ...) are where
these names are defined today; they are internal and may move in any release. The built-in methods and
benchmarks import them directly; a plugin that does the same gets no promise.

**The compatibility promise.** ``tokenworth-agent`` follows semantic versioning for what :data:`__all__` names
(before 1.0, the second number plays the major's part: 0.3 may change what 0.2 promised, 0.2.5 may not):

* **A patch release** (0.2.0 -> 0.2.1) changes nothing a plugin can see here.
* **A minor release** (1.2 -> 1.3) may *add*: new names; new :class:`Benchmark` fields, constructor keywords
  and :class:`BenchmarkOption` fields, each with a default that keeps today's behaviour; new optional
  :class:`MemoryPolicy` hooks with a default implementation; new keyword arguments with defaults to what the
  harness calls (a plugin's callables are never called with new *positional* arguments). It may *deprecate* a
  name or a field: it then keeps working, with a ``DeprecationWarning`` naming its replacement, until the next
  major release.
* **A major release** (1.x -> 2.0) may remove what was deprecated and change a signature, a field's meaning or
  what the harness checks at load; the CHANGELOG lists each such change under "Plugin interface".

Within that promise, a plugin's own distribution should depend on ``tokenworth-agent>=X.Y,<X+1`` (before 1.0:
``>=0.Y,<0.Y+1``), the release it was written against to the next major.

What the harness guarantees a plugin at run time (docs/plugins.md): it is imported only when asked for
(``--env``, ``--methods``, ``--backbone``) or listed (``--help``, ``tokenworth plugins``); it is checked when loaded
(a ``Benchmark``'s fields, a method's class, name and parameters' defaults) and refused in one line naming its
distribution; it cannot take a built-in's name (the built-in is used, the plugin's entry refused); and whatever it
is, every other plugin and every built-in keeps working.
"""

from __future__ import annotations

from tokenworth_agent.backbones.base import Backbone, BackboneError, Conversation, Generation, Message, ServerUnreachable
from tokenworth_agent.benchmarks.base import Benchmark, BenchmarkError, BenchmarkOption, Options, TaskSource
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.harness import HarnessError, HarnessOptions
from tokenworth_agent.core.parameters import Parameter, at_least, within
from tokenworth_agent.core.plugins import PluginError
from tokenworth_agent.envs.base import Environment, InfrastructureError, Judgement, Status, StepResult
from tokenworth_agent.memory.base import Memory, Step, Turn
from tokenworth_agent.policies.auxiliary import AuxRequest, AuxSteps
from tokenworth_agent.policies.base import MemoryPolicy, MemoryStore, Outcome, StoreBackedPolicy, cosine_scores, embed
from tokenworth_agent.sim.model import Episode, SimParams
from tokenworth_agent.tasks.base import DataError, DataFolder, Task, benchmark_dir
from tokenworth_agent.tasks.download import Download

__all__ = [
    # a parameter: a benchmark's option, a method's hyperparameter
    "Parameter", "at_least", "within",
    # a benchmark: the value it registers, and what its parts are given and return
    "Benchmark", "BenchmarkOption", "BenchmarkError", "TaskSource", "Options", "Task", "DataFolder", "DataError",
    "benchmark_dir", "Download", "Environment", "StepResult", "Status", "Judgement", "InfrastructureError", "Turn",
    "Step", "Budget", "HarnessError", "Episode", "SimParams",
    # a memory method
    "MemoryPolicy", "StoreBackedPolicy", "MemoryStore", "Memory", "Outcome", "HarnessOptions", "AuxRequest",
    "AuxSteps", "embed", "cosine_scores",
    # a backbone
    "Backbone", "Generation", "Conversation", "Message", "BackboneError", "ServerUnreachable",
    # what the harness raises about a plugin
    "PluginError",
]
