"""TokenWorth inside your own agent loop, against any OpenAI-compatible server.

Nothing of the benchmark harness is used: the loop, the prompt, the grader and the HTTP client are
the user's (here the standard library's ``urllib``, so the example needs only ``tokenworth-jax``).
The controller's part is four calls per task::

    sel = ctl.select(question)        # which past success (if any) to show the model
    ctl.observe(reward)               # the grader's verdict, 0 or 1
    ctl.offer(memory, key_text=question)   # after a success: may this trajectory enter the bank?
    ctl.end_task()                    # after a failure (nothing to offer)

Run it against a server you have (vLLM, llama.cpp, an OpenAI-compatible gateway)::

    python examples/own_agent_loop.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-14B-Instruct

The task stream is generated (``make_tasks``): families of arithmetic puzzles whose hidden rule the
model can read off one solved example of the same family. A memory of another family misleads it,
so what the controller must learn is which memory is *worth* injecting, not which looks similar,
and when to inject none. That is why the example uses TokenWorth+ (``--method tokenworth+``, the
default): it learns to abstain. The paper's method (``--method tokenworth``) always injects one of
its recalled candidates, and on this stream, where early on most families have no memory of their
own yet, that does worse than no memory at all (tests/test_own_loop.py measures both).
``tests/test_own_loop.py`` runs this file against a loopback server that answers that way.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import urllib.request
from dataclasses import dataclass

import tokenworth_jax as tw

# Each family's name and hidden rule: the answer is n * a + b.
FAMILIES = ["ledger", "orbit", "harvest", "cipher", "tide", "lantern"]
RULES = [(2, 1), (3, 0), (5, 2), (7, 3), (4, 4), (6, 1)]


@dataclass(frozen=True)
class Task:
    family: int
    n: int

    @property
    def question(self) -> str:
        name = FAMILIES[self.family]
        return f"A {name} puzzle: what does the {name} rule give for {self.n}?"

    @property
    def answer(self) -> int:
        a, b = RULES[self.family]
        return self.n * a + b


def make_tasks(count: int, seed: int = 0) -> list[Task]:
    """A stream of ``count`` puzzles, families and numbers drawn with ``seed``."""
    rng = random.Random(seed)
    return [Task(rng.randrange(len(RULES)), rng.randrange(2, 60)) for _ in range(count)]


def chat(base_url: str, model: str, messages: list[dict[str, str]], max_tokens: int = 32,
         timeout: float = 60.0) -> str:
    """One chat completion from an OpenAI-compatible server; the reply's text."""
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{base_url.rstrip('/')}/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def prompt(task: Task, memory: str | None) -> list[dict[str, str]]:
    """The user's own prompt: the selected memory, when there is one, as one solved example."""
    system = "Answer with the number only."
    if memory is not None:
        system += f"\nA solved example from your memory:\n{memory}"
    return [{"role": "system", "content": system}, {"role": "user", "content": task.question}]


def grade(task: Task, reply: str) -> int:
    """The user's own grader: 1 when the reply's first number is the answer."""
    found = re.search(r"-?\d+", reply)
    return int(found is not None and int(found.group()) == task.answer)


def run(base_url: str, model: str, tasks: list[Task], *, method: str = "tokenworth+",
        use_memory: bool = True) -> dict[str, float]:
    """The agent loop; returns the success rate, how often a memory was injected and the bank's size."""
    ctl = tw.Controller(*tw.preset("db", method=method))  # the DB preset (Table A1); or your own Spec, HParams
    successes = injected = 0
    for task in tasks:
        sel = ctl.select(task.question) if use_memory else None
        memory = sel.memory_text if sel is not None else None
        reply = chat(base_url, model, prompt(task, memory))
        reward = grade(task, reply)
        successes += reward
        injected += memory is not None
        if not use_memory:
            continue
        ctl.observe(reward)
        if reward:  # only a success may enter the bank; the key is the question, so recall compares like with like
            ctl.offer(f"{task.question}\nAnswer: {reply.strip()}", key_text=task.question)
        else:
            ctl.end_task()
    return {"success_rate": successes / len(tasks), "injected": injected / len(tasks), "bank": len(ctl.bank())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="the server's OpenAI API root, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tasks", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--method", default="tokenworth+", choices=["tokenworth+", "tokenworth"])
    parser.add_argument("--no-memory", action="store_true", help="the same loop without the controller")
    args = parser.parse_args()
    result = run(args.base_url, args.model, make_tasks(args.tasks, args.seed), method=args.method,
                 use_memory=not args.no_memory)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
