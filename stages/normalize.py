"""Chinese-aware text normalization: Unicode repair, CJK-safe width folding, Traditional ->
Simplified on CJK runs, newline and blank-line unification. Documents left empty are dropped.

Steps, in order (each is skipped when a cheap check shows it has nothing to do):

1. ANSI escape sequences (CSI ``ESC [ ... final``, OSC ``ESC ] ... BEL``, two-byte ``ESC x``) removed.
2. Mojibake repair (``repair_mojibake``; it runs after step 4, so removed controls cannot hide
   mojibake): UTF-8 read as Latin-1/cp1252 ("cafÃ©", "â€œ") is fixed with ftfy's
   ``fix_encoding`` (only ftfy's encoding fixer: no width, quote or NFKC changes);
   UTF-8 read as GBK ("浣犲ソ" -> "你好") is reversed when the re-decoding is strictly valid UTF-8;
   a line of GBK or Big5 read as Latin-1 ("ÄãºÃ" -> "你好") is decoded again with the codec that
   decodes the whole line strictly into mostly frequent Han characters (GB2312/Big5 level 1).
   Nothing else is touched.
   HTML character references left in plain text are decoded: numeric ones (&#183; &#x4E2D;,
   except &#38; which would create new references) and &nbsp; &lt; &gt; &quot; &apos;.
3. Newlines: \\r\\n, \\r, U+2028, U+2029, U+0085, \\v and \\f become \\n.
4. Control characters other than \\n and \\t (C0, DEL, C1) are removed; zero-width and format
   characters (U+00AD, U+180E, U+200B-U+200F, U+202A-U+202E, U+2060-U+2064, U+2066-U+2069, BOM
   U+FEFF) are removed; Unicode spaces (U+00A0, U+1680, U+2000-U+200A, U+202F, U+205F) become " ".
5. Unicode NFC (``unicode_form``). NFC maps CJK compatibility ideographs (U+F900-U+FAFF, U+2F800-)
   to their unified equivalents; it never folds width (that is NFKC, which is *not* applied).
6. Width folding (``width_fold``), exact mapping:
   - always: full-width digits ０-９ and letters Ａ-Ｚ ａ-ｚ -> 0-9 A-Z a-z; full-width symbols
     with no CJK role ＃＄％＆＊＋－／＜＝＞＠＼＾＿｀｜ -> #$%&*+-/<=>@\\^_`|;
     ￠￡￢￣￤￥￦ -> ¢£¬¯¦¥₩; half-width CJK punctuation ｡｢｣､ -> 。「」、.
   - in Latin context only: the marks ！＂＇，．：；？～ -> !"',.:;?~ and the ideographic space
     U+3000 -> " ". A maximal run of these marks (with spaces and ASCII/general punctuation
     between them) is in Latin context when the character right before or right after the run
     is a Latin, Greek or Cyrillic letter or digit and neither of the two is CJK (Han, kana,
     hangul, CJK punctuation) or another full-width form. "价格：100元" keeps "：",
     "Note：see" becomes "Note:see", "Hello，世界" keeps "，", "１．５" becomes "1.5" and
     "浅．但是" (full-width full stop used as a Chinese period) keeps "．".
   - brackets （）［］｛｝ -> ()[]{} only as a matched pair on one line (at most 200 characters
     apart) whose content holds no CJK or full-width character, whose outer neighbours are not
     CJK, and with a Latin letter or digit inside or next to it: "（ABC）" -> "(ABC)",
     "价格（USD）" and "作者（946-999）" are kept. Unpaired brackets are kept.
   - never: CJK punctuation outside the full-width-forms block (，is U+FF0C and is covered above;
     。「」『』、…《》【】 and the rest of U+3001-U+303F are never changed).
7. Traditional -> Simplified with OpenCC (``opencc``: t2s, tw2sp, hk2s or off), applied only to CJK
   text: URLs, e-mail addresses, inline `code` and fenced ```code``` blocks are left untouched,
   and Latin letters are never changed: OpenCC's dictionaries only hold entries with Han
   characters, and when a phrase entry would change Latin letters (tw2sp: B肝 -> 乙肝,
   隨身碟 -> U盤) the segment is converted run by run between Latin words instead. Phrase
   mappings may change the number of characters (tw2sp: 記憶體 -> 内存); no other step adds
   characters.
8. Trailing spaces, tabs and ideographic spaces at line ends are removed; runs of blank lines
   become ``paragraph_separator``; leading blank lines and trailing whitespace are removed.

Invariants (property-tested): normalizing twice equals normalizing once; with OpenCC off and
mojibake repair off, the sequence of Han characters is unchanged; the text never gets longer
than its NFC form except by OpenCC mappings.
"""

from __future__ import annotations

import contextlib
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import MapStage, StageContext, StageResult, param, register
from stages import _opencc
from stages._charclass import batch_chars, flags_per_text, mostly_wide
from stages._chars import CJK, HAN, HAN_BEYOND_BMP, HAN_RE

# -- 1. ANSI escapes ---------------------------------------------------------------------------
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")

