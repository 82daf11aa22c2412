"""The vectorised batch paths of the cleaning stages equal their per-document reference paths."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stages import filter_repetition as rep
from stages._charclass import BatchChars
from stages._layout import layout

# characters the line and layout rules look at: newlines, blanks, separators, backticks,
# prompts, fences, CJK, Latin, a lone surrogate, a character beyond the BMP
ALPHABET = [*"\n\n\n  \t\u3000\x1c\x85|`$#~-=>{};长相思。ab1", "\ud800", "\U00020000", "```", "$ ls", "| a |"]
texts_st = st.lists(st.lists(st.sampled_from(ALPHABET), max_size=40).map("".join), min_size=1, max_size=12)


def reference_line_shares(texts: list[str], min_line_chars: int) -> np.ndarray:
    bc = BatchChars.of(texts)
    lay = layout(bc)
    return np.array([rep._line_shares(t, min_line_chars, lay.kinds_of(i)) for i, t in enumerate(texts)])


@settings(max_examples=300, deadline=None)
@given(texts_st, st.sampled_from([0, 1, 2, 5]))
def test_line_shares_equal_the_per_document_path(texts: list[str], min_line_chars: int) -> None:
    bc = BatchChars.of(texts)
    assert np.array_equal(
        rep.line_share_columns(bc, min_line_chars), reference_line_shares(texts, min_line_chars)
    )


@settings(max_examples=60, deadline=None)
@given(texts_st)
def test_line_shares_on_hash_collisions(texts: list[str]) -> None:
    """With every piece hashing alike, the exact comparison sends texts with differing pieces of
    one key down the per-document path: the scores stay the same."""
    original = rep._Prefix.hashes
    try:
        rep._Prefix.hashes = lambda self, first, length: np.zeros(len(first), dtype=np.uint64)  # type: ignore[method-assign]
        got = rep.line_share_columns(BatchChars.of(texts), 1)
    finally:
        rep._Prefix.hashes = original  # type: ignore[method-assign]
    assert np.array_equal(got, reference_line_shares(texts, 1))


def test_line_shares_of_a_repeated_poem_and_a_manual() -> None:
    poem = "长相思，山一重。\n别的句子在这里。\n\n长相思，山一重。\n别的句子在这里。\n\n长相思，山一重。"
    again = "Then run it again and again."
    manual = f"Run it:\n\n$ make build\n$ make build\n\n{again}\n\n{again}"
    texts = [poem, manual, "", "\n\n\n", "一行\n\n\n\n一行"]
    got = rep.line_share_columns(BatchChars.of(texts), 5)
    assert np.array_equal(got, reference_line_shares(texts, 5))
    assert got[0, 0] > 0.5 and got[0, 2] > 0 and got[1, 2] > 0 and got[4, 0] == 0 and got[4, 2] == 0.5
