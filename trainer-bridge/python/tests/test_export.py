"""`codegym export` output loaded with Hugging Face `datasets`, for JSONL and Parquet."""

from __future__ import annotations

import json
import subprocess

import datasets
import pytest
from conftest import codegym_bin
from rollout_data import RECORDS, failure, write_rollout

datasets.disable_progress_bars()


def run_export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(codegym_bin()), "export", *args], check=False, capture_output=True, text=True, timeout=300
    )


def load(path):
    kind = "parquet" if path.suffix == ".parquet" else "json"
    return datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(path.parent / "hf-cache"))


@pytest.fixture()
def rollout(tmp_path):
    return write_rollout(tmp_path / "rollout.jsonl")


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_rl_export_loads_with_advantages(rollout, tmp_path, ext):
    out = tmp_path / f"rl.{ext}"
    done = run_export("--in", str(rollout), "--format", "rl", "--out", str(out), "--estimator", "dr-grpo")
    assert done.returncode == 0, done.stderr
    ds = load(out)
    assert len(ds) == 6
    by_id = {row["episode_id"]: row for row in ds}
    # Group sum: rewards 1, 0, 0.5, 1 (the stale errored line for sum#1 was replaced), mean 0.625.
    assert by_id["sum#0"]["advantage"] == pytest.approx(0.375)
    assert by_id["sum#1"]["advantage"] == pytest.approx(-0.625)
    assert by_id["sum#2"]["advantage"] == pytest.approx(-0.125)
    assert by_id["fib#0"]["advantage"] == 0.0 and by_id["fib#0"]["zero_variance"]
    assert by_id["sum#0"]["prompt"][1]["content"] == "Solve sum"
    assert by_id["sum#0"]["completion"][0]["role"] == "assistant"
    assert by_id["sum#0"]["completion_token_ids"] == [[7, 8, 9]]
    [logprobs] = by_id["sum#0"]["completion_logprobs"]
    assert logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert by_id["sum#1"]["completion_token_ids"] is None
    assert set(ds["schema_version"]) == {2}
    assert not any(ds["masked"]) and set(ds["mask_reason"]) == {None}


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_infra_failures_load_as_masked_rows_with_null_rewards(tmp_path, ext):
    rollout = tmp_path / "rollout.jsonl"
    # sum#4 lost its env server after a scored step; fib#2 was interrupted.
    failures = [failure("sum", 4, 1.0, "error", "env"), failure("fib", 2, 0.0, "cancelled", "cancelled")]
    rollout.write_text("".join(json.dumps(r) + "\n" for r in [*RECORDS, *failures]))
    out = tmp_path / f"rl.{ext}"
    done = run_export("--in", str(rollout), "--format", "rl", "--out", str(out), "--estimator", "dr-grpo")
    assert done.returncode == 0, done.stderr
    assert "(2 masked" in done.stdout
    ds = load(out)
    by_id = {row["episode_id"]: row for row in ds}
    assert len(ds) == 8
    for episode, reason in [("sum#4", "env"), ("fib#2", "cancelled")]:
        row = by_id[episode]
        assert row["masked"] and row["mask_reason"] == reason
        assert row["reward"] is None and row["advantage"] is None
    # The group baseline is over the scored rows only: sum's mean stays 0.625, not (2.5 + 1) / 5.
    assert by_id["sum#0"]["advantage"] == pytest.approx(0.375)
    # What a trainer keeps: the scored rows, every reward a number.
    train = ds.filter(lambda row: not row["masked"])
    assert len(train) == 6 and None not in train["reward"]

    dropped = tmp_path / f"dropped.{ext}"
    done = run_export("--in", str(rollout), "--format", "rl", "--out", str(dropped), "--on-infra-error", "drop")
    assert done.returncode == 0, done.stderr
    assert sorted(load(dropped)["episode_id"]) == sorted(r["episode_id"] for r in RECORDS)


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_sft_and_dpo_exports_load(rollout, tmp_path, ext):
    sft = tmp_path / f"sft.{ext}"
    assert run_export("--in", str(rollout), "--format", "sft", "--out", str(sft)).returncode == 0
    ds = load(sft)
    assert sorted(ds["episode_id"]) == ["fib#0", "fib#1", "sum#0", "sum#3"]
    assert [m["role"] for m in ds[0]["messages"]] == ["system", "user", "assistant"]

    dpo = tmp_path / f"dpo.{ext}"
    assert run_export("--in", str(rollout), "--format", "dpo", "--out", str(dpo)).returncode == 0
    ds = load(dpo)
    # Group sum: two solved against two failed (worst first); group fib has no failure.
    pairs = sorted(zip(ds["chosen_episode_id"], ds["rejected_episode_id"]))
    assert pairs == [("sum#0", "sum#1"), ("sum#3", "sum#2")]
    row = ds[0]
    assert row["prompt"][-1]["role"] == "user" and row["chosen"][0]["role"] == "assistant"
    assert row["chosen_reward"] > row["rejected_reward"]


def test_export_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema_version": 1}\n')
    out = tmp_path / "out.parquet"
    done = run_export("--in", str(bad), "--format", "rl", "--out", str(out))
    assert done.returncode != 0
    assert f"{bad}:1:" in done.stderr
    assert not out.exists()
