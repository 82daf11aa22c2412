"""Which characters of a document are prose: code, tables, URLs and inline code are not (no stage
here).

``layout(bc)`` classifies every line of every text of a batch once (vectorised over the code
points of ``stages._charclass.BatchChars``, cached on it and narrowed with it when a filter drops
documents) and gives the positions of the characters that are not prose. The quality filters
(filter_script, filter_punctuation, filter_repetition) judge a document on its prose only.

A line is (first rule that applies):

- blank: only spaces and tabs.
- code, fenced: from a fence line to the next one, both included (an unclosed last fence opens
  nothing). A fence line starts with three backticks or exactly three tildes, followed by at most
  an info word without CJK (``python``, ``bash``); ``~~~~~~``, ``~~~ a sentence ~~~`` or
  a Chinese sentence after three backticks is text.
- table: in a block (lines between blank lines) that holds two rows with letters or digits, or
  one and a rule, its rows and rules. A *rule* is a line without letters or digits made of at least 3 of
  ``- = + _ ~ * : . # |``, box-drawing characters and dashes (``+----+``, ``|---|:--:|``,
  ``====``, ``├──┼──┤``); a *row* starts with a column separator (``|``, ``│``, ``┃``, ``║``) or
  a box-drawing character and holds 3 or more separators (two columns at least), or holds one
  in a block whose rule holds one (``a | b`` under ``--|--``). A box drawn around text
  (``| text |`` between ``+----+``) and a rule or ``|||`` line standing alone are decorations, not
  tables.
- code, listing: a line without CJK characters that is a command line (starts with ``$ ``, ``% ``,
  ``>>> ``, or ``# `` followed by a lowercase command and no ``, ``: ``# This file is ...`` and
  ``# they are, ...`` are comments or headings), or follows a command line in its block (its
  output), or
  stands in a block where at least half the lines are code-like and one is a command or syntax
  line. Syntax line: no CJK and starts with one of ``{ } < @ / \\`` (not ``// words``: a
  comment of words is read as words), or ends with one of
  ``{ } ; \\ ( [ =``, or holds an operator (``==  !=  &&  ||  ->  =>  ::  :=  +=``) or
  ``name=value`` or ``name = value``, or at least 30% of its characters are code symbols
  (``{}[]()<>=;$\\/&^@%|*_~#`` and quotes). Code-like: a syntax or command line, or a line
  without letters and digits.
- code, markup: a line that is a single HTML / XML tag (``<details>``, ``</div>``, ``<!-- x -->``).
- prose: everything else (headings, list items, quotes, Chinese comments in code), and, outside
  fences, other lines of HTML or XML markup (``<tag``, ``</tag``, ``<!``) and mail headers
  (``Content-Type: ...``): markup and headers left in a text are judged as text.

Inside prose lines, Markdown link and image targets (``](...)``, not shown to a reader) are not
prose either. URLs (``scheme://`` up to a space, a quote, a bracket or a CJK character) are
``links`` and inline code between two backticks on one line (holding no CJK character: a span
of Chinese is read as text) is ``inline``: both are running text for the share of Chinese (a
page of links or of backticked words is not Chinese prose) and part of their sentence, but not
sentence characters themselves; inline code holds no words to repeat (a manual names its options
again and again), a URL does (a page repeating one URL is repetition).

Only texts holding one of the characters these rules look for (``LAYOUT_HINTS``, box drawing,
a tab) are analysed; every character of the other texts is prose.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from stages._charclass import ALNUM, HAN_MASK, SPACE, BatchChars, full_class_table

WORD, CJK, BLANKISH, SEP, RULE, CODESYM, HINT, OPCHAR = 1, 2, 4, 8, 16, 32, 64, 128
LAYOUT_HINTS = "|`$#%<>{}[]=;\\/@&^~*_+:"
SEPARATORS = "|\u2502\u2503\u2551"
RULE_CHARS = "-=+_~*:.#|\u2014\u2015\u2212"
CODE_SYMBOLS = "{}[]()<>=;$\\/&^@%|\"'`"
FIRST_CODE = "{}@/"
LAST_CODE = "{};\\([="
OPERATORS = ("==", "!=", "&&", "||", "->", "=>", "::", ":=", "+=")
OPERATOR_CHARS = "=!&|->:+"
CJK_RANGES = ((0x3040, 0x31FF), (0xAC00, 0xD7AF), (0x1100, 0x11FF))
URL_END = " \t\n\"'<>()[]{}`"
MAX_SCAN = 64  # indentation and URL scheme / length scans stop after this many characters
MAX_URL = 2048
MAX_CODE_LINE = 300  # non-space characters: a longer line is text, whatever it holds

BLANK_LINE, PROSE_LINE, CODE_LINE, TABLE_LINE = 0, 1, 2, 3


@lru_cache(maxsize=1)
def layout_table() -> np.ndarray:
    """uint8 bits of every code point: WORD (letter, digit, Han), CJK (Han, kana, hangul), BLANKISH
    (whitespace other than a line break), SEP, RULE, CODESYM, HINT (a reason to analyse a text),
    OPCHAR (a character of OPERATORS)."""
    cls = full_class_table()
    table = np.zeros(0x110000, dtype=np.uint8)
    han = HAN_MASK[cls]
    table[(cls == ALNUM) | han] |= WORD
    table[han] |= CJK
    for a, b in CJK_RANGES:
        table[a : b + 1] |= CJK | WORD
    table[cls == SPACE] |= BLANKISH
    table[0x0A] &= ~np.uint8(BLANKISH)
    for chars, bit in (
        (SEPARATORS, SEP),
        (RULE_CHARS, RULE),
        (CODE_SYMBOLS, CODESYM),
        (LAYOUT_HINTS, HINT),
        (OPERATOR_CHARS, OPCHAR),
    ):
        table[[ord(c) for c in chars]] |= bit
    table[0x2500:0x2580] |= RULE | HINT  # box drawing
    table[0x09] |= HINT
    return table


@lru_cache(maxsize=1)
def _operator_table() -> np.ndarray:
    """bool [128, 128]: the two ASCII characters form an operator of OPERATORS."""
    t = np.zeros((128, 128), dtype=bool)
    for op in OPERATORS:
        t[ord(op[0]), ord(op[1])] = True
    return t


@lru_cache(maxsize=1)
def _url_end_table() -> np.ndarray:
    t = np.zeros(0x110000, dtype=bool)
    t[[ord(c) for c in URL_END]] = True
    t |= (layout_table() & CJK) != 0
    t[0x3000:0x3040] = True  # CJK punctuation
    t[0xFF00:0xFF10] = True
    return t


class Layout:
    """Line kinds and non-prose characters of a batch (see the module docstring).

    nonprose: sorted int64 positions in ``bc.cps`` of the characters of code and table lines and
    of Markdown link targets in prose lines; links: those of URLs in prose lines; inline: those of
    inline code in prose lines (empty arrays when there are none). line_doc / line_start /
    line_kind: the lines of the analysed texts (text index, position of the first character in
    ``bc.cps``, BLANK_LINE ... TABLE_LINE), in order; texts not analysed have no entry (all their
    lines are prose or blank).
    """

    def __init__(
        self,
        nonprose: np.ndarray,
        links: np.ndarray,
        inline: np.ndarray,
        line_doc: np.ndarray,
        line_start: np.ndarray,
        line_kind: np.ndarray,
    ):
        self.nonprose = nonprose
        self.links = links
        self.inline = inline
        self.line_doc = line_doc
        self.line_start = line_start
        self.line_kind = line_kind

    @property
    def not_sentence_chars(self) -> np.ndarray:
        """Sorted positions of ``nonprose``, ``links`` and ``inline`` together (not sentences)."""
        if not len(self.links) and not len(self.inline):
            return self.nonprose
        return np.union1d(np.union1d(self.nonprose, self.links), self.inline)

    @property
    def no_words(self) -> np.ndarray:
        """Sorted positions of ``nonprose`` and ``inline`` together (no words to repeat)."""
        if not len(self.inline):
            return self.nonprose
        return np.union1d(self.nonprose, self.inline)

    def kinds_of(self, i: int) -> np.ndarray | None:
        """Kinds of the lines of text ``i`` (one per ``text.split("\\n")``), None if not analysed."""
        a, b = np.searchsorted(self.line_doc, [i, i + 1])
        return self.line_kind[a:b] if b > a else None

    def subset(self, keep: np.ndarray, old_starts: np.ndarray, new_starts: np.ndarray) -> Layout:
        """The layout of the texts where ``keep`` is set (their offsets ``new_starts``)."""
        new_index = np.cumsum(keep) - 1
        kept_starts = np.append(new_starts[:-1], 0)  # (a 0 for the texts before the first kept one)
        shift = old_starts[:-1] - kept_starts[new_index]

        def narrow(at: np.ndarray) -> np.ndarray:
            doc_of = np.searchsorted(old_starts, at, side="right") - 1
            kept = keep[doc_of]
            return at[kept] - shift[doc_of[kept]]

        lines = keep[self.line_doc]
        ld = self.line_doc[lines]
        return Layout(
            narrow(self.nonprose),
            narrow(self.links),
            narrow(self.inline),
            new_index[ld],
            self.line_start[lines] - shift[ld],
            self.line_kind[lines],
        )


def layout(bc: BatchChars) -> Layout:
    """The Layout of the batch, computed once per BatchChars (kept by ``BatchChars.subset``)."""
    cached = bc.__dict__.get("layout")
    if cached is None:
        cached = bc.__dict__["layout"] = _compute(bc)
    return cached


def prose_counts(bc: BatchChars) -> np.ndarray:
    """``bc.counts`` (characters of each class per text) without the ``nonprose`` characters."""
    counts = bc.counts
    at = layout(bc).nonprose
    if not len(at):
        return counts
    n = len(bc.texts)
    k = counts.shape[1]
    flat = bc.doc[at] * k + bc.cls[at]
    return counts - np.bincount(flat, minlength=n * k).reshape(n, k)


def _compute(bc: BatchChars) -> Layout:
    empty = np.zeros(0, dtype=np.int64)
    nothing = Layout(empty, empty, empty, empty, empty, np.zeros(0, dtype=np.uint8))
    n_texts = len(bc.texts)
    if not n_texts:
        return nothing
    bits_all = layout_table()[bc.cps]
    hinted = np.flatnonzero(np.bitwise_or.reduceat(bits_all, bc.starts[:-1]) & HINT)
    if not len(hinted):
        return nothing
    # the analysed texts' code points, concatenated (each still ends with its "\n")
    spans = np.diff(bc.starts)
    if len(hinted) == n_texts:
        positions = None
        c, bits = bc.cps, bits_all
        sub_starts = bc.starts
    else:
        take = np.zeros(n_texts, dtype=bool)
        take[hinted] = True
        positions = np.repeat(take, spans)
        c, bits = bc.cps[positions], bits_all[positions]
        sub_starts = np.concatenate([[0], np.cumsum(spans[hinted])])
    ua, ub, ta, tb = _urls(c)
    url_at = _positions(np.concatenate([ua, ta]), np.concatenate([ub, tb]))
    line_kind, line_start, line_end, line_doc = _classify_lines(c, bits, sub_starts, url_at)
    prose_line = line_kind == PROSE_LINE
    other = ~prose_line & (line_kind != BLANK_LINE)

    def in_prose_lines(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ok = prose_line[np.searchsorted(line_start, a, side="right") - 1]
        return a[ok], b[ok]

    ca, cb = in_prose_lines(*_inline_code(c, bits, line_start))
    ta, tb = in_prose_lines(ta, tb)
    a = np.concatenate([line_start[other], ta])
    b = np.concatenate([line_end[other], tb])
    nonprose = _positions(a, b)
    links = _positions(*in_prose_lines(ua, ub))
    inline = _positions(ca, cb)
    # back to positions of the whole batch
    doc = hinted[line_doc]
    if positions is not None:
        shift = bc.starts[hinted] - sub_starts[:-1]
        nonprose = nonprose + shift[np.searchsorted(sub_starts, nonprose, side="right") - 1]
        links = links + shift[np.searchsorted(sub_starts, links, side="right") - 1]
        inline = inline + shift[np.searchsorted(sub_starts, inline, side="right") - 1]
        line_start = line_start + shift[line_doc]
    return Layout(nonprose, links, inline, doc.astype(np.int64), line_start, line_kind)


def _positions(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted int64 positions inside one of the intervals [a, b) (which may overlap), in time
    proportional to the positions, not to the text."""
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(a, kind="stable")
    a, b = a[order].astype(np.int64), b[order].astype(np.int64)
    reach = np.maximum.accumulate(b)
    new = np.concatenate([[True], a[1:] > reach[:-1]])  # an interval that starts a merged run
    starts = a[new]
    ends = reach[np.concatenate([np.flatnonzero(new)[1:] - 1, [len(a) - 1]])]
    lengths = np.maximum(ends - starts, 0)
    total = int(lengths.sum())
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, lengths)


