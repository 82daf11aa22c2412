"""Step 6 of ``normalize``: CJK-safe width folding (the exact mapping is in the ``normalize``
docstring; no stage here)."""

from __future__ import annotations

import re

from stages._chars import CJK

# -- 6. width folding --------------------------------------------------------------------------
ALWAYS_FOLD = (
    "\uff03-\uff06\uff0a\uff0b\uff0d\uff0f-\uff19\uff1c-\uff1e\uff20-\uff3a\uff3c\uff3e-\uff5a\uff5c"
    "\uffe0-\uffe6\uff61-\uff64"
)
MARKS = "\uff01\uff02\uff07\uff0c\uff0e\uff1a\uff1b\uff1f\uff5e\u3000"  # ！＂＇，．：；？～ U+3000
BRACKETS = "\uff08\uff09\uff3b\uff3d\uff5b\uff5d"  # （）［］｛｝
ALWAYS_FOLD_TABLE: dict[int, str] = {c: chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)}
ALWAYS_FOLD_TABLE.update(dict(zip(range(0xFFE0, 0xFFE7), "¢£¬¯¦¥₩", strict=True)))
ALWAYS_FOLD_TABLE.update(dict(zip(range(0xFF61, 0xFF65), "。「」、", strict=True)))
CONTEXT_FOLD_TABLE: dict[int, str] = {ord(c): chr(ord(c) - 0xFEE0) for c in MARKS[:-1] + BRACKETS}
CONTEXT_FOLD_TABLE[0x3000] = " "
FULLWIDTH_ANY = re.compile(f"[{ALWAYS_FOLD}{MARKS}{BRACKETS}]")
ALWAYS_FOLD_RUN = re.compile(f"[{ALWAYS_FOLD}]+")
# Letters and digits of the Latin, Greek and Cyrillic scripts: what makes a "Latin context".
LATIN_ALNUM = "A-Za-z0-9\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u0370-\u03ff\u0400-\u04ff"
# Neutral characters inside a run of marks: spaces, ASCII punctuation, general punctuation
# (dashes, quotes, ellipsis), middle dot.
NEUTRAL = " \\t!-/:-@\\[-`{-~\u00b7\u2010-\u205e"
_M = re.escape(MARKS)
# Latin letter or digit, then a run of marks (and neutral characters) right after it.
# (runs are bounded to 64 characters so that adversarial input stays linear)
MARKS_AFTER_LATIN = re.compile(f"([{LATIN_ALNUM}])([{NEUTRAL}]{{0,64}}[{_M}][{NEUTRAL}{_M}]{{0,64}})")
# A run of marks ending in a Latin letter or digit.
MARKS_BEFORE_LATIN = re.compile(f"[{_M}][{NEUTRAL}{_M}]{{0,64}}[{LATIN_ALNUM}]")
BRACKET_PAIR = re.compile(
    "\uff08[^\uff08\uff09\n]{0,200}\uff09|\uff3b[^\uff3b\uff3d\n]{0,200}\uff3d"
    "|\uff5b[^\uff5b\uff5d\n]{0,200}\uff5d"
)
CJK_OR_FULLWIDTH = re.compile(f"[{CJK}\uff00-\uffef]")
LATIN_ALNUM_RE = re.compile(f"[{LATIN_ALNUM}]")
RUN_CHARS = re.compile(f"[{NEUTRAL}{_M}]")


def _cjk_at(text: str, i: int) -> bool:
    return 0 <= i < len(text) and CJK_OR_FULLWIDTH.match(text, i) is not None


def _latin_at(text: str, i: int) -> bool:
    return 0 <= i < len(text) and LATIN_ALNUM_RE.match(text, i) is not None


def fold_width(text: str, always: bool = True, marks: bool = True, latin: bool = True) -> str:
    """Apply the width-folding mapping documented in the module docstring. ``always=False`` /
    ``marks=False`` / ``latin=False`` state that ``text`` holds no always-folded character / no
    mark or bracket / no Latin letter or digit (the scans for them are then skipped)."""
    if not (always or marks) or not FULLWIDTH_ANY.search(text):
        return text
    if always:
        folded = ALWAYS_FOLD_RUN.sub(lambda m: m.group().translate(ALWAYS_FOLD_TABLE), text)
        latin = latin or folded != text  # full-width letters and digits fold to Latin ones
        text = folded
    if not marks or not latin or not LATIN_ALNUM_RE.search(text):
        return text  # no Latin letter or digit: no mark can be in Latin context

    def pair(m: re.Match[str]) -> str:
        s, e = m.start() - 1, m.end()
        while s >= 0 and m.start() - s < 64 and RUN_CHARS.match(text, s):
            s -= 1
        while e < len(text) and e - m.end() < 64 and RUN_CHARS.match(text, e):
            e += 1
        inner = m.group()[1:-1]
        if CJK_OR_FULLWIDTH.search(inner) or _cjk_at(text, s) or _cjk_at(text, e):
            return m.group()
        latin = LATIN_ALNUM_RE.search(inner) or _latin_at(text, m.start() - 1) or _latin_at(text, m.end())
        if not latin:
            return m.group()
        return (
            m.group()[0].translate(CONTEXT_FOLD_TABLE) + inner + m.group()[-1].translate(CONTEXT_FOLD_TABLE)
        )

    if "\uff08" in text or "\uff3b" in text or "\uff5b" in text:
        text = BRACKET_PAIR.sub(pair, text)

    def after_latin(m: re.Match[str]) -> str:
        if _cjk_at(text, m.end()):
            return m.group()
        return m.group(1) + m.group(2).translate(CONTEXT_FOLD_TABLE)

    text = MARKS_AFTER_LATIN.sub(after_latin, text)

    def before_latin(m: re.Match[str]) -> str:
        i = m.start() - 1
        while i >= 0 and m.start() - i < 64 and RUN_CHARS.match(text, i):
            i -= 1
        if _cjk_at(text, i):
            return m.group()
        return m.group().translate(CONTEXT_FOLD_TABLE)

    return MARKS_BEFORE_LATIN.sub(before_latin, text)
