"""A small rollout dataset in the documented trajectory record schema (trajectory/src/record.rs).

Used when no LLM is at hand: the export tests need episodes with known rewards, not real ones.
"""

from __future__ import annotations

import json
from pathlib import Path


def record(task: str, sample: int, reward: float, solved: bool, stop: str, with_tokens: bool = False) -> dict:
    messages = [
        {"role": "system", "content": "You write Python."},
        {"role": "user", "content": f"Solve {task}"},
        {"role": "assistant", "content": f"```python\nprint({sample})\n```"},
    ]
    call = {"latency_ms": 5, "attempts": 1}
    if with_tokens:
        call["tokens"] = {"prompt_token_ids": [1, 2], "completion_token_ids": [7, 8, 9], "logprobs": [-0.1, -0.2, -0.3]}
    return {
        "schema_version": 1,
        "run_id": "run",
        "episode_id": f"{task}#{sample}",
        "task_id": task,
        "group_id": f"run/{task}",
        "sample_index": sample,
        "seed": 1000 + sample,
        "env_id": "codegym/Code-v0",
        "mode": "code_block",
        "model": {"requested": "fake/model", "endpoint": "http://127.0.0.1:1"},
        "sampling": {"temperature": 1.0},
        "messages": messages,
        "turns": [{"index": 0, "model_call": call, "message_index": 2}],
        "total_reward": reward,
        "final_reward": reward,
        "solved": solved,
        "stop_reason": stop,
        "usage": {},
        "timings": {"started_at_ms": 0, "wall_ms": 10, "model_ms": 5, "env_ms": 5},
        "engine": {"name": "codegym-rollout", "version": "0.1.0"},
    }


RECORDS = [
    record("sum", 0, 1.0, True, "solved", with_tokens=True),
    record("sum", 1, 0.0, False, "max_turns"),
    record("sum", 2, 0.5, False, "env_done"),
    record("sum", 3, 1.0, True, "solved"),
    record("fib", 0, 1.0, True, "solved"),
    record("fib", 1, 1.0, True, "solved"),
]


def failure(task: str, sample: int, reward: float, stop: str, kind: str) -> dict:
    """An episode that ended in an infrastructure failure (`stop`: `error` or `cancelled`) of `kind`,
    after steps that earned `reward` (which is not the model's and must never be trained on)."""
    r = record(task, sample, reward, False, stop)
    r["error"] = {"kind": kind, "message": f"{kind} happened"}
    return r


def write_rollout(path: Path) -> Path:
    # A resumed run appends a newer line for the same episode: the export must keep the last one.
    stale = record("sum", 1, 0.0, False, "error")
    lines = [json.dumps(stale)] + [json.dumps(r) for r in RECORDS]
    path.write_text("\n".join(lines) + "\n")
    return path
