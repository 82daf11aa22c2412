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

from dataprep.document import Document, Drop
from dataprep.stage import MapStage, RecipeError, StageContext, StageResult, param, register
from stages._chars import CJK, CJK_RE
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
        items = [s for s in NAV_SEPARATORS.split(line) if s]
        if len(items) < p.nav_min_items or any(len(s) > p.nav_max_item_chars for s in items):
            return False
        if sum(s.lower() in self.nav_words for s in items) >= 1:
            return True
        items = [s.strip() for s in SYMBOL_SEPARATORS.split(line) if s.strip()]
        return len(items) >= p.nav_min_items_without_word and all(NAV_ITEM.match(s) for s in items)

    def categories(self, text: str) -> list[str | None]:
        """For each line of ``text`` (split on \\n), the category that makes it boilerplate, or None.
        Only lines holding a lexicon hit or a menu separator are looked at."""
        lines = text.split("\n")
        result: list[str | None] = [None] * len(lines)
        hits = self.hits(text)
        seps = [m.start() for m in NAV_SEPARATOR_HINT.finditer(text)]
        if not hits and not seps:
            return result
        starts = [0, *accumulate(len(line) + 1 for line in lines[:-1])]
        per_line: dict[int, set[tuple[str, str]]] = {}
        for start, _end, cat, key in hits:
            per_line.setdefault(bisect_right(starts, start) - 1, set()).add((cat, key))
        for i in sorted({bisect_right(starts, p) - 1 for p in seps}):
            if self.is_nav(lines[i]):
                result[i] = "nav"
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


@register
class Boilerplate(MapStage):
    """Remove navigation, copyright, prompt and ad lines; documents left empty are dropped."""

    name = "boilerplate"
    Params = BoilerplateParams

    def __init__(self, params: BoilerplateParams):
        super().__init__(params)
        self.matcher = BoilerplateMatcher(params)

    def clean(self, text: str, removed: dict[str, int]) -> str:
        """``text`` without its boilerplate lines; counts removals per category into ``removed``."""
        cats = self.matcher.categories(text)
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
        for doc in batch:
            text = self.clean(doc.text, removed)
            if text != doc.text:
                changed += 1
                doc.text = text
            out.append(doc if text else Drop(doc, "boilerplate_only"))
        for cat, n in removed.items():
            ctx.stats.count(f"lines_removed.{cat}", n)
        ctx.stats.count("docs_changed", changed)
        return out
