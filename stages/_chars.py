"""Character classes shared by the cleaning stages (regex fragments, no stage here).

HAN: CJK unified ideographs (basic block, extensions A-H), compatibility ideographs and radicals.
CJK: HAN plus kana, hangul, bopomofo and the CJK symbols-and-punctuation block (U+3001-U+303F;
  U+3000, the ideographic space, is whitespace and not included).
"""

from __future__ import annotations

import re

HAN = (
    "\u2e80-\u2fdf"  # radicals supplement, Kangxi radicals
    "\u3400-\u4dbf"  # extension A
    "\u4e00-\u9fff"  # unified ideographs
    "\uf900-\ufaff"  # compatibility ideographs
    "\U00020000-\U0003134f"  # extensions B-H and compatibility supplement
)
KANA_HANGUL = "\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\uac00-\ud7af\u1100-\u11ff"
CJK = HAN + KANA_HANGUL + "\u3001-\u303f"

HAN_RE = re.compile(f"[{HAN}]")
CJK_RE = re.compile(f"[{CJK}]")
