"""Character classes shared by the cleaning stages (regex fragments, no stage here).

HAN: CJK unified ideographs (basic block, extensions A-H), compatibility ideographs and radicals.
CJK: HAN plus kana, hangul, bopomofo and the CJK symbols-and-punctuation block (U+3001-U+303F;
  U+3000, the ideographic space, is whitespace and not included).
"""

from __future__ import annotations

import contextlib
import re
from functools import lru_cache

# The one definition of Han for every stage (inclusive code point ranges); regexes and per-code-
# point tables are derived from it.
HAN_COMPATIBILITY = (0xF900, 0xFAFF)  # compatibility ideographs (NFKC maps all but twelve)
HAN_RANGES: tuple[tuple[int, int], ...] = (
    (0x2E80, 0x2FDF),  # radicals supplement, Kangxi radicals
    (0x3400, 0x4DBF),  # extension A
    (0x4E00, 0x9FFF),  # unified ideographs
    HAN_COMPATIBILITY,
    (0x20000, 0x323AF),  # extensions B-H and the compatibility supplement (planes 2 and 3)
)
# HAN without the radicals (symbols, category So): the ranges whose code points are Han letters.
HAN_IDEOGRAPH_RANGES = HAN_RANGES[1:]
HAN_BEYOND_BMP = slice(HAN_RANGES[-1][0], HAN_RANGES[-1][1] + 1)  # index of a per-code-point table
HAN = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in HAN_RANGES)  # a regex character-class body
KANA_HANGUL = "\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\uac00-\ud7af\u1100-\u11ff"
CJK = HAN + KANA_HANGUL + "\u3001-\u303f"

HAN_RE = re.compile(f"[{HAN}]")
CJK_RE = re.compile(f"[{CJK}]")


@lru_cache(maxsize=1)
def utf8_as_gbk_chars() -> str:
    """Characters that UTF-8 mojibake read as GBK starts with: a GBK pair whose first byte is a
    UTF-8 lead byte for U+4000-U+FFFF (E4-EF) and whose second byte is a continuation (80-BF)."""
    chars = []
    for lead in range(0xE4, 0xF0):
        for trail in range(0x80, 0xC0):
            with contextlib.suppress(UnicodeDecodeError):
                chars.append(bytes([lead, trail]).decode("gbk"))
    return "".join(sorted(set(chars)))
