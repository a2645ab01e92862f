"""The program in model text: a port of the Rust `code-extract` crate, the one set of extraction rules.

The server's coding env, the rollout engine and these functions find the same program in the same
text: `code-extract/cases.json` in the repository holds the shared cases that both the Rust tests and
this package's tests run.

- A fence is three or more backticks or tildes at the start of a line (up to three spaces of
  indentation); the info string's first word, lower-cased, is the block's tag. A backtick fence's info
  string may not contain a backtick. A block ends at a line of the same character with at least as many
  marks and nothing else; an unclosed block runs to the end of the text (models stop mid-block), unless
  nothing but blank text follows (a stray marker). Blocks of other languages are skipped whole, so a fence
  inside one is not a block.
- Reasoning (`<think>...</think>`; everything before a lone `</think>`; everything after an unclosed
  `<think>`) is not the answer: a fence there opens no block, so a draft in the thinking is never the
  program, even when it is the only block (then there is no block). The end of reasoning also ends a
  line (`</think>```python` opens a block). A block opened in the answer closes at its closing fence
  wherever that is (a program may print `<think>`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

__all__ = [
    "PYTHON_TAGS",
    "ExtractMode",
    "answer",
    "extract",
    "fence_tags",
    "first_block",
    "reasoning_spans",
]

ExtractMode = Literal["fenced", "auto", "raw"]

_OPEN = "<think>"
_CLOSE = "</think>"

# Rust's `to_ascii_lowercase`: `str.lower` would also fold non-ASCII letters (the Kelvin sign to k).
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

PYTHON_TAGS: tuple[str, ...] = ("", "python", "py", "python3")

# The fence tags per language (SandboxFusion's names): the Rust crate's `FENCE_TAGS`, whose copy in
# `code-extract/cases.json` the tests compare this table with.
_FENCE_TAGS: dict[str, tuple[str, ...]] = {
    "python": PYTHON_TAGS,
    "cpp": ("", "cpp", "c++", "cc", "cxx"),
    "c": ("", "c"),
    "rust": ("", "rust", "rs"),
    "go": ("", "go", "golang"),
    "java": ("", "java"),
    "nodejs": ("", "javascript", "js", "nodejs", "node"),
    "typescript": ("", "typescript", "ts"),
    "bash": ("", "bash", "sh", "shell"),
    "ruby": ("", "ruby", "rb"),
    "php": ("", "php"),
    "lua": ("", "lua"),
    "perl": ("", "perl", "pl"),
}


def fence_tags(language: str) -> tuple[str, ...]:
    """The tags of a block in `language`; a name the table does not know: that name and untagged."""
    return _FENCE_TAGS.get(language, ("", language))


def reasoning_spans(text: str) -> list[tuple[int, int]]:
    """The `(start, end)` character ranges of `text` that are reasoning, in order."""
    spans: list[tuple[int, int]] = []
    outside: list[tuple[int, int]] = []
    pos = 0
    while (open_at := text.find(_OPEN, pos)) != -1:
        close_at = text.find(_CLOSE, open_at + len(_OPEN))
        if close_at == -1:
            break
        outside.append((pos, open_at))
        spans.append((open_at, close_at + len(_CLOSE)))
        pos = close_at + len(_CLOSE)
    outside.append((pos, len(text)))
    lone_close: int | None = None
    for start, end in reversed(outside):
        at = text.rfind(_CLOSE, start, end)
        if at != -1:
            lone_close = at + len(_CLOSE)
            break
    if lone_close is not None:
        spans = [(0, lone_close)] + [s for s in spans if s[0] >= lone_close]
    origin = lone_close or 0
    for start, end in outside:
        start = max(start, origin)
        at = text.find(_OPEN, start, end) if start < end else -1
        if at != -1:
            spans = [s for s in spans if s[1] <= at] + [(at, len(text))]
            break
    return spans


def answer(text: str) -> str:
    """`text` without its reasoning."""
    out: list[str] = []
    pos = 0
    for start, end in reasoning_spans(text):
        out.append(text[pos:start])
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _fence(line: str) -> tuple[str, int, str] | None:
    """A fence line as (character, number of marks, info string)."""
    trimmed = line.rstrip("\r\n")
    stripped = trimmed.lstrip(" ")
    if len(trimmed) - len(stripped) > 3 or not stripped or stripped[0] not in "`~":
        return None
    ch = stripped[0]
    count = len(stripped) - len(stripped.lstrip(ch))
    if count < 3:
        return None
    info = stripped[count:]
    if ch == "`" and "`" in info:
        return None
    # Rust's `str::trim` strips Unicode whitespace, as `str.strip` does.
    return ch, count, info.strip()


def first_block(text: str, tags: Sequence[str] = PYTHON_TAGS) -> str | None:
    """The body of the first fenced block outside reasoning whose tag is in `tags` (`""`: untagged)."""
    spans = reasoning_spans(text)

    def in_reasoning(at: int) -> bool:
        return any(start <= at < end for start, end in spans)

    lines = _lines(text, spans)
    offset = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        line_start = offset
        offset += len(line)
        i += 1
        parsed = None if in_reasoning(line_start) else _fence(line)
        if parsed is None:
            continue
        ch, count, info = parsed
        words = info.split()
        wanted = (words[0].translate(_ASCII_LOWER) if words else "") in tags
        body_start = offset
        body_end: int | None = None
        while i < len(lines):
            inner = lines[i]
            inner_start = offset
            offset += len(inner)
            i += 1
            closing = _fence(inner)
            if closing is not None and closing[0] == ch and closing[1] >= count and not closing[2]:
                body_end = inner_start
                break
        body = text[body_start : len(text) if body_end is None else body_end]
        if wanted and (body_end is not None or body.strip()):
            return body
    return None


def _lines(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The lines of `text` (each with its `\\n`), where the end of a reasoning span also ends a line:
    the answer after `</think>` starts a line of its own. Not `splitlines`: it also splits at \\r,
    \\v, \\f and others, and the Rust crate splits at \\n only."""
    ends = {i + 1 for i, c in enumerate(text) if c == "\n"} | {end for _, end in spans}
    ends = {e for e in ends if 0 < e < len(text)} | {len(text)}
    lines: list[str] = []
    start = 0
    for end in sorted(e for e in ends if e > 0):
        lines.append(text[start:end])
        start = end
    return lines


def extract(text: str, mode: ExtractMode = "fenced", language: str = "python") -> str | None:
    """The program of `text` in `language`: `fenced` the first block (None: no block), `auto` the first
    block or else the text without reasoning, `raw` the text as it is."""
    if mode == "raw":
        return text
    block = first_block(text, fence_tags(language))
    if mode == "fenced":
        return block
    if mode == "auto":
        return answer(text) if block is None else block
    raise ValueError(f"unknown extract mode {mode!r} (fenced, auto or raw)")
