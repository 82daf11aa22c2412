"""Adversarial input for the cleaning stages: huge or pathological documents must be handled in
linear time (a quadratic regex would hang here; the alarm turns that into a failure)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

try:  # tests/ may or may not be a package
    from ._cleaning_helpers import CLEANING, run_stage
except ImportError:
    from _cleaning_helpers import CLEANING, run_stage  # type: ignore[no-redef]

N = 60_000
ADVERSARIAL = {
    "fullwidth_and_ascii_commas": "，," * N,
    "marks_then_spaces": ("a，" + " " * 500) * (N // 250),
    "brackets": "（" * N + "a" + "）" * N,
    "open_tags": "<a" * N,
    "unclosed_script": "<script>" + "x" * N * 2,
    "hex_then_letter": "0123456789abcdef" * (N // 8) + "g",
    "base64_lines": ("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODkwYWJjZGVmZ2hpams=\n") * (N // 30),
    "gbk_lead_chars": "浣鐨" * N,
    "latin1_soup": "ÃÄÅÆÇÈ" * (N // 3),
    "long_word": "a" * N * 2,
    "digits": "1" * N * 2,
    "dots_and_digits": "1." * N,
    "colons": ":" * N * 2,
    "separators": "首页 | " * (N // 3),
    "ansi": "\x1b[" * N,
    "char_refs": "&#" * N,
    "one_long_han_line": "的" * N * 2,
}


@pytest.fixture
def alarm() -> Iterator[None]:
    def fail(signum: int, frame: object) -> None:
        raise TimeoutError("took too long: not linear")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.slow
@pytest.mark.parametrize("stage", CLEANING)
def test_adversarial_documents_are_linear(stage: str, alarm: None) -> None:
    results, _ = run_stage(stage, list(ADVERSARIAL.values()))
    assert len(results) == len(ADVERSARIAL)  # one result per document, none lost
