"""The shared extraction cases (`code-extract/cases.json`, also run by the Rust crate's tests) through
the package's port and through the reward functions' extraction, so Python and the server take the
same program from the same completion."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import codegym
from codegym.extract import _FENCE_TAGS, answer, extract

CASES_FILE = Path(__file__).resolve().parents[3] / "code-extract" / "cases.json"
DOC = json.loads(CASES_FILE.read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = DOC["cases"]


def test_the_cases_file_is_the_known_format():
    assert DOC["version"] == 1
    assert len(CASES) >= 30
    assert len({c["name"] for c in CASES}) == len(CASES), "case names are unique"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_shared_case(case: dict[str, Any]):
    assert extract(case["text"], case["mode"], case["language"]) == case["expected"]


PYTHON_CASES = [c for c in CASES if c["language"] == "python"]


@pytest.mark.parametrize("case", PYTHON_CASES, ids=[c["name"] for c in PYTHON_CASES])
def test_reward_functions_extract_the_same(case: dict[str, Any]):
    """The reward functions' modes: `code_block` is `fenced` with no block an empty program."""
    mode = {"fenced": "code_block", "auto": "auto", "raw": "raw"}[case["mode"]]
    expected = case["expected"] if case["expected"] is not None else ""
    assert codegym.extract_program(case["text"], mode) == expected


def test_the_fence_tag_table_is_the_files():
    assert {lang: list(tags) for lang, tags in _FENCE_TAGS.items()} == DOC["fence_tags"]


def test_answer_drops_reasoning():
    assert answer("<think>a</think>b<think>c</think>d") == "bd"
    assert answer("plan</think>x</think>y") == "y"
    assert answer("x<think>never closed") == "x"
    assert answer("a</think>b<think>c") == "b"
    assert answer("no tags") == "no tags"


def test_unknown_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown extract mode 'fence'"):
        extract("x", "fence")  # type: ignore[arg-type]
