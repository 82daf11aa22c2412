"""Steps 1-4 of ``normalize`` (see its docstring): ANSI escapes, mojibake, HTML character
references, newlines, control and invisible characters, Unicode spaces (no stage here).

``repair_mojibake`` and ``decode_char_refs`` are idempotent; the patterns are shared with
``lang_id``, which asks whether normalize would repair a text before judging it again.
"""

from __future__ import annotations

import contextlib
import re
from functools import lru_cache

from stages._chars import HAN_RE, utf8_as_gbk_chars

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
def _utf8_as_gbk_re() -> re.Pattern[str]:
    """Two mojibake lead characters at most three characters apart (real text rarely has them
    that close; mojibake has one every one or two characters). Bounded, so it stays linear."""
    lead = re.escape(utf8_as_gbk_chars())
    return re.compile(f"[{lead}][^\\x00-\\x7f\\s]{{0,3}}[{lead}]")


@lru_cache(maxsize=1)
def utf8_as_gbk_lead() -> re.Pattern[str]:
    """One character UTF-8 mojibake read as GBK starts with."""
    return re.compile(f"[{re.escape(utf8_as_gbk_chars())}]")


NON_ASCII_RUN = re.compile(r"[^\x00-\x7f\s]+")


def _fix_utf8_read_as_gbk(text: str) -> tuple[str, int]:
    fixed = 0
    close_leads, lead = _utf8_as_gbk_re(), utf8_as_gbk_lead()

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
