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

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import MapStage, StageContext, StageResult, param, register
from stages._charclass import batch_chars, flags_per_text, mostly_wide
from stages._chars import HAN_BEYOND_BMP, HAN_RE
from stages._opencc import opencc_triggers, to_simplified_batch
from stages._text_repair import (
    ANSI,
    CHAR_REF,
    CONTROLS_AND_INVISIBLE,
    LATIN1_HIGH,
    NEWLINES,
    SUSPECT,
    UNICODE_SPACES,
    decode_char_refs,
    repair_mojibake,
    utf8_as_gbk_lead,
)
from stages._width_fold import (
    ALWAYS_FOLD,
    ALWAYS_FOLD_RUN,
    ALWAYS_FOLD_TABLE,
    BRACKETS,
    CJK_OR_FULLWIDTH,
    LATIN_ALNUM_RE,
    MARKS,
    NEUTRAL,
    fold_width,
)

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
MARKS_OR_BRACKETS = re.compile(f"[{re.escape(MARKS)}{BRACKETS}]")


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
        (F_GBK_LEAD, utf8_as_gbk_lead()),
        (F_ALWAYS_FOLD, re.compile(f"[{ALWAYS_FOLD}]")),
        (F_MARKS, MARKS_OR_BRACKETS),
        (F_LATIN, LATIN_ALNUM_RE),
        (F_HAN, HAN_RE),
    ):
        table[[m.start() for m in pattern.finditer(bmp)]] |= flag
    table[HAN_BEYOND_BMP] |= F_HAN  # the Han extensions beyond the BMP (HAN_RE)
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
        (Q_MARK, re.compile(f"[{re.escape(MARKS)}]")),
        (Q_BRACKET, re.compile(f"[{BRACKETS}]")),
        (Q_CJK, CJK_OR_FULLWIDTH),
    ):
        table[[m.start() for m in pattern.finditer(folded)]] |= flag
    table[HAN_BEYOND_BMP] |= Q_CJK  # Han beyond the BMP
    for c in " \t\u3000":
        table[ord(c)] |= Q_TRAIL
    table[[m.start() for m in re.finditer(r"\s", bmp)]] |= Q_SPACE
    table[[m.start() for m in utf8_as_gbk_lead().finditer(bmp)]] |= Q_LEAD
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
        return text, events, p.opencc != "off", bool(may_change) and HAN_RE.search(text) is not None

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
            (texts[i], {}, convert, bool(flags[i] & F_HAN) and HAN_RE.search(texts[i]) is not None)
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