# -- 2. mojibake -------------------------------------------------------------------------------
# UTF-8 bytes read as Latin-1/cp1252: a lead byte (Â-ï) followed by a continuation byte as it
# appears in Latin-1 (\x80-\xbf) or cp1252 (the letters cp1252 puts at 0x80-0x9f).
LATIN_MOJIBAKE = re.compile(
    "[\u00c2-\u00ef][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc"
    "\u2013\u2014\u2018-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a\u20ac\u2122]"
)
LATIN1_HIGH = re.compile("[\u0080-\u00ff]")
# GBK-encoded text read as Latin-1: runs of high Latin-1 letters.
GBK_AS_LATIN1 = re.compile("[\u00a1-\u00ff]{4,}")


@lru_cache(maxsize=1)
def _utf8_as_gbk_chars() -> str:
    """Characters that UTF-8 mojibake read as GBK starts with: a GBK pair whose first byte is a
    UTF-8 lead byte for U+4000-U+FFFF (E4-EF) and whose second byte is a continuation (80-BF)."""
    chars = []
    for lead in range(0xE4, 0xF0):
        for trail in range(0x80, 0xC0):
            with contextlib.suppress(UnicodeDecodeError):
                chars.append(bytes([lead, trail]).decode("gbk"))
    return "".join(sorted(set(chars)))


@lru_cache(maxsize=1)
def _utf8_as_gbk_re() -> re.Pattern[str]:
    """Two mojibake lead characters at most three characters apart (real text rarely has them
    that close; mojibake has one every one or two characters). Bounded, so it stays linear."""
    lead = re.escape(_utf8_as_gbk_chars())
    return re.compile(f"[{lead}][^\\x00-\\x7f\\s]{{0,3}}[{lead}]")


@lru_cache(maxsize=1)
def _utf8_as_gbk_lead() -> re.Pattern[str]:
    return re.compile(f"[{re.escape(_utf8_as_gbk_chars())}]")


NON_ASCII_RUN = re.compile(r"[^\x00-\x7f\s]+")


