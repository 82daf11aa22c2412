"""Boilerplate line removal: navigation menus, copyright footers, read-more/share/login prompts
and advertising lines. Lines are removed from the document; a document left empty is dropped as
``boilerplate_only``.

The phrases come from the lexicon file stages/data/boilerplate.txt (categories nav, copyright,
prompt, ad; one phrase per line, case-insensitive; "re:" for a case-sensitive regular expression),
plus the file
given in ``lexicon`` and the ``extra`` phrases of the recipe. A line is removed when:

- nav: it splits on menu separators (| ｜ 丨 ¦ • · » › anywhere, / > - between spaces, two or
  more spaces, the ideographic space) into at least ``nav_min_items`` items of at most
  ``nav_max_item_chars`` characters, and one item is a [nav] word, or there are at least
  ``nav_min_items_without_word`` items made of words only: "首页 | 新闻 | 关于我们",
  "Home | About | Contact", "首页 > 新闻中心 > 正文".
- copyright / prompt / ad: it contains a phrase of the category and is at most
  ``max_line_width`` wide (CJK characters count 2: 50 is 25 Chinese or 50 Latin characters), or
  it contains two distinct phrases and is at most ``max_line_width_multi`` wide. Longer lines
  are prose that mentions the words and stay.
  ASCII phrases match whole words only ("act now" does not match "exact nowhere").

Counters: ``lines_removed.<category>`` and ``docs_changed``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from itertools import accumulate
from pathlib import Path
from typing import ClassVar

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import MapStage, RecipeError, StageContext, StageResult, param, register
from stages._charclass import batch_chars, mostly_wide
from stages._chars import CJK, CJK_RE, HAN_BEYOND_BMP
from stages._lines import tidy

CATEGORIES = ("nav", "copyright", "prompt", "ad")
# Menu separators: | ｜ 丨 ¦ • · » › anywhere; / > - only with spaces around (symbol separators);
# two or more spaces, an ideographic space, or one space between CJK characters (space separators,
# only for menus with a [nav] word).
SYMBOL_SEPARATORS = re.compile(r"\s*[|｜丨¦•·»›]\s*|\s+[/>-]\s+")
NAV_SEPARATORS = re.compile(
    f"\\s*[|｜丨¦•·»›]\\s*|\\s+[/>-]\\s+|[ \\t\\u3000]{{2,}}|\\u3000|(?<=[{CJK}]) (?=[{CJK}])"
)
NAV_SEPARATOR_HINT = re.compile(f"[|｜丨¦•·»›\\u3000]|\\s[/>-]\\s|[ \\t]{{2}}| (?<=[{CJK}] )(?=[{CJK}])")
SYMBOL_CHARS = re.compile(r"[|｜丨¦•·»›/>-]")  # every SYMBOL_SEPARATORS match holds one
# an item of a menu without a known nav word: words only, at least one letter
NAV_ITEM = re.compile(r"(?=.*[^\W\d_])[\w &'.]+$")


def _ascii_alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


def line_width(line: str) -> int:
    """Display width: CJK characters count 2, everything else 1."""
    return len(line) if line.isascii() else len(line) + len(CJK_RE.findall(line))


def parse_lexicon(text: str, where: str) -> dict[str, list[str]]:
    """{category: [phrase or 're:pattern']} from the lexicon file format."""
    out: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    category = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            category = line[1:-1].strip()
            if category not in out:
                valid = ", ".join(CATEGORIES)
                raise RecipeError(f"{where}:{n}: unknown category [{category}]; valid: {valid}")
            continue
        if category is None:
            raise RecipeError(f"{where}:{n}: phrase before any [category] header")
        out[category].append(line)
    return out


@lru_cache(maxsize=1)
def builtin_lexicon() -> dict[str, list[str]]:
    text = resources.files("stages").joinpath("data/boilerplate.txt").read_text(encoding="utf-8")
    return parse_lexicon(text, "stages/data/boilerplate.txt")


@dataclass
class BoilerplateParams:
    lexicon: str = param("", help="extra lexicon file (same format as stages/data/boilerplate.txt)")
    extra: dict[str, list[str]] = param({}, help="extra phrases per category, e.g. {ad: [加群]}")
    max_line_width: int = param(50, help="a line with one phrase is removed up to this width")
    max_line_width_multi: int = param(200, help="a line with two distinct phrases: up to this width")
    nav_min_items: int = param(3, help="menu items needed for a navigation line")
    nav_min_items_without_word: int = param(5, help="menu items needed when none is a [nav] word")
    nav_max_item_chars: int = param(12, help="longest menu item")

    def validate(self) -> None:
        bad = sorted(set(self.extra) - set(CATEGORIES))
        if bad:
            raise ValueError(f"extra: unknown categories {bad}; valid: {', '.join(CATEGORIES)}")
        for cat, phrases in self.extra.items():
            if not isinstance(phrases, list) or not all(isinstance(p, str) for p in phrases):
                raise ValueError(f"extra.{cat} must be a list of strings")
        if self.lexicon and not Path(self.lexicon).is_file():
            raise ValueError(f"lexicon {self.lexicon} does not exist")


class BoilerplateMatcher:
    """Finds boilerplate lines. Literal phrases go into one Aho-Corasick automaton (matched on the
    lower-cased text; ASCII phrases only at word boundaries), "re:" phrases into one
    case-sensitive regex."""

    def __init__(self, p: BoilerplateParams):
        import ahocorasick

        lex = {c: list(v) for c, v in builtin_lexicon().items()}
        if p.lexicon:
            for c, v in parse_lexicon(Path(p.lexicon).read_text(encoding="utf-8"), p.lexicon).items():
                lex[c] += v
        for c, v in p.extra.items():
            lex[c] += v
        self.p = p
        self.nav_words = {w.lower() for w in lex["nav"] if not w.startswith("re:")}
        self.automaton = ahocorasick.Automaton()
        patterns = []
        for cat in CATEGORIES[1:]:
            for phrase in lex[cat]:
                if phrase.startswith("re:"):
                    patterns.append(f"(?P<{cat}_{len(patterns)}>{phrase[3:]})")
                    continue
                key = phrase.lower()
                self.automaton.add_word(key, (cat, key, key.isascii() and key[:1].isalnum()))
        self.automaton.make_automaton()
        try:
            self.regex = re.compile("|".join(patterns)) if patterns else None
        except re.error as e:
            raise RecipeError(f"boilerplate: a 're:' phrase is not a valid regular expression: {e}") from None
        self.phrases = sorted({key for cat in CATEGORIES[1:] for key in map(str.lower, lex[cat])})
        self.phrases = [k for k in self.phrases if not k.startswith("re:")]
        self.nav_lookup = None  # an automaton of the [nav] words, unless Σ's two lower cases matter
        if any(self.nav_words) and not any("σ" in w or "ς" in w for w in self.nav_words):
            self.nav_lookup = ahocorasick.Automaton()
            for w in self.nav_words:
                if w:  # (an empty word never equals an item)
                    self.nav_lookup.add_word(w, w)
            self.nav_lookup.make_automaton()
        self.nav_run = re.compile(f"[^\\s|｜丨¦•·»›]{{{p.nav_max_item_chars + 1}}}")

    def hits(self, text: str) -> list[tuple[int, int, str, str]]:
        """(start, end, category, phrase) of every lexicon match in ``text``."""
        lower = text.lower()
        out = []
        for end, (cat, key, word) in self.automaton.iter(lower):
            start = end - len(key) + 1
            if word and (
                (start > 0 and _ascii_alnum(lower[start - 1]))
                or (end + 1 < len(lower) and _ascii_alnum(lower[end + 1]) and _ascii_alnum(lower[end]))
            ):
                continue
            out.append((start, end + 1, cat, key))
        if self.regex is not None:
            for m in self.regex.finditer(text):
                out.append((m.start(), m.end(), str(m.lastgroup).rsplit("_", 1)[0], m.group().lower()))
        return out

    def is_nav(self, line: str) -> bool:
        """A navigation menu: enough short word items between menu separators (see module doc)."""
        p = self.p
        line = line.strip()
        # every separator holds whitespace or a symbol separator: a longer run of other characters
        # lies inside one item, which is then too long
        if self.nav_run.search(line):
            return False
        # without a [nav] word (a [nav] item lower-cased is a piece of the lower-cased line) a menu
        # needs nav_min_items_without_word items, so that many symbol separators less one
        if (
            self.nav_lookup is not None
            and next(self.nav_lookup.iter(line.lower()), None) is None
            and len(SYMBOL_CHARS.findall(line)) < p.nav_min_items_without_word - 1
        ):
            return False
        items = [s for s in NAV_SEPARATORS.split(line) if s]
        if len(items) < p.nav_min_items or any(len(s) > p.nav_max_item_chars for s in items):
            return False
        if sum(s.lower() in self.nav_words for s in items) >= 1:
            return True
        items = [s.strip() for s in SYMBOL_SEPARATORS.split(line) if s.strip()]
        return len(items) >= p.nav_min_items_without_word and all(NAV_ITEM.match(s) for s in items)

    def categories(
        self, text: str, may_hit: bool = True, sep_lines: list[int] | None = None
    ) -> list[str | None]:
        """For each line of ``text`` (split on \\n), the category that makes it boilerplate, or None.
        Only lines holding a lexicon hit or a menu separator are looked at. ``may_hit=False``: the
        text holds no lexicon phrase; ``sep_lines``: the lines that may be menus (those holding
        enough menu separators), when already known (see ``prefilter``)."""
        lines = text.split("\n")
        result: list[str | None] = [None] * len(lines)
        hits = self.hits(text) if may_hit else []
        if sep_lines is None:
            starts = [0, *accumulate(len(line) + 1 for line in lines[:-1])]
            sep_lines = sorted(
                {bisect_right(starts, m.start()) - 1 for m in NAV_SEPARATOR_HINT.finditer(text)}
            )
        if not hits and not sep_lines:
            return result
        for i in sep_lines:
            if self.is_nav(lines[i]):
                result[i] = "nav"
        if not hits:
            return result
        starts = [0, *accumulate(len(line) + 1 for line in lines[:-1])]
        per_line: dict[int, set[tuple[str, str]]] = {}
        for start, _end, cat, key in hits:
            per_line.setdefault(bisect_right(starts, start) - 1, set()).add((cat, key))
        for i, found in per_line.items():
            if result[i] is not None:
                continue
            content = {(c, k) for c, k in found if c != "nav"}
            if not content:
                continue
            n = line_width(lines[i].strip())
            if n <= self.p.max_line_width or (len(content) >= 2 and n <= self.p.max_line_width_multi):
                result[i] = min(content)[0]
        return result

    def prefilter(self, texts: list[str]) -> list[tuple[bool, list[int] | None]]:
        """Per text: (may it hold a lexicon phrase, the lines that may be menus or None when
        unknown), from one vectorised pass over the batch (see ``BatchPrefilter``). A menu has
        ``nav_min_items`` items, so ``nav_min_items - 1`` separators, each holding a position
        where one can start: lines with fewer such positions are no menus."""
        prefilter = BatchPrefilter.of(self.phrases, self.regex is not None)
        return prefilter.run(texts, max(1, self.p.nav_min_items - 1))


class BatchPrefilter:
    """What ``BoilerplateMatcher.categories`` would find, narrowed for a batch with numpy.

    Lexicon: a text can only hold a phrase (in its lower-cased form) when it holds every
    character of it. Characters whose lower
    case is several characters or depends on the context (Σ), and characters beyond the BMP, send
    their text down the exact path; so do all texts when the lexicon has "re:" phrases.
    Menu separators: the positions where NAV_SEPARATOR_HINT can start a match; the lines holding
    one are the lines holding a match, unless a match can span a line break (a "\\n" before or
    after "/", ">" or "-"), when the regex runs as before.
    """

    _cache: ClassVar[dict[tuple[tuple[str, ...], bool], BatchPrefilter]] = {}

    def __init__(self, phrases: list[str], has_regex: bool):
        chars = sorted({c for ph in phrases for c in ph})
        index = {c: i for i, c in enumerate(chars)}
        self.force = len(chars)  # column of characters that always send the text down the exact path
        self.column = np.full(0x110000, -1, dtype=np.int32)
        self.column[0x10000:] = self.force
        bmp = "".join(map(chr, range(0x10000)))
        for i, ch in enumerate(bmp):
            low = ch.lower()
            if len(low) == 1:
                if low in index:
                    self.column[i] = index[low]
            elif any(c in index for c in low):  # U+0130 lowers to two characters
                self.column[i] = self.force
        if "σ" in index or "ς" in index:  # Σ lowers to σ or, at the end of a word, to ς
            self.column[ord("Σ")] = self.force
        self.phrase_columns = [np.array(sorted({index[c] for c in ph}), dtype=np.int64) for ph in phrases]
        self.always = has_regex or any(not ph for ph in phrases)  # no prefilter for the lexicon
        self.phrase_columns = [c.tolist() for c in self.phrase_columns]
        self.narrow: np.ndarray | None = None  # the column table after the first batch
        self.narrow_columns: list[list[int]] = []
        # 1 symbol separator, 2 "/", ">" or "-", 4 space or tab, 8 whitespace, 16 CJK
        kind = np.zeros(0x110000, dtype=np.uint8)
        for c in "|｜丨¦•·»›\u3000":
            kind[ord(c)] |= 1
        for c in "/>-":
            kind[ord(c)] |= 2
        for c in " \t":
            kind[ord(c)] |= 4
        kind[[m.start() for m in re.finditer(r"\s", bmp)]] |= 8
        kind[[m.start() for m in CJK_RE.finditer(bmp)]] |= 16
        kind[HAN_BEYOND_BMP] |= 16
        self.kind = kind

    def _narrow(self, docs_with: np.ndarray) -> None:
        """After the first batch: keep, for each phrase, the four characters fewest texts held (a
        text holding the phrase holds them too), so later batches look at fewer positions."""
        keep: dict[int, int] = {}
        narrow_columns = []
        for cols in self.phrase_columns:
            rare = sorted(cols, key=lambda c: (docs_with[c], c))[:4]
            narrow_columns.append([keep.setdefault(c, len(keep)) for c in rare])
        if len(keep) >= self.force:
            return
        remap = np.full(self.force + 1, -1, dtype=np.int32)
        remap[list(keep)] = list(keep.values())
        remap[self.force] = self.force
        self.narrow_columns = narrow_columns
        self.narrow = np.where(self.column >= 0, remap[self.column], -1).astype(np.int32)

    @classmethod
    def of(cls, phrases: list[str], has_regex: bool) -> BatchPrefilter:
        key = (tuple(phrases), has_regex)
        if key not in cls._cache:
            cls._cache[key] = cls(phrases, has_regex)
        return cls._cache[key]

    def run(self, texts: list[str], min_separators: int = 1) -> list[tuple[bool, list[int] | None]]:
        """Per text: (may it hold a lexicon phrase, its lines holding at least ``min_separators``
        positions where a menu separator can start, or None when unknown)."""
        bc = batch_chars(texts)
        cps, starts, n = bc.cps, bc.starts, len(texts)
        # lexicon
        if self.always or not self.phrase_columns:
            may_hit = np.full(n, self.always)
        else:
            column = self.column if self.narrow is None else self.narrow
            col = column[cps]
            at = np.flatnonzero(col >= 0)
            width = self.force + 1
            present = np.zeros(n * width, dtype=bool)
            present[bc.doc[at] * width + col[at]] = True
            present = present.reshape(n, width)
            # only phrases whose characters all occur somewhere in the batch need a look (no
            # matrix product: BLAS threads would spin on the cores the next stages need)
            anywhere = present.any(axis=0).tolist()
            may_hit = present[:, self.force].copy()
            columns = self.phrase_columns if self.narrow is None else self.narrow_columns
            for cols in columns:
                if all(anywhere[c] for c in cols):
                    may_hit |= present[:, cols].all(axis=1)
            if self.narrow is None:
                self._narrow(present.sum(axis=0))
        # menu separators: every position where one of NAV_SEPARATOR_HINT's branches matches
        kind = self.kind[cps]
        kind[starts[1:] - 1] = 0  # the joining "\n" belongs to no text
        start = (kind & 1) != 0
        blank = (kind & 4) != 0
        start[:-1] |= blank[:-1] & blank[1:]
        space = (kind & 8) != 0
        mid = np.zeros(len(cps), dtype=bool)
        mid[:-2] = space[:-2] & ((kind[1:-1] & 2) != 0) & space[2:]
        start |= mid
        cjk = (kind & 16) != 0
        start[1:-1] |= (cps[1:-1] == 0x20) & cjk[:-2] & cjk[2:]
        newline = cps == 0x0A
        newline[starts[1:] - 1] = False
        spanning = np.zeros(len(cps), dtype=bool)
        spanning[:-2] = mid[:-2] & (newline[:-2] | newline[2:])
        at = np.flatnonzero(start)
        doc = bc.doc[at]
        nl = np.flatnonzero(newline)
        line = np.searchsorted(nl, at) - np.searchsorted(nl, starts[doc])
        pairs = (doc << 32) | line  # (text, line) with a separator, in order
        if len(pairs):
            first = np.flatnonzero(np.concatenate([[True], pairs[1:] != pairs[:-1]]))
            enough = np.diff(np.append(first, len(pairs))) >= min_separators
            pairs = pairs[first[enough]]
        cut = np.searchsorted(pairs >> 32, np.arange(n + 1)).tolist()
        lines = (pairs & 0xFFFFFFFF).tolist()
        unsure = set(np.unique(bc.doc[np.flatnonzero(spanning)]).tolist())
        return [
            (h, None if i in unsure else lines[cut[i] : cut[i + 1]]) for i, h in enumerate(may_hit.tolist())
        ]


@register
class Boilerplate(MapStage):
    """Remove navigation, copyright, prompt and ad lines; documents left empty are dropped."""

    name = "boilerplate"
    Params = BoilerplateParams

    def __init__(self, params: BoilerplateParams):
        super().__init__(params)
        self.matcher = BoilerplateMatcher(params)

    def clean(
        self, text: str, removed: dict[str, int], may_hit: bool = True, sep_lines: list[int] | None = None
    ) -> str:
        """``text`` without its boilerplate lines; counts removals per category into ``removed``.
        ``may_hit`` / ``sep_lines``: what the batch prefilter knows (see ``categories``)."""
        if not may_hit and sep_lines is not None and not sep_lines:
            return text
        cats = self.matcher.categories(text, may_hit, sep_lines)
        if not any(cats):
            return text
        kept = []
        for line, cat in zip(text.split("\n"), cats, strict=True):
            if cat is None:
                kept.append(line)
            else:
                removed[cat] = removed.get(cat, 0) + 1
        return tidy("\n".join(kept))

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        out: list[StageResult] = []
        removed: dict[str, int] = {}
        changed = 0
        texts = [d.text for d in batch]
        wide = mostly_wide(texts)
        if wide is None:
            known = self.matcher.prefilter(texts) if batch else []
        else:  # mostly ASCII: the exact path for the ASCII texts
            known = [(True, None)] * len(texts)
            for i, k in zip(
                wide, self.matcher.prefilter([texts[i] for i in wide]) if wide else [], strict=True
            ):
                known[i] = k
        for doc, (may_hit, sep_lines) in zip(batch, known, strict=True):
            text = self.clean(doc.text, removed, may_hit, sep_lines)
            if text != doc.text:
                changed += 1
                doc.text = text
            out.append(doc if text else Drop(doc, "boilerplate_only"))
        for cat, n in removed.items():
            ctx.stats.count(f"lines_removed.{cat}", n)
        ctx.stats.count("docs_changed", changed)
        return out