def _inside(at: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """bool per element of ``at``: it is one of the sorted ``positions``."""
    if not len(positions):
        return np.zeros(len(at), dtype=bool)
    i = np.minimum(np.searchsorted(positions, at), len(positions) - 1)
    return positions[i] == at


@lru_cache(maxsize=32)
def _char_set(chars: str) -> np.ndarray:
    """bool per code point: one of ``chars``."""
    t = np.zeros(0x110000, dtype=bool)
    t[[ord(ch) for ch in chars]] = True
    return t


@lru_cache(maxsize=1)
def _not_space() -> np.ndarray:
    """bool per code point: anything but a space or a tab (where indentation scans stop)."""
    t = np.ones(0x110000, dtype=bool)
    t[[0x20, 0x09]] = False
    return t


@lru_cache(maxsize=1)
def _count_tables() -> tuple[np.ndarray, np.ndarray]:
    """int64 [256] per layout bits, two line counts packed in 21-bit fields each: (non-space,
    WORD, CJK) and (SEP, RULE, CODESYM). A line holds fewer than 2**21 characters (filter_length
    drops longer texts by default; a longer line only makes its counts wrong)."""
    b = np.arange(256)
    first = (b & BLANKISH == 0) + ((b & WORD != 0) << 21) + ((b & CJK != 0) << 42)
    second = (b & SEP != 0) + ((b & RULE != 0) << 21) + ((b & CODESYM != 0) << 42)
    return first.astype(np.int64), second.astype(np.int64)


def _unpack(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mask = (1 << 21) - 1
    return packed & mask, (packed >> 21) & mask, packed >> 42


def _scan(c: np.ndarray, at: np.ndarray, step: int, stop: np.ndarray, limit: int) -> np.ndarray:
    """For each start in ``at``: how many characters from it (step +1 forward, -1 backward)
    before one whose ``stop[code point]`` is set, at most ``limit``."""
    n = np.zeros(len(at), dtype=np.int64)
    active = np.flatnonzero(~stop[c[at]]) if len(at) else at
    last = len(c) - 1
    while len(active):
        n[active] += 1
        if n[active[0]] >= limit:
            break
        pos = np.clip(at[active] + step * n[active], 0, last)
        active = active[~stop[c[pos]]]
    return n


def _classify_lines(
    c: np.ndarray, bits: np.ndarray, starts: np.ndarray, url_at: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(kind, start, end, text index) of every line of the texts in ``c`` (each text ends with
    "\\n"; ``starts`` their offsets): end is the position of the line's "\\n". ``url_at``:
    sorted positions inside URLs (their symbols make no line code-like)."""
    line_end = np.flatnonzero(c == 0x0A)
    line_start = np.concatenate([[0], line_end[:-1] + 1])
    line_doc = np.searchsorted(starts, line_start, side="right") - 1
    n_lines = len(line_start)

    first_table, second_table = _count_tables()
    nonspace, word, cjk = _unpack(np.add.reduceat(first_table[bits], line_start))
    sep, rule, codesym = _unpack(np.add.reduceat(second_table[bits], line_start))
    nonspace -= 1  # (not the "\n")
    if len(url_at):
        in_url_symbol = url_at[(bits[url_at] & CODESYM) != 0]
        codesym -= np.bincount(
            np.searchsorted(line_start, in_url_symbol, side="right") - 1, minlength=n_lines
        )
    blank = nonspace == 0
    stop_space = _not_space()
    indent = _scan(c, line_start, 1, stop_space, MAX_SCAN)
    first_at = np.minimum(line_start + indent, line_end)
    trailing = _scan(c, np.maximum(line_end - 1, 0), -1, stop_space, MAX_SCAN)
    last_at = np.maximum(line_end - 1 - trailing, line_start)
    last = len(c) - 1
    c0 = c[first_at]
    c1 = c[np.minimum(first_at + 1, last)]
    c2 = c[np.minimum(first_at + 2, last)]
    c3 = c[np.minimum(first_at + 3, last)]
    cl = c[last_at]

    def isin(x: np.ndarray, chars: str) -> np.ndarray:
        return _char_set(chars)[x]

    # tables
    bare = ~blank & (word == 0)
    is_rule = bare & (rule == nonspace) & (rule >= 3)
    block = np.cumsum(blank | np.concatenate([[True], line_doc[1:] != line_doc[:-1]]))
    block_rule = np.zeros(block[-1] + 1, dtype=bool)
    block_rule[block[is_rule]] = True
    block_sep_rule = np.zeros(block[-1] + 1, dtype=bool)
    block_sep_rule[block[is_rule & (sep > 0)]] = True
    bordered = isin(c0, SEPARATORS) | ((c0 >= 0x2500) & (c0 < 0x2580))
    row = ((sep >= 3) & bordered) | ((sep >= 1) & block_sep_rule[block])
    content_rows = np.bincount(block[row & (word > 0)], minlength=block[-1] + 1)
    table_block = (content_rows >= 2) | ((content_rows >= 1) & block_rule)
    table = ~blank & (is_rule | row) & table_block[block]
    # fenced code: pairs of fence lines within a text
    tilde3 = (c0 == 0x7E) & (c1 == 0x7E) & (c2 == 0x7E) & (c3 != 0x7E)
    fence = ((c0 == 0x60) & (c1 == 0x60) & (c2 == 0x60)) | tilde3
    inner_space = (line_end - line_start - nonspace) - indent - trailing
    fence &= ~blank & (inner_space <= 1) & ~isin(cl, "~")  # "~~~ a sentence ~~~" is a decoration
    fence &= cjk == 0  # an info word is ASCII: "```再运行一次。" is text that starts with backticks
    fence |= (nonspace == 3) & tilde3
    in_fence = np.zeros(n_lines, dtype=bool)
    if fence.any():
        doc_first = np.searchsorted(line_doc, np.arange(len(starts) - 1))
        ordinal = np.cumsum(fence) - fence  # fences before this line, whole batch
        before_doc = ordinal[doc_first]
        k = ordinal - before_doc[line_doc]  # fences before this line in its text
        total = np.bincount(line_doc[fence], minlength=len(starts) - 1)
        paired = fence & (k < total[line_doc] - total[line_doc] % 2)
        opened = np.cumsum(paired) - np.concatenate([[0], np.cumsum(paired)])[doc_first][line_doc]
        in_fence = (opened % 2 == 1) | paired
    # command lines and syntax lines
    no_cjk = cjk == 0
    lower_c2 = (c2 >= 0x61) & (c2 <= 0x7A)
    space_next = (c1 == 0x20) & (isin(c2, "./~_") | lower_c2 | ((c2 >= 0x41) & (c2 <= 0x5A)))
    # "# " is also a comment or a heading: a root prompt runs a lowercase command, and a comma
    # followed by a space is a sentence's ("# This file is licensed ...", "# they are, ...")
    comma = np.flatnonzero((c[:-1] == 0x2C) & (c[1:] == 0x20))
    comma_line = np.bincount(np.searchsorted(line_start, comma, side="right") - 1, minlength=n_lines)
    root = (c0 == 0x23) & (c1 == 0x20) & (isin(c2, "./~_") | lower_c2) & (comma_line == 0)
    prompt = (isin(c0, "$%") & space_next) | root
    prompt |= (c0 == 0x3E) & (c1 == 0x3E) & (c2 == 0x3E) & (c3 == 0x20)
    prompt &= no_cjk & ~blank
    ops = _operator_lines(c, bits, line_start, n_lines, url_at)
    comment = (c0 == 0x2F) & (c1 == 0x2F) & isin(c2, " \t/")  # "// words" is read as words
    syntax = (
        no_cjk
        & ~blank
        & ~bare
        & ((isin(c0, FIRST_CODE) & ~comment) | isin(cl, LAST_CODE) | ops | (codesym * 10 >= nonspace * 3))
    )
    letter_c1 = ((c1 | 0x20) >= 0x61) & ((c1 | 0x20) <= 0x7A)
    markup = (c0 == 0x3C) & (letter_c1 | isin(c1, "/!"))  # HTML / XML left in the text
    lt = np.flatnonzero(c == 0x3C)
    one_tag = (
        markup
        & (cl == 0x3E)
        & (np.bincount(np.searchsorted(line_start, lt, side="right") - 1, minlength=n_lines) == 1)
    )
    syntax &= ~markup & (nonspace <= MAX_CODE_LINE)
    syntax &= ~_header_lines(c, first_at, line_end, syntax & (c0 >= 0x41) & (c0 <= 0x5A))
    prompt &= nonspace <= MAX_CODE_LINE
    codeish = (prompt | syntax) & ~table & ~in_fence
    # blocks: at least half code-like lines, one of them a command or syntax line
    n_block = np.bincount(block[~blank & ~table], minlength=block[-1] + 1)
    n_code = np.bincount(block[codeish], minlength=block[-1] + 1)
    n_bare = np.bincount(block[bare & ~table], minlength=block[-1] + 1)
    code_block = (n_code >= 1) & ((n_code + n_bare) * 2 >= n_block)
    seen = np.maximum.accumulate(np.where(prompt, block, -1))
    after_prompt = seen == block
    sentence_end = isin(cl, ".!?")
    joined = (after_prompt | code_block[block]) & ~sentence_end
    code = in_fence | one_tag | (~table & ~blank & no_cjk & ~markup & (prompt | syntax | joined))
    kind = np.full(n_lines, PROSE_LINE, dtype=np.uint8)
    kind[blank] = BLANK_LINE
    kind[table & ~in_fence] = TABLE_LINE
    kind[code] = CODE_LINE
    return kind, line_start, line_end, line_doc


HEADER = re.compile(r"[A-Z][A-Za-z0-9-]*: ")


def _header_lines(
    c: np.ndarray, first_at: np.ndarray, line_end: np.ndarray, candidates: np.ndarray
) -> np.ndarray:
    """bool per line: one of ``candidates`` that starts like a mail header (``Content-Type: ...``)."""
    out = np.zeros(len(first_at), dtype=bool)
    for i in np.flatnonzero(candidates).tolist():
        a = int(first_at[i])
        head = c[a : min(int(line_end[i]), a + 80)].tobytes().decode("utf-32-le", "replace")
        out[i] = HEADER.match(head) is not None
    return out


def _operator_lines(
    c: np.ndarray, bits: np.ndarray, line_start: np.ndarray, n_lines: int, url_at: np.ndarray
) -> np.ndarray:
    """bool per line: holds, outside URLs, an operator of OPERATORS or ``name=value`` (a letter,
    digit, ``_``, ``]`` or ``)`` before ``=``, no space after it)."""
    at = np.flatnonzero(bits & OPCHAR)
    at = at[at + 1 < len(c)]
    at = at[~_inside(at, url_at)]
    out = np.zeros(n_lines, dtype=bool)
    if not len(at):
        return out
    a, b = c[at], c[at + 1]
    ascii_pair = (a < 128) & (b < 128)
    hit = np.zeros(len(at), dtype=bool)
    hit[ascii_pair] = _operator_table()[a[ascii_pair], b[ascii_pair]]
    eq = (a == 0x3D) & (at > 0)
    if eq.any():
        before = c[np.maximum(at[eq] - 1, 0)]
        word_before = ((layout_table()[before] & WORD) != 0) | _char_set("_])")[before]
        after = b[eq]
        hit[eq] |= word_before & ~_char_set(" \t\n=")[after]
        # name = value: a word character, one space, "=", one space, something
        spaced = at[eq]
        two_before = c[np.maximum(spaced - 2, 0)]
        two_after = c[np.minimum(spaced + 2, len(c) - 1)]
        hit[eq] |= (
            (before == 0x20)
            & (after == 0x20)
            & ((layout_table()[two_before] & WORD) != 0)
            & ~_char_set(" \t\n")[two_after]
        )
    lines = np.searchsorted(line_start, at[hit], side="right") - 1
    out[lines] = True
    return out


def _urls(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """[start, end) of every ``scheme://...`` URL, then of every Markdown link target ``](...)``."""
    bracket = np.flatnonzero(c[:-1] == 0x5D)
    bracket = bracket[c[bracket + 1] == 0x28]
    link_end = _scan(c, bracket + 2, 1, _url_end_table(), MAX_URL) if len(bracket) else bracket
    colon = np.flatnonzero(c == 0x3A)
    colon = colon[colon + 2 < len(c)]
    colon = colon[(c[colon + 1] == 0x2F) & (c[colon + 2] == 0x2F)]
    targets = (bracket + 1, bracket + 3 + link_end)
    if not len(colon):
        return colon, colon, *targets
    letter = np.zeros(0x110000, dtype=bool)
    letter[ord("a") : ord("z") + 1] = True
    letter[ord("A") : ord("Z") + 1] = True
    scheme = _scan(c, np.maximum(colon - 1, 0), -1, ~letter, 16)
    keep = scheme > 0
    start = (colon - scheme)[keep]
    length = _scan(c, colon[keep], 1, _url_end_table(), MAX_URL)
    return start, colon[keep] + length, *targets


def _inline_code(c: np.ndarray, bits: np.ndarray, line_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[start, end) of each pair of backticks (and what is between) on one line that holds no
    CJK character (a span holding CJK is read as text)."""
    tick = np.flatnonzero(c == 0x60)
    if len(tick) < 2:
        return tick[:0], tick[:0]
    line = np.searchsorted(line_start, tick, side="right") - 1
    first = np.concatenate([[True], line[1:] != line[:-1]])
    rank = np.arange(len(tick)) - np.maximum.accumulate(np.where(first, np.arange(len(tick)), 0))
    opening = (rank % 2 == 0)[:-1] & (line[1:] == line[:-1])
    at = np.flatnonzero(opening)
    a, b = tick[at], tick[at + 1] + 1
    cjk = np.concatenate([[0], np.cumsum((bits & CJK) != 0)])
    ascii_only = cjk[b] == cjk[a]
    return a[ascii_only], b[ascii_only]