def _fix_utf8_read_as_gbk(text: str) -> tuple[str, int]:
    fixed = 0
    close_leads, lead = _utf8_as_gbk_re(), _utf8_as_gbk_lead()

    def repl(m: re.Match[str]) -> str:
        nonlocal fixed
        whole = m.group()
        first = lead.search(whole)
        if first is None or not close_leads.search(whole, first.start()):
            return whole
        head, run = whole[: first.start()], whole[first.start() :]
        try:
            raw = run.encode("gbk")
        except UnicodeEncodeError:
            return whole
        try:
            out = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            # the last character often lost a byte; keep a strictly valid prefix of whole GBK pairs
            cut = e.start - e.start % 2
            if cut < 6 or cut < 0.7 * len(raw) or run[: cut // 2].encode("gbk") != raw[:cut]:
                return whole
            try:
                out = raw[:cut].decode("utf-8") + run[cut // 2 :]
            except UnicodeDecodeError:
                return whole
        if out == run or not HAN_RE.search(out):
            return whole
        fixed += 1
        return head + out

    return NON_ASCII_RUN.sub(repl, text), fixed


@lru_cache(maxsize=1)
def _frequent_han() -> frozenset[str]:
    """GB2312 level 1 (3,755 frequent Simplified) and Big5 level 1 (5,401 frequent Traditional)."""
    chars = set()
    for lead in range(0xB0, 0xD8):
        for trail in range(0xA1, 0xFF):
            with contextlib.suppress(UnicodeDecodeError):
                chars.add(bytes([lead, trail]).decode("gb2312"))
    for lead in range(0xA4, 0xC7):
        for trail in [*range(0x40, 0x7F), *range(0xA1, 0xFF)]:
            with contextlib.suppress(UnicodeDecodeError):
                chars.add(bytes([lead, trail]).decode("big5"))
    return frozenset(chars)


LATIN1_SEGMENT = re.compile("[\x00-\x09\x0b-\xff]+")


def _fix_cjk_read_as_latin1(text: str) -> tuple[str, int]:
    """Stretches of GBK or Big5 text that were decoded as Latin-1 ("ÄãºÃ" -> "你好"): a line's
    longest stretch of Latin-1 characters is decoded again with whichever codec decodes all of
    it strictly into mostly frequent Han characters."""
    frequent = _frequent_han()
    fixed = 0

    def repl(m: re.Match[str]) -> str:
        nonlocal fixed
        segment = m.group()
        if not GBK_AS_LATIN1.search(segment):
            return segment
        raw = segment.encode("latin-1")
        best, best_share = None, 0.6
        for codec in ("gbk", "big5"):
            try:
                out = raw.decode(codec)
            except UnicodeDecodeError:
                continue
            han = HAN_RE.findall(out)
            if len(han) < 2 or any("\ue000" <= c <= "\uf8ff" for c in out):
                continue
            share = sum(c in frequent for c in han) / len(han)
            if share > best_share:
                best, best_share = out, share
        if best is None:
            return segment
        fixed += 1
        return best

    return LATIN1_SEGMENT.sub(repl, text), fixed


MOJIBAKE_ROUNDS = 8


def repair_mojibake(text: str, latin1: bool = True, gbk_leads: bool = True) -> tuple[str, int]:
    """(repaired text, number of repairs). Only recognisable mojibake is changed.
    ``latin1=False`` / ``gbk_leads=False`` state that ``text`` has no U+0080-U+00FF character / no
    character UTF-8 read as GBK starts with (the checks for them are then skipped).

    Repeated until nothing changes (at most MOJIBAKE_ROUNDS rounds; every repair shortens the
    text), so that repairing again changes nothing: one repair can leave new mojibake behind
    ("ÃÃÃÃ©" -> "ÃÃÃé", itself GBK read as Latin-1)."""
    fixes = 0
    for _ in range(MOJIBAKE_ROUNDS):
        repaired, n = _repair_mojibake_once(text, latin1, gbk_leads)
        if repaired == text:
            break
        text, fixes = repaired, fixes + n
        latin1 = gbk_leads = True
    return text, fixes


def _repair_mojibake_once(text: str, latin1: bool, gbk_leads: bool) -> tuple[str, int]:
    fixes = 0
    if latin1 and LATIN1_HIGH.search(text):
        if GBK_AS_LATIN1.search(text):
            text, n = _fix_cjk_read_as_latin1(text)
            fixes += n
            gbk_leads = gbk_leads or n > 0
        if LATIN_MOJIBAKE.search(text):
            import ftfy

            repaired = ftfy.fix_encoding(text)
            if repaired != text:
                fixes += 1
                text = repaired
                gbk_leads = True
    if gbk_leads and not text.isascii() and _utf8_as_gbk_re().search(text):
        text, n = _fix_utf8_read_as_gbk(text)
        fixes += n
    return text, fixes


# -- 3/4. newlines, controls, invisible characters, spaces ------------------------------------
SUSPECT = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00a0\u00ad\u1680\u180e\u2000-\u200f\u2028-\u202f"
    "\u205f-\u2064\u2066-\u2069\ufeff]"
)
NEWLINES = re.compile("\r\n|[\r\u2028\u2029\x85\x0b\x0c]")
CONTROLS_AND_INVISIBLE = re.compile(
    "[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\u00ad\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u2069\ufeff]+"
)
UNICODE_SPACES = re.compile("[\u00a0\u1680\u2000-\u200a\u202f\u205f]")

CHAR_REF = re.compile(r"&#(?:[0-9]{1,7}|[xX][0-9A-Fa-f]{1,6});|&(?:nbsp|lt|gt|quot|apos);")
NAMED_REFS = {"&nbsp;": " ", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'"}


def _char_ref(m: re.Match[str]) -> str:
    ref = m.group()
    if ref[1] != "#":
        return NAMED_REFS[ref]
    try:
        cp = int(ref[3:-1], 16) if ref[2] in "xX" else int(ref[2:-1])
        c = chr(cp)
    except (ValueError, OverflowError):
        return ref
    if c == "&" or 0xD800 <= cp <= 0xDFFF:
        return ref
    if SUSPECT.match(c):  # never produce what steps 3/4 would rewrite
        return "\n" if NEWLINES.match(c) else " " if UNICODE_SPACES.match(c) else ""
    return c


def decode_char_refs(text: str) -> str:
    """Numeric and a few named HTML character references decoded (idempotent: never makes a new '&')."""
    return CHAR_REF.sub(_char_ref, text) if "&" in text else text


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


# -- 7. OpenCC on CJK runs ---------------------------------------------------------------------
PROTECTED = re.compile(
    r"```.*?```|`[^`\n]+`"
    r"|(?:https?|ftp)://[^\s<>\"'，。！？；：、（）【】「」『』《》]+"
    r"|[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+",
    re.S,
)
LATIN_LETTERS = re.compile(r"([A-Za-z]+)")
HAN_ANY = re.compile(f"[{HAN}]")


OPENCC_CONFIGS = ("t2s", "tw2sp", "hk2s")
TRIGGERS_FILE = Path(__file__).resolve().parent / "data" / "opencc_triggers.json"


@lru_cache(maxsize=8)
def opencc_triggers(config: str) -> str | None:
    """Characters without which OpenCC ``config`` leaves a text unchanged (see
    bench/make_opencc_triggers.py), or None when the installed dictionaries are not the ones they
    were read from."""
    recorded = _recorded(config)
    return None if recorded is None else str(recorded["chars"])


@lru_cache(maxsize=8)
def _recorded(config: str) -> dict[str, object] | None:
    """The entry of TRIGGERS_FILE for ``config`` when the installed dictionaries are the ones it
    was read from, else None."""
    try:
        recorded = json.loads(TRIGGERS_FILE.read_text(encoding="utf-8")).get(config)
    except (OSError, ValueError):
        return None
    if not recorded or recorded.get("fingerprint") != _opencc.fingerprint(config):
        return None
    return dict(recorded)


IDS_OPERATORS = (0x2FF0, 0x3000)  # [first, end): OpenCC keeps a description sequence as it is
IDS_EXTRA = 0x31EF


class CharMap:
    """OpenCC ``config`` as a table, for the texts it converts character by character.

    OpenCC converts a text by greedy longest-prefix matches of dictionary keys (after splitting
    it into segments, which only splits). Where no key of more than one character (``phrases``
    of TRIGGERS_FILE, every dictionary of the config) occurs, every match is one character,
    so the text converts character by character, each as OpenCC converts it alone (the table,
    read from OpenCC itself, one call per trigger character). ``unsafe`` marks what sends a
    text to OpenCC instead: a character starting a phrase followed by its second character
    (a superset of the phrase occurrences), a key of the normalization dictionaries (they
    change the text the conversion matches on), an ideographic description character (OpenCC
    keeps a description sequence unconverted), a character OpenCC alone turns into several, a
    lone surrogate. Only for configs with one conversion in their chain (t2s); None otherwise or
    when the installed dictionaries are not the recorded ones."""

    def __init__(self, config: str, recorded: dict[str, object]):
        convert = _opencc.converter(config).convert  # type: ignore[attr-defined]
        self.table = np.arange(0x110000, dtype=np.uint32)
        self.unsafe = np.zeros(0x110000, dtype=bool)
        for c in str(recorded["chars"]):
            out = convert(c)
            if len(out) == 1 and not LATIN_LETTERS.match(c) and not LATIN_LETTERS.match(out):
                self.table[ord(c)] = ord(out)  # (never a Latin letter: see to_simplified_batch)
            else:
                self.unsafe[ord(c)] = True
        self.unsafe[IDS_OPERATORS[0] : IDS_OPERATORS[1]] = True
        self.unsafe[IDS_EXTRA] = True
        self.unsafe[0xD800:0xE000] = True
        self.unsafe[[ord(c) for c in str(recorded["normalization"])]] = True
        phrases = [str(p) for p in recorded["phrases"]]  # type: ignore[attr-defined]
        self.first = np.zeros(0x110000, dtype=bool)
        self.first[[ord(p[0]) for p in phrases]] = True
        self.pairs = np.unique(np.array([ord(p[0]) << 21 | ord(p[1]) for p in phrases], dtype=np.uint64))

    @staticmethod
    @lru_cache(maxsize=8)
    def of(config: str) -> CharMap | None:
        recorded = _recorded(config)
        if recorded is None or "phrases" not in recorded:
            return None
        path = _opencc.config_path(config)
        try:
            chain = json.loads(path.read_text(encoding="utf-8")).get("conversion_chain", []) if path else []
        except (OSError, ValueError):
            return None
        return CharMap(config, recorded) if len(chain) == 1 else None

    def convert_marked(self, segments: list[str], convert) -> tuple[list[str], list[bool]]:  # type: ignore[no-untyped-def]
        """``[convert(s) for s in segments]`` (the table for the segments it converts exactly,
        ``_convert_all``, OpenCC, for the others), and per segment whether the table converted it
        (then its Latin letters are as they were)."""
        joined = "\x00".join(segments)
        cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        cuts = np.flatnonzero(cps == 0)
        if len(cuts) != len(segments) - 1:  # a segment holds "\x00": OpenCC for all
            return _convert_all(segments, convert), [False] * len(segments)
        flagged = np.flatnonzero(self.unsafe[cps])
        at = np.flatnonzero(self.first[cps[:-1]])
        if len(at):
            code = (cps[at].astype(np.uint64) << np.uint64(21)) | cps[at + 1].astype(np.uint64)
            hit = np.minimum(np.searchsorted(self.pairs, code), len(self.pairs) - 1)
            flagged = np.concatenate([flagged, at[self.pairs[hit] == code]])
        out = self.table[cps].tobytes().decode("utf-32-le", "surrogatepass").split("\x00")
        slow = np.unique(np.searchsorted(cuts, flagged)).tolist()
        by_table = [True] * len(segments)
        if slow:
            for i, text in zip(slow, _convert_all([segments[i] for i in slow], convert), strict=True):
                out[i] = text
                by_table[i] = False
        return out, by_table


def to_simplified(text: str, config: str) -> str:
    """Convert the CJK runs of ``text`` with OpenCC ``config``; protected spans are untouched."""
    return to_simplified_batch([text], config)[0]


def _segments(text: str) -> list[str]:
    """``text`` cut into segments to convert (even indices) and protected spans (odd indices)."""
    if not ("://" in text or "@" in text or "`" in text):
        return [text]
    out, last = [], 0
    for m in PROTECTED.finditer(text):
        out += [text[last : m.start()], m.group()]
        last = m.end()
    out.append(text[last:])
    return out


IDS_RE = re.compile("[\u2ff0-\u2fff\u31ef]")  # ideographic description characters


def _convert_all(segments: list[str], convert) -> list[str]:  # type: ignore[no-untyped-def]
    """``[convert(s) for s in segments]`` in one call: joined by newlines, which no OpenCC
    dictionary entry holds (so no phrase spans two segments) and which OpenCC leaves alone.
    A segment holding an ideographic description character is converted on its own: OpenCC
    keeps a whole description sequence unconverted, and one left incomplete at the end of a
    segment ("⿰漢") would take the newline and the next segment as its operands."""
    if len(segments) < 2:
        return [convert(s) for s in segments]
    alone = {i for i, s in enumerate(segments) if IDS_RE.search(s)}
    if alone:
        rest = [i for i in range(len(segments)) if i not in alone]
        out = [""] * len(segments)
        for i in alone:
            out[i] = convert(segments[i])
        for i, text in zip(rest, _convert_all([segments[i] for i in rest], convert), strict=True):
            out[i] = text
        return out
    lines = convert("\n".join(segments)).split("\n")
    counts = [s.count("\n") + 1 for s in segments]
    if len(lines) != sum(counts):  # never expected; convert one by one then
        return [convert(s) for s in segments]
    out, at = [], 0
    for n in counts:
        out.append("\n".join(lines[at : at + n]) if n > 1 else lines[at])
        at += n
    return out


def to_simplified_batch(texts: list[str], config: str, has_han: list[bool] | None = None) -> list[str]:
    """``to_simplified`` of every text, with one OpenCC call for the whole batch. ``has_han``
    (optional, per text): whether the text holds a Han character, when already known."""
    if config == "off":
        return list(texts)
    convert = _opencc.converter(config).convert  # type: ignore[attr-defined]
    pieces: list[list[str] | None] = []  # per text: its segments (None: one segment, or no Han)
    where: list[list[int]] = []  # per text of several segments, the ones to convert
    todo: list[str] = []
    kind: list[int] = []  # 0: no Han, 1: one segment, 2: several
    for i, text in enumerate(texts):
        if not (has_han[i] if has_han is not None else HAN_ANY.search(text) is not None):
            kind.append(0)
        elif not ("://" in text or "@" in text or "`" in text):  # one segment, holding Han
            kind.append(1)
            todo.append(text)
        else:
            segs = _segments(text)
            at = [k for k in range(0, len(segs), 2) if HAN_ANY.search(segs[k])]
            todo += [segs[k] for k in at]
            pieces.append(segs)
            where.append(at)
            kind.append(2)
    table = CharMap.of(config) if len(todo) > 1 else None
    if table is not None:
        done, by_table = table.convert_marked(todo, convert)
    else:
        done, by_table = _convert_all(todo, convert), [False] * len(todo)
    converted = iter(zip(done, by_table, strict=True))
    several = iter(zip(pieces, where, strict=True))
    out = []
    for text, k in zip(texts, kind, strict=True):
        if k == 0:
            out.append(text)
        elif k == 1:
            result, exact = next(converted)  # (the table leaves Latin letters alone)
            out.append(result if exact else _keep_latin(text, result, convert))
        else:
            segs, at = next(several)
            for j in at:
                result, exact = next(converted)
                segs[j] = result if exact else _keep_latin(segs[j], result, convert)
            out.append("".join(segs))
    return out


def _keep_latin(seg: str, done: str, convert) -> str:  # type: ignore[no-untyped-def]
    """``done`` (OpenCC's output for ``seg``), unless it changed Latin letters (tw2sp: B肝 ->
    乙肝): then the CJK runs between Latin words converted one by one."""
    if (
        done == seg
        or not LATIN_LETTERS.search(seg)
        or LATIN_LETTERS.findall(done) == LATIN_LETTERS.findall(seg)
    ):
        return done
    parts = LATIN_LETTERS.split(seg)  # odd indices are Latin words, left alone
    return "".join(p if j % 2 or not HAN_ANY.search(p) else convert(p) for j, p in enumerate(parts))


# -- 8. lines and paragraphs -------------------------------------------------------------------
TRAILING_SPACE = re.compile("[ \t\u3000]+$", re.MULTILINE)
BLANK_LINES = re.compile(r"\n{2,}")


@dataclass
class NormalizeParams:
    opencc: Literal["t2s", "tw2sp", "hk2s", "off"] = param(
        "t2s", help="Traditional->Simplified OpenCC config applied to CJK runs, or off"
    )
    width_fold: bool = param(True, help="fold full-width Latin letters, digits and symbols (CJK-safe)")
    unicode_form: Literal["NFC", "none"] = param("NFC", help="Unicode normalization form (never NFKC)")
    repair_mojibake: bool = param(True, help="repair recognisable mojibake (UTF-8 as Latin-1/GBK)")
    paragraph_separator: str = param("\n\n", help="what a run of blank lines becomes (newlines only)")
    strip_trailing_space: bool = param(True, help="remove spaces and tabs at the end of every line")

    def validate(self) -> None:
        if not self.paragraph_separator or set(self.paragraph_separator) != {"\n"}:
            raise ValueError("paragraph_separator must be one or more newlines, e.g. '\\n\\n' or '\\n'")


# Per-text flags from one vectorised pass over a batch: bit set = the text holds such a character.
F_ESC, F_AMP, F_NONASCII, F_SUSPECT, F_LATIN1, F_GBK_LEAD, F_HAN = (1 << i for i in range(7))
F_ALWAYS_FOLD, F_MARKS, F_LATIN, F_OPENCC = (1 << i for i in range(7, 11))  # marks: MARKS, BRACKETS
ALL_FLAGS = 0x7FF
MARKS_OR_BRACKETS = re.compile(f"[{_M}{BRACKETS}]")


@lru_cache(maxsize=4)
def _flag_table(opencc: str = "off") -> np.ndarray:
    """uint16 flags of every code point U+0000-U+10FFFF (the classes of the regexes they stand for).
    F_OPENCC: a trigger character of OpenCC config ``opencc`` (every Han character when they are
    not known)."""
    table = np.zeros(0x110000, dtype=np.uint16)
    bmp = "".join(map(chr, range(0x10000)))
    for flag, pattern in (
        (F_SUSPECT, SUSPECT),
        (F_LATIN1, LATIN1_HIGH),
        (F_GBK_LEAD, _utf8_as_gbk_lead()),
        (F_ALWAYS_FOLD, re.compile(f"[{ALWAYS_FOLD}]")),
        (F_MARKS, MARKS_OR_BRACKETS),
        (F_LATIN, LATIN_ALNUM_RE),
        (F_HAN, HAN_ANY),
    ):
        table[[m.start() for m in pattern.finditer(bmp)]] |= flag
    table[HAN_BEYOND_BMP] |= F_HAN  # the Han extensions beyond the BMP (HAN_ANY)
    table[0x80:] |= F_NONASCII
    table[0x1B] |= F_ESC
    table[ord("&")] |= F_AMP
    triggers = opencc_triggers(opencc) if opencc != "off" else ""
    if triggers is None:
        table[(table & F_HAN) != 0] |= F_OPENCC
    else:
        table[[ord(c) for c in triggers]] |= F_OPENCC
    return table


def batch_flags(texts: list[str], opencc: str = "off") -> list[int]:
    """The F_* flags of every text (lone surrogates included, as in the texts); F_OPENCC for
    OpenCC config ``opencc``."""
    if not texts:
        return []
    return flags_per_text(batch_chars(texts), _flag_table(opencc)).tolist()


# Classes for the quiet-text test: after the always-folded characters are folded (position by
# position), 1: Latin letter or digit, 2: neutral, 4: mark, 8: bracket, 16: whitespace a line
# may end with (space, tab, U+3000), 32: any whitespace.
Q_LATIN, Q_NEUTRAL, Q_MARK, Q_BRACKET, Q_TRAIL, Q_SPACE, Q_CJK, Q_LEAD = (1 << i for i in range(8))


@lru_cache(maxsize=1)
def _quiet_table() -> np.ndarray:
    """uint8 Q_* classes of every code point. Latin, neutral, mark, bracket and CJK-or-full-width
    as after the always-folded characters are folded (one character for one); Q_LEAD: a
    character UTF-8 read as GBK starts with."""
    table = np.zeros(0x110000, dtype=np.uint8)
    bmp = "".join(map(chr, range(0x10000)))
    folded = ALWAYS_FOLD_RUN.sub(lambda m: m.group().translate(ALWAYS_FOLD_TABLE), bmp)
    assert len(folded) == len(bmp)
    for flag, pattern in (
        (Q_LATIN, LATIN_ALNUM_RE),
        (Q_NEUTRAL, re.compile(f"[{NEUTRAL}]")),
        (Q_MARK, re.compile(f"[{_M}]")),
        (Q_BRACKET, re.compile(f"[{BRACKETS}]")),
        (Q_CJK, CJK_OR_FULLWIDTH),
    ):
        table[[m.start() for m in pattern.finditer(folded)]] |= flag
    table[HAN_BEYOND_BMP] |= Q_CJK  # Han beyond the BMP
    for c in " \t\u3000":
        table[ord(c)] |= Q_TRAIL
    table[[m.start() for m in re.finditer(r"\s", bmp)]] |= Q_SPACE
    table[[m.start() for m in _utf8_as_gbk_lead().finditer(bmp)]] |= Q_LEAD
    return table


def quiet_texts(
    texts: list[str], flags: list[int], strip_trailing_space: bool, ignore: int = 0
) -> tuple[list[bool], list[int]]:
    """Per text: (steps 1-8 can change it at most by NFC, so it stays as it is when it is NFC;
    its flags with F_MARKS cleared when step 6 cannot fold a mark or bracket in context and
    F_GBK_LEAD cleared when no two such leads are close enough for UTF-8-read-as-GBK mojibake).

    Quiet: none of the characters steps 1-5 and 7 act on, no always-folded character, no
    bracket, no mark that step 6 folds (a mark in a run of neutral characters and marks with a
    Latin letter or digit on one side and no CJK or full-width character on the other, or in a
    run too long to tell), no line ending in whitespace, no two newlines in a row, no newline
    first and no whitespace last. Flags in ``ignore`` (F_OPENCC: quiet but for step 7) do not
    make a text noisy."""
    bc = batch_chars(texts)
    cps, starts, doc = bc.cps, bc.starts, bc.doc
    n, size = len(texts), len(cps)
    q = _quiet_table()[cps]
    noisy = np.zeros(n, dtype=bool)
    # step 8
    newline = cps == 0x0A
    newline[starts[1:] - 1] = False  # the joining "\n"
    pair = newline[1:] & (newline[:-1] | ((q[:-1] & Q_TRAIL) != 0 if strip_trailing_space else False))
    noisy[doc[np.flatnonzero(pair)]] = True
    noisy |= newline[starts[:-1]]
    last = starts[1:] - 2
    noisy |= ((q[np.maximum(last, 0)] & Q_SPACE) != 0) & (last >= starts[:-1])
    # step 6: runs of neutral characters and marks (brackets count as neutral) holding a mark
    run = (q & (Q_NEUTRAL | Q_MARK | Q_BRACKET)) != 0
    begin = run.copy()
    begin[1:] &= ~run[:-1]
    stop = run.copy()
    stop[:-1] &= ~run[1:]
    first = np.flatnonzero(begin)
    end = np.flatnonzero(stop)
    marks = np.flatnonzero((q & Q_MARK) != 0)
    marked = np.zeros(len(first), dtype=bool)
    marked[np.searchsorted(first, marks, side="right") - 1] = True  # (every mark is in a run)
    with_mark = np.flatnonzero(marked)
    context = (np.bitwise_or.reduceat(q, starts[:-1]) & Q_BRACKET) != 0
    if len(with_mark):
        s, e = first[with_mark], end[with_mark]
        before = np.where(s > 0, q[np.maximum(s - 1, 0)], 0)
        after = np.where(e + 1 < size, q[np.minimum(e + 1, size - 1)], 0)
        fold = ((before & Q_LATIN) != 0) & ((after & Q_CJK) == 0)
        fold |= ((after & Q_LATIN) != 0) & ((before & Q_CJK) == 0)
        fold |= e - s + 1 > 64  # a long run: the bounded patterns may stop inside it
        context[doc[s[fold]]] = True
    noisy |= context
    # step 2: two mojibake leads at most four characters apart
    leads = np.flatnonzero((q & Q_LEAD) != 0)
    close = np.zeros(n, dtype=bool)
    close[doc[leads[:-1][np.diff(leads) <= 4]]] = True
    keep = (F_ESC | F_AMP | F_SUSPECT | F_LATIN1 | F_GBK_LEAD | F_ALWAYS_FOLD | F_OPENCC) & ~ignore
    adjusted = [
        f & ~((0 if c else F_MARKS) | (0 if g else F_GBK_LEAD))
        for f, c, g in zip(flags, context.tolist(), close.tolist(), strict=True)
    ]
    quiet = [not (f & keep) and not loud for f, loud in zip(adjusted, noisy.tolist(), strict=True)]
    return quiet, adjusted


class Normalizer:
    """The normalization of the module docstring as a callable: ``text -> (text, events)``.

    ``prepare`` runs steps 1-6, ``finish`` step 8; step 7 (OpenCC) is ``to_simplified_batch``
    between them, so that a batch needs one OpenCC call. ``flags`` (from ``batch_flags``) let
    ``prepare`` skip the scans for characters a text does not hold; once a step has changed the
    text they no longer hold and the scans run as usual.
    """

    def __init__(self, params: NormalizeParams):
        self.p = params
        self.separator = params.paragraph_separator
        # a run of blank lines only needs rewriting when it differs from the separator
        self.blank_probe = "\n\n\n" if self.separator == "\n\n" else "\n\n"

    def __call__(self, text: str) -> tuple[str, dict[str, int]]:
        text, events, convert, has_han = self.prepare(text)
        if convert:
            converted = to_simplified_batch([text], self.p.opencc, [has_han])[0]
            if converted != text:
                events["opencc_changed"] = 1
                text = converted
        return self.finish(text), events

    def prepare(self, text: str, flags: int = ALL_FLAGS) -> tuple[str, dict[str, int], bool, bool]:
        """Steps 1-6: (text, events, whether step 7 applies, whether OpenCC may change the text:
        it holds a Han character and, as far as ``flags`` tell, a trigger character)."""
        p = self.p
        events: dict[str, int] = {}
        if flags & F_ESC and "\x1b" in text:
            stripped = ANSI.sub("", text)
            if stripped != text:
                events["ansi_removed"] = 1
                text = stripped
                flags = ALL_FLAGS
        if flags & F_AMP and "&" in text and CHAR_REF.search(text):
            text = decode_char_refs(text)
            events["char_refs_decoded"] = 1
            flags = ALL_FLAGS
        ascii_only = not flags & F_NONASCII or text.isascii()
        if flags & F_SUSPECT and SUSPECT.search(text):
            text = NEWLINES.sub("\n", text)
            cleaned = CONTROLS_AND_INVISIBLE.sub("", text)
            if len(cleaned) != len(text):
                events["invisible_removed"] = len(text) - len(cleaned)
                if "&" in cleaned:  # a removal may have joined a reference: "&#3\x0042;"
                    cleaned = decode_char_refs(cleaned)
            text = UNICODE_SPACES.sub(" ", cleaned)
            flags = ALL_FLAGS
        if p.repair_mojibake and not ascii_only:
            repaired, fixes = repair_mojibake(text, bool(flags & F_LATIN1), bool(flags & F_GBK_LEAD))
            if fixes:
                events["mojibake_repaired"] = fixes
                # a repair may decode to characters step 4 removes: clean again
                text = UNICODE_SPACES.sub(" ", CONTROLS_AND_INVISIBLE.sub("", NEWLINES.sub("\n", repaired)))
                flags = ALL_FLAGS
        if ascii_only:
            return text, events, False, False
        if p.unicode_form == "NFC" and not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
            events["nfc_changed"] = 1
            flags = ALL_FLAGS
        if p.width_fold and flags & (F_ALWAYS_FOLD | F_MARKS):
            folded = fold_width(
                text, bool(flags & F_ALWAYS_FOLD), bool(flags & F_MARKS), bool(flags & F_LATIN)
            )
            if folded != text:
                events["width_folded"] = 1
                text = folded
                flags = ALL_FLAGS
                if p.repair_mojibake:  # folding can complete a mojibake run ("éÃＢ" -> "éÃB"):
                    text = self._repair_after_fold(text, events)  # repair it now, not on a rerun
        # OpenCC runs on texts with Han characters; one without a trigger character comes out as
        # it went in (all flags set: not known, look)
        may_change = flags == ALL_FLAGS or (flags & F_HAN and flags & F_OPENCC)
        return text, events, p.opencc != "off", bool(may_change) and HAN_ANY.search(text) is not None

    def _repair_after_fold(self, text: str, events: dict[str, int]) -> str:
        """Mojibake repair again on a width-folded text, then NFC and folding of what it decoded
        (so normalizing the result once more changes nothing)."""
        repaired, fixes = repair_mojibake(text)
        if not fixes:
            return text
        events["mojibake_repaired"] = events.get("mojibake_repaired", 0) + fixes
        text = UNICODE_SPACES.sub(" ", CONTROLS_AND_INVISIBLE.sub("", NEWLINES.sub("\n", repaired)))
        if self.p.unicode_form == "NFC":
            text = unicodedata.normalize("NFC", text)
        return fold_width(text, True, True, True)

    def finish(self, text: str) -> str:
        """Step 8: trailing spaces, blank-line runs, leading blank lines, trailing whitespace."""
        if self.p.strip_trailing_space and (" \n" in text or "\t\n" in text or "\u3000\n" in text):
            text = TRAILING_SPACE.sub("", text)
        if self.blank_probe in text:
            text = BLANK_LINES.sub(self.separator, text)
        return text.lstrip("\n").rstrip()


def normalize_text(text: str, **params: object) -> str:
    """Normalize one string with the given NormalizeParams fields (a convenience for tests/tools)."""
    return Normalizer(NormalizeParams(**params))(text)[0]  # type: ignore[arg-type]


@register
class Normalize(MapStage):
    """Unicode repair, CJK-safe width folding, OpenCC on CJK runs, newlines; empty -> dropped."""

    name = "normalize"
    Params = NormalizeParams

    def __init__(self, params: NormalizeParams):
        super().__init__(params)
        self._normalizer = Normalizer(params)

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        norm = self._normalizer
        p = self.params
        texts = [d.text for d in batch]
        wide = mostly_wide(texts)
        if wide is None:
            flags = batch_flags(texts, p.opencc)
            calm, flags = quiet_texts(texts, flags, p.strip_trailing_space, F_OPENCC) if batch else ([], [])
        else:  # ASCII-only texts take the per-text checks
            flags, calm = [ALL_FLAGS] * len(texts), [False] * len(texts)
            some = [texts[i] for i in wide]
            some_calm, some_flags = (
                quiet_texts(some, batch_flags(some, p.opencc), p.strip_trailing_space, F_OPENCC)
                if some
                else ([], [])
            )
            for i, q, f in zip(wide, some_calm, some_flags, strict=True):
                flags[i], calm[i] = f, q
        nfc = p.unicode_form == "NFC"
        is_nfc = unicodedata.is_normalized
        # calm: steps 1-6 and 8 leave the text as it is when it is NFC; quiet: so does step 7
        work = [
            i
            for i, (text, f, c) in enumerate(zip(texts, flags, calm, strict=True))
            if not c or f & F_OPENCC or (f & F_NONASCII and nfc and not is_nfc("NFC", text))
        ]  # the others: nothing to change
        convert = p.opencc != "off"
        prepared = [
            (texts[i], {}, convert, bool(flags[i] & F_HAN) and HAN_ANY.search(texts[i]) is not None)
            if calm[i] and (not nfc or unicodedata.is_normalized("NFC", texts[i]))
            else norm.prepare(texts[i], flags[i])
            for i in work
        ]  # (a calm NFC text: what prepare would return, without its checks)
        todo = [k for k, x in enumerate(prepared) if x[2] and x[3]]
        converted = to_simplified_batch([prepared[k][0] for k in todo], p.opencc, [True] * len(todo))
        done = [x[0] for x in prepared]
        for k, text in zip(todo, converted, strict=True):
            if text != done[k]:
                prepared[k][1]["opencc_changed"] = 1
                done[k] = text
        totals: dict[str, int] = {}
        changed = 0
        for i, text, (_, events, _, _) in zip(work, done, prepared, strict=True):
            text = norm.finish(text)
            doc = batch[i]
            if text != doc.text:
                changed += 1
                doc.text = text
            for k, v in events.items():
                totals[k] = totals.get(k, 0) + v
        ctx.stats.count("changed", changed)
        for k, v in totals.items():
            ctx.stats.count(k, v)
        return [doc if doc.text else Drop(doc, "empty") for doc in batch]
