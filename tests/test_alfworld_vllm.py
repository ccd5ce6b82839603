"""ALFWorld through the real vLLM engine (CPU build, SmolLM2-135M-Instruct) and the real TextWorld engine.

Runs where tests/test_vllm_engine.py runs (``make test``: ``.venv-vllm/bin/python -m pytest -m real_vllm``),
with ALFWorld's engine venv from ``make alfworld-setup``. It plays the first manifest game (a
look_at_obj_in_light game) with J_max bounded to 2 environment steps: a 135M model rarely writes an admissible
command, so nearly every step is an action call plus a repair call (each capped at 128 tokens), and the
conversation grows by ~800 characters a step; the context is set to 4096 tokens to hold the repair turns. Two
steps are the fewest with a step after a step (a second action whose prompt holds the first's repair turns);
each further step is the costliest yet, its prompt the longest (the engine's decoding is the test's time).
What it proves: prompt -> vLLM -> parse -> repair call -> TextWorld step -> judge, with the engine's own token
counts, on both a plain method and TokenWorth. What it cannot: a model that plays well.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_vllm_engine import CPU_FLAGS, MODEL, REASON, REQUIRED, cli_env

REPO = Path(__file__).resolve().parents[1]
J_MAX = 2  # environment steps (the docstring)


def _engine_missing() -> str | None:
    from tokenworth_agent.benchmarks.alfworld.engine_venv import EngineVenvError, open_venv

    try:
        open_venv()
    except EngineVenvError as exc:
        return str(exc)
    return None


ENGINE = _engine_missing()
if ENGINE and REQUIRED:
    pytest.fail(f"the ALFWorld real-engine test must run here, but {ENGINE}", pytrace=False)
pytestmark = [pytest.mark.real_vllm, pytest.mark.slow(reason="SmolLM2 plays a whole ALFWorld game through the real vLLM engine"), pytest.mark.skipif(REASON is not None, reason=str(REASON)),
              pytest.mark.skipif(ENGINE is not None, reason=str(ENGINE))]


def test_smollm2_plays_an_alfworld_game_through_prompt_parse_repair_and_judge(tmp_path: Path, data_dir: str) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-c", "from tokenworth_agent.cli import app; app()", "run", "--env", "alfworld",
               "--backbone", "vllm", "--model", str(MODEL), "--methods", "standard,tokenworth", "--limit", "1",
               "--grid", f"j_max={J_MAX}", "--max-model-len", "4096", *CPU_FLAGS, "--out", str(out), "--no-progress"]
    done = subprocess.run(command, cwd=REPO, env={**cli_env(in_process_engine=True), "TOKENWORTH_DATA_DIR": data_dir},
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    assert len((out / "alfworld_manifest.jsonl").read_text().splitlines()) == 574
    streams = [p for p in out.iterdir() if (p / "records.jsonl").is_file()]
    assert len(streams) == 2
    for stream in streams:
        (record,) = [json.loads(line) for line in (stream / "records.jsonl").read_text().splitlines()]
        judge = record["judge"]
        assert judge["steps"] <= J_MAX and record["status"] in ("completed", "round_limit")
        assert judge["won"] == bool(record["reward"])
        entries = record["trajectory"]
        assert entries and all(e["max_tokens"] == 128 and 0 < e["tokens"] <= 128 for e in entries)
        calls = [e["action"]["call"] for e in entries if e.get("action")]
        # one repair call at most per action, and every step was sent to TextWorld
        assert all(not (a == b == "repair") for a, b in zip(calls, calls[1:]))
        assert sum(1 for e in entries if (e.get("action") or {}).get("step")) == judge["steps"]
        for e in entries:
            if (e.get("action") or {}).get("call") == "action" and not e["action"]["admissible"]:
                assert "The commands you can use now are:" in e["observation"]
        assert record["output_tokens"] == sum(e["tokens"] for e in entries) + record["auxiliary_tokens"]
