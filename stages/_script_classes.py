"""Script classes of code points for lang_id (no stage here): one table lookup per character
(``script_table``) and one bincount per batch (``script_counts``) give each text's letters per
script, Han split into Traditional-only, Simplified-only and written-Cantonese forms.

Traditional and Simplified forms: each Han character converted alone by the installed OpenCC
(t2s and s2t), read from stages/data/han_forms.json when its dictionaries have the recorded
fingerprints (bench/make_han_forms.py rebuilds it).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from stages._opencc import fingerprint as opencc_fingerprint

# Characters of written Cantonese that Standard Written Chinese does not use (particles,
# pronouns, verbs); chosen on the dev split of bench/realdata's language-id set (HKCanCor, CTCPC)
# against People's Daily, reviews, fortunes-zh and all of chinese-poetry. Left out although
# Cantonese: 係 (關係), 點 邊 度, 晒 (晒太阳), 喇 (喇叭), 咪 啦 咯 吖 咋 (Mandarin particles too),
# 郁 (a name).
YUE_MARKERS = "嘅咗喺冇唔哋啲嚟嘢噉嗰咩啱攞嘥瞓攰㗎嚿乜佢睇諗咁喎嘞冚揾搵嬲啩"

# Script classes of code points.
(NONE, LATN, CYRL, GREK, ARAB, HEBR, DEVA, THAI, OTHER, HAN, HAN_T, HAN_S, HAN_YUE, KANA, HANG) = range(15)
N_CLASSES = 15
SCRIPT_CODE = {
    LATN: "Latn",
    CYRL: "Cyrl",
    GREK: "Grek",
    ARAB: "Arab",
    HEBR: "Hebr",
    DEVA: "Deva",
    THAI: "Thai",
    OTHER: "Zzzz",
}
ALPHABETS = (LATN, CYRL, GREK, ARAB, HEBR, DEVA, THAI, OTHER)
HAN_ALL = (HAN, HAN_T, HAN_S, HAN_YUE)
_HAN_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F))


_BLOCKS = (  # (first, last, class) for the letters (str.isalpha) of each block
    (0x0041, 0x024F, LATN),
    (0x0250, 0x02AF, LATN),  # IPA
    (0x1E00, 0x1EFF, LATN),
    (0x2C60, 0x2C7F, LATN),
    (0xA720, 0xA7FF, LATN),
    (0xFF21, 0xFF5A, LATN),  # full-width
    (0x0370, 0x03FF, GREK),
    (0x1F00, 0x1FFF, GREK),
    (0x0400, 0x052F, CYRL),
    (0x1C80, 0x1C8F, CYRL),
    (0x2DE0, 0x2DFF, CYRL),
    (0xA640, 0xA69F, CYRL),
    (0x0590, 0x05FF, HEBR),
    (0xFB1D, 0xFB4F, HEBR),
    (0x0600, 0x06FF, ARAB),
    (0x0750, 0x077F, ARAB),
    (0x08A0, 0x08FF, ARAB),
    (0xFB50, 0xFDFF, ARAB),
    (0xFE70, 0xFEFF, ARAB),
    (0x0900, 0x097F, DEVA),
    (0xA8E0, 0xA8FF, DEVA),
    (0x0E00, 0x0E7F, THAI),
    (0x3040, 0x30FF, KANA),
    (0x31F0, 0x31FF, KANA),
    (0xFF66, 0xFF9F, KANA),  # half-width
    (0x1100, 0x11FF, HANG),
    (0x3130, 0x318F, HANG),
    (0xA960, 0xA97F, HANG),
    (0xAC00, 0xD7FF, HANG),
    (0xFFA0, 0xFFDC, HANG),
)
HAN_FORMS_FILE = Path(__file__).resolve().parent / "data" / "han_forms.json"


def han_forms_computed() -> tuple[str, str]:
    """(Han characters OpenCC t2s changes and s2t does not, Han characters s2t changes and t2s does
    not): Traditional-only and Simplified-only forms, each character converted alone (~0.5 s)."""
    import opencc

    cps = [c for a, b in _HAN_RANGES for c in range(a, b + 1)]
    own = [chr(c) for c in cps]
    chars = "\n".join(own)
    to_s = opencc.OpenCC("t2s").convert(chars).split("\n")
    to_t = opencc.OpenCC("s2t").convert(chars).split("\n")
    if len(to_s) != len(own) or len(to_t) != len(own):  # a mapping joined lines: one by one
        to_s = [opencc.OpenCC("t2s").convert(c) for c in own]
        to_t = [opencc.OpenCC("s2t").convert(c) for c in own]
    trad = "".join(c for c, s, t in zip(own, to_s, to_t, strict=True) if s != c and t == c)
    simp = "".join(c for c, s, t in zip(own, to_s, to_t, strict=True) if t != c and s == c)
    return trad, simp


@lru_cache(maxsize=1)
def han_forms() -> tuple[str, str]:
    """``han_forms_computed()``, read from stages/data/han_forms.json when the installed OpenCC
    dictionaries are the ones it was made from (``bench/make_han_forms.py`` rebuilds it)."""
    try:
        saved = json.loads(HAN_FORMS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}
    fingerprints = {c: opencc_fingerprint(c) for c in ("t2s", "s2t")}
    if saved and all(fingerprints.values()) and saved.get("fingerprints") == fingerprints:
        return str(saved["trad"]), str(saved["simp"])
    return han_forms_computed()


@lru_cache(maxsize=1)
def script_table() -> np.ndarray:
    """uint8 script class of every code point U+0000-U+10FFFF (built once per process)."""
    table = np.zeros(0x110000, dtype=np.uint8)
    cps = np.arange(0x30000, dtype=np.uint32)
    cps[0xD800:0xE000] = 0  # surrogates: not letters
    letters_only = re.sub(r"[\W\d_]", "\x00", cps.tobytes().decode("utf-32-le"))  # str.isalpha, in C
    alpha = np.zeros(0x110000, dtype=bool)
    alpha[:0x30000] = np.frombuffer(letters_only.encode("utf-32-le"), dtype=np.uint32) != 0
    table[alpha] = OTHER
    for a, b, cls in _BLOCKS:
        seg = alpha[a : b + 1]
        table[a : b + 1][seg] = cls
    table[0x30FC] = KANA  # ー (prolonged sound mark)
    table[0x3099:0x309F] = KANA  # voiced sound marks, iteration marks
    table[0x30FD:0x30FF] = KANA
    for a, b in _HAN_RANGES:
        table[a : b + 1] = HAN
    table[[0x3005, 0x3007]] = HAN  # 々 〇
    trad, simp = han_forms()
    for chars, cls in ((trad, HAN_T), (simp, HAN_S), (YUE_MARKERS, HAN_YUE)):
        table[np.frombuffer(chars.encode("utf-32-le"), dtype=np.uint32)] = cls
    return table


COUNT_CHARS = 4096  # script counts of a longer text: its first and middle 2048 characters


def counted_part(text: str) -> str:
    """What the script counts read of ``text``: all of it, or its first and middle halves of
    COUNT_CHARS (a sample, so that the cost per document is bounded)."""
    if len(text) <= COUNT_CHARS:
        return text
    half, mid = COUNT_CHARS // 2, len(text) // 2
    return text[:half] + text[mid : mid + half]


def script_counts(texts: list[str]) -> np.ndarray:
    """int64 [len(texts), N_CLASSES]: characters of each script class in each text (in its
    ``counted_part``)."""
    if not texts:
        return np.zeros((0, N_CLASSES), dtype=np.int64)
    parts = [t if len(t) <= COUNT_CHARS else counted_part(t) for t in texts]
    cps = np.frombuffer("".join(parts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    key = np.repeat(np.arange(0, len(parts) * N_CLASSES, N_CLASSES, dtype=np.int32), lengths)
    key += script_table()[cps]
    return np.bincount(key, minlength=len(parts) * N_CLASSES).reshape(len(parts), N_CLASSES)


def yue_marker_counts(texts: list[str], rows: list[int]) -> dict[int, int]:
    """Distinct Cantonese marker characters of the given texts (only asked for texts that have some)."""
    markers = set(YUE_MARKERS)
    return {i: len(markers.intersection(texts[i])) for i in rows}
