"""BigCodeBench replies: the reference solution, or its mutant, in the official reply format.

The reply is what a chat model prefilled by ``bigcodebench generate`` (0.2.5) writes: its response
prefix, then the code in a markdown block. A success writes the task's ``code_prompt`` followed by
its reference body; a failure writes the **mutant**: the same code with every ``return <value>`` of
the entry point made ``return None`` (where it returns nothing, a ``raise ValueError`` opens it).
The mutant imports, computes and costs what the reference does (the same evaluator time and about
the same tokens) and answers wrong: it is rejected by the tests (docs/bigcodebench.md, "Wrong
solutions fail"), while another task's solution, the other candidate, passed one of 15 tasks in
the prototype's check because neighbouring tasks are near-duplicates.
"""

from __future__ import annotations

import ast

from tokenworth_agent.backbones.base import Conversation
from tokenworth_agent.sim.model import Episode, SimParams
from tokenworth_agent.benchmarks.bigcodebench.tasks import BCBTask

# bigcodebench 0.2.5 (generate.py): the assistant turn's prefill for chat models
RESPONSE_PREFIX = ("Below is a Python script with a self-contained function that solves the problem and passes "
                   "corresponding tests:")


class _ReturnsNone(ast.NodeTransformer):
    """``return <value>`` → ``return None`` in the entry point's own body (not in functions nested in it)."""

    def __init__(self, entry_point: str) -> None:
        self.entry_point = entry_point
        self.inside = False
        self.changed = 0

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if self.inside or node.name != self.entry_point:
            return node  # nested or other functions keep their returns
        self.inside = True
        self.generic_visit(node)
        self.inside = False
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        if node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None):
            return node
        self.changed += 1
        return ast.copy_location(ast.Return(value=ast.Constant(None)), node)


def mutant(task: BCBTask) -> str:
    """The reference code with the entry point's answers taken away (see the module docstring)."""
    source = task.code_prompt + task.canonical_solution
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return task.code_prompt + "    return None\n"
    transformer = _ReturnsNone(task.entry_point)
    tree = transformer.visit(tree)
    if not transformer.changed:
        entry = [node for node in tree.body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == task.entry_point]
        if not entry:  # nothing to take the answer from: the bare signature
            return task.code_prompt + "    return None\n"
        entry[0].body.insert(0, ast.parse("raise ValueError('unsupported input')").body[0])
    return ast.unparse(ast.fix_missing_locations(tree))


def solution_reply(code: str) -> str:
    return f"{RESPONSE_PREFIX}\n```python\n{code.strip()}\n```"


def reply(task: BCBTask, episode: Episode, round_index: int, conversation: Conversation, params: SimParams) -> str:
    code = task.code_prompt + task.canonical_solution if episode.success else mutant(task)
    return solution_reply(code)


__all__ = ["RESPONSE_PREFIX", "mutant", "solution_reply", "reply"]
