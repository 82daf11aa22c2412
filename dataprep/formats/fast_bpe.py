"""A tiktoken engine for byte-level BPE ``tokenizer.json`` files that gives the ids of ``tokenizers``.

:func:`build_engine` turns a tokenizer.json (parsed) into a :class:`TiktokenBPE`, or raises
:class:`Unsupported` with the reason. What is accepted:

* model: BPE over byte-level pieces, every one of the 256 byte symbols in the vocabulary, no
  byte_fallback, no dropout, no continuing_subword_prefix / end_of_word_suffix. With
  ``ignore_merges`` every byte-level vocabulary entry must be reachable by merges (tiktoken takes a
  whole piece as one token exactly when its bytes have a rank).
* normalizer: none, an empty Sequence, or exactly NFC (applied with :mod:`unicodedata` first).
* pre-tokenizer: ByteLevel (add_prefix_space off) using its GPT-2 regex, or Isolated Splits
  followed by ByteLevel(use_regex=False). Several Splits are combined into one regex when all but
  the last isolate runs of one character class (``K``, ``K+`` or ``K{1,n}``, classes disjoint),
  as in DeepSeek's tokenizer; see :func:`combined_pattern`.
* added tokens: special ones are plain text (the encoding contract); non-special ones split the
  text as in ``tokenizers`` (one leftmost-longest pass in Python before tiktoken) when none has
  lstrip / rstrip / single_word, there is no normalizer, and no special token can hide one (see
  :func:`_added_tokens`).
* no truncation or padding configured.

Ranks: the 256 single bytes get ranks 0..255, then each merge's result in merge-list order (a
result produced by several merges keeps its first rank); tiktoken's output ranks are mapped back to
the tokenizer's ids with a lookup array.

Regexes: ``tokenizers`` uses Oniguruma, tiktoken the Rust fancy-regex crate. Patterns are parsed
(a common subset: literals, classes, ``\\s \\S \\d \\D \\p{..} \\P{..}``, groups, ``(?i:..)``,
lookaheads, greedy and lazy quantifiers) and written again in Rust syntax; anchors, lookbehinds,
backreferences, possessive quantifiers, ``\\w`` / ``\\b`` (whose Unicode sets differ between the
two engines) and inline flags are refused. Identical ids are still checked on real text by the
caller (see :class:`dataprep.formats.tokenizer.HFTokenizer`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


class Unsupported(ValueError):
    """The tokenizer cannot be run by tiktoken with identical ids; the message says why."""


@functools.cache
def _to_latin1() -> dict[int, int]:
    """str.translate table: ByteLevel character -> the latin-1 character of its byte; other
    latin-1 characters -> one that latin-1 cannot encode."""
    table = dict.fromkeys(range(256), 0xFFFF)
    table.update({ord(c): b for b, c in byte_to_unicode().items()})
    return table


def _level_bytes(token: str) -> bytes | None:
    """The bytes a ByteLevel token stands for (None if it holds other characters)."""
    try:
        return token.translate(_to_latin1()).encode("latin-1")
    except UnicodeEncodeError:
        return None


@functools.cache
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


# -- regexes: an Oniguruma subset, parsed and written back in Rust syntax --------------------------


@dataclass
class _Atom:
    """One character out of a set; ``item`` is usable inside a Rust class, ``text`` stand-alone."""

    item: str
    text: str


@dataclass
class _Seq:
    items: list[Any]


@dataclass
class _Alt:
    items: list[Any]


@dataclass
class _Repeat:
    node: Any
    lo: int
    hi: int | None
    lazy: bool


@dataclass
class _Look:
    node: Any
    negative: bool


@dataclass
class _Caseless:
    node: Any


_ESCAPED_CHARS = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13, "a": 7, "e": 27}
_CLASS_ESCAPES = {"s", "S", "d", "D"}
_PROPERTY = re.compile(r"\{(\^?)([A-Za-z0-9_ =-]+)\}")
_QUANT = re.compile(r"\{(\d*)(,(\d*))?\}")


def _lit(c: str) -> str:
    """A literal character in Rust regex syntax (valid inside and outside classes)."""
    if c.isalnum() or (ord(c) > 0x7F and c.isprintable() and not c.isspace()):
        return c
    return f"\\x{{{ord(c):X}}}"


class _Parser:
    def __init__(self, pattern: str):
        self.p = pattern
        self.i = 0

    def fail(self, what: str) -> Unsupported:
        return Unsupported(f"regex {self.p!r}: {what} at offset {self.i}")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def parse(self) -> Any:
        node = self.alt()
        if self.i != len(self.p):
            raise self.fail("unbalanced ')'")
        return node

    def alt(self) -> Any:
        items = [self.seq()]
        while self.peek() == "|":
            self.i += 1
            items.append(self.seq())
        return items[0] if len(items) == 1 else _Alt(items)

    def seq(self) -> Any:
        items = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.quantified())
        return items[0] if len(items) == 1 else _Seq(items)

    def quantified(self) -> Any:
        node = self.atom()
        while True:
            c = self.peek()
            if c in ("?", "*", "+"):
                lo, hi = {"?": (0, 1), "*": (0, None), "+": (1, None)}[c]
                self.i += 1
            elif c == "{" and (m := _QUANT.match(self.p, self.i)) and (m.group(1) or m.group(3)):
                lo = int(m.group(1) or 0)
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                self.i = m.end()
            else:
                return node
            lazy = False
            if self.peek() == "?":
                lazy = True
                self.i += 1
            elif self.peek() == "+":
                raise self.fail("possessive quantifier")
            if isinstance(node, _Repeat | _Look):
                raise self.fail("quantifier on a quantifier or lookaround")
            node = _Repeat(node, lo, hi, lazy)

    def atom(self) -> Any:
        c = self.peek()
        if c == "(":
            return self.group()
        if c == "[":
            return self.cls()
        self.i += 1
        if c == ".":
            return _Atom("[^\\n]", "[^\\n]")
        if c in "^$":
            raise self.fail("anchor")
        if c in "*+?":
            raise self.fail("nothing to repeat")
        if c == "\\":
            return self.escape(in_class=False)
        return _Atom(_lit(c), _lit(c))

    def group(self) -> Any:
        self.i += 1
        if self.p.startswith("?:", self.i):
            self.i += 2
            wrap = None
        elif self.p.startswith("?=", self.i) or self.p.startswith("?!", self.i):
            wrap = self.p[self.i + 1]
            self.i += 2
        elif self.p.startswith("?i:", self.i):
            self.i += 3
            wrap = "i"
        elif self.peek() == "?":
            raise self.fail("unsupported group (lookbehind, atomic, named or inline flags)")
        else:
            wrap = None  # capturing group: same matches
        node = self.alt()
        if self.peek() != ")":
            raise self.fail("missing ')'")
        self.i += 1
        if wrap in ("=", "!"):
            return _Look(node, negative=wrap == "!")
        if wrap == "i":
            return _Caseless(node)
        return node

    def escape(self, in_class: bool) -> _Atom:
        c = self.peek()
        self.i += 1
        if c == "":
            raise self.fail("trailing backslash")
        if c in _CLASS_ESCAPES:
            return _Atom("\\" + c, "\\" + c)
        if c in "pP":
            m = _PROPERTY.match(self.p, self.i)
            if not m:
                raise self.fail("bad property")
            self.i = m.end()
            negated = (c == "P") != bool(m.group(1))
            esc = ("\\P{" if negated else "\\p{") + m.group(2) + "}"
            return _Atom(esc, esc)
        if c in _ESCAPED_CHARS:
            ch = chr(_ESCAPED_CHARS[c])
        elif c == "x":
            m = re.compile(r"\{([0-9A-Fa-f]{1,6})\}|([0-9A-Fa-f]{2})").match(self.p, self.i)
            if not m:
                raise self.fail("bad \\x escape")
            self.i = m.end()
            ch = chr(int(m.group(1) or m.group(2), 16))
        elif c == "u":
            m = re.compile(r"[0-9A-Fa-f]{4}").match(self.p, self.i)
            if not m:
                raise self.fail("bad \\u escape")
            self.i = m.end()
            ch = chr(int(m.group(0), 16))
        elif c.isascii() and not c.isalnum():
            ch = c
        else:
            raise self.fail(f"unsupported escape \\{c}")
        return _Atom(_lit(ch), _lit(ch))

    def class_char(self) -> str:
        """One literal character inside a class (for range ends)."""
        c = self.peek()
        if c == "\\":
            self.i += 1
            atom = self.escape(in_class=True)
            if atom.item.startswith("\\") and not atom.item.startswith("\\x{"):
                raise self.fail("class escape as a range end")
            return atom.item
        if c == "":
            raise self.fail("unterminated class")
        self.i += 1
        return _lit(c)

    def cls(self) -> _Atom:
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        if self.peek() == "]":
            raise self.fail("']' first in a class")
        items: list[str] = []
        while True:
            c = self.peek()
            if c == "":
                raise self.fail("unterminated class")
            if c == "]":
                self.i += 1
                break
            if c == "[" or self.p.startswith("&&", self.i):
                raise self.fail("nested class or class intersection")
            if c == "\\" and self.peek(1) in _CLASS_ESCAPES | {"p", "P"}:
                self.i += 1
                items.append(self.escape(in_class=True).item)
                continue
            start = self.class_char()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                items.append(f"{start}-{self.class_char()}")
            else:
                items.append(start)
        text = "[" + ("^" if negated else "") + "".join(items) + "]"
        return _Atom(text, text)


def parse_regex(pattern: str) -> Any:
    """Parse an Oniguruma pattern of the supported subset; Unsupported otherwise."""
    return _Parser(pattern).parse()


def _unit(s: str, node: Any) -> str:
    return s if isinstance(node, _Atom | _Look | _Caseless) else f"(?:{s})"


def emit(node: Any, within: str | None = None) -> str:
    """Rust syntax for ``node``; with ``within`` (a class) every character it consumes or looks at
    must also belong to that class, so matching stops at characters outside it as at a text end."""
    if isinstance(node, _Atom):
        return node.text if within is None else f"[{node.item}&&{within}]"
    if isinstance(node, _Seq):
        return "".join(
            _unit(emit(n, within), n) if isinstance(n, _Alt) else emit(n, within) for n in node.items
        )
    if isinstance(node, _Alt):
        return "|".join(emit(n, within) for n in node.items)
    if isinstance(node, _Repeat):
        if (node.lo, node.hi) == (0, 1):
            q = "?"
        elif node.hi is None:
            q = "*" if node.lo == 0 else ("+" if node.lo == 1 else f"{{{node.lo},}}")
        else:
            q = f"{{{node.lo}}}" if node.lo == node.hi else f"{{{node.lo},{node.hi}}}"
        return _unit(emit(node.node, within), node.node) + q + ("?" if node.lazy else "")
    if isinstance(node, _Look):
        return ("(?!" if node.negative else "(?=") + emit(node.node, within) + ")"
    if isinstance(node, _Caseless):
        return "(?i:" + emit(node.node, within) + ")"
    raise TypeError(node)


def can_match_empty(node: Any) -> bool:
    """Whether ``node`` may match the empty string (structurally; lookarounds assumed satisfiable)."""
    if isinstance(node, _Atom):
        return False
    if isinstance(node, _Seq):
        return all(can_match_empty(n) for n in node.items)
    if isinstance(node, _Alt):
        return any(can_match_empty(n) for n in node.items)
    if isinstance(node, _Repeat):
        return node.lo == 0 or can_match_empty(node.node)
    if isinstance(node, _Look):
        return True
    return can_match_empty(node.node)


@functools.cache
def _all_chars() -> str:
    """Every Unicode scalar value, in order."""
    codes = np.arange(0x110000, dtype=np.uint32)
    return codes[(codes < 0xD800) | (codes >= 0xE000)].tobytes().decode("utf-32-le")


def _members(cls: str, among: str | None = None) -> str:
    """The characters of ``among`` (default: every code point) matched by a one-character Rust
    pattern ``cls``, in order, computed with tiktoken's own regex engine."""
    from tiktoken import _tiktoken

    core = _tiktoken.CoreBPE({bytes([b]): b for b in range(256)}, {}, cls)
    return bytes(core.encode_ordinary(_all_chars() if among is None else among)).decode("utf-8")


def _can_consume(node: Any, within: str, members: str, caseless: bool = False) -> bool:
    """Whether ``node`` restricted to class ``within`` (whose characters are ``members``) can match
    a non-empty string."""
    if isinstance(node, _Atom):
        pat = f"[{node.item}&&{within}]"
        return bool(_members(f"(?i:{pat})" if caseless else pat, members))
    if isinstance(node, _Seq):
        ok = [(can_match_empty(n), _can_consume(n, within, members, caseless)) for n in node.items]
        return all(e or c for e, c in ok) and any(c for _, c in ok)
    if isinstance(node, _Alt):
        return any(_can_consume(n, within, members, caseless) for n in node.items)
    if isinstance(node, _Repeat):
        return node.hi != 0 and _can_consume(node.node, within, members, caseless)
    if isinstance(node, _Look):
        return False
    return _can_consume(node.node, within, members, caseless or isinstance(node, _Caseless))


def _run_class(node: Any) -> tuple[_Atom, int | None]:
    """(class, longest run) of a split that isolates runs of one class: K, K+, K{1,n}."""
    if isinstance(node, _Atom):
        return node, 1
    if isinstance(node, _Repeat) and isinstance(node.node, _Atom) and node.lo == 1 and not node.lazy:
        return node.node, node.hi
    raise Unsupported(
        "only the last of several Splits may be a general regex; the others must isolate runs of one class"
    )


def combined_pattern(splits: list[str]) -> str:
    """One Rust regex whose matches are the pieces of Isolated Splits applied one after the other.

    The splits before the last isolate runs of one class each (``K``/``K+``/``K{1,n}``, classes
    pairwise disjoint); the text then consists of such runs and of maximal runs of the remaining
    characters ("other"). The last split applies within each piece: it is written once per kind of
    piece with every class restricted to that kind's characters (so that it stops at the piece's
    end exactly as at the end of a string: ``(?!\\S)`` sees a following digit as an end), followed
    by a catch-all for the text it does not match (tokenizers keeps that text as a piece, tiktoken
    would drop it). Runs cut into chunks (``K{1,n}``) must be left alone by the last split.
    """
    if not splits:
        raise Unsupported("no regex splits the text (pieces would be whole documents)")
    nodes = [parse_regex(s) for s in splits]
    final = nodes[-1]
    if can_match_empty(final):
        raise Unsupported(f"regex {splits[-1]!r} can match the empty string")
    runs = [_run_class(n) for n in nodes[:-1]]
    members = [_members(k.text) for k, _ in runs]
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            if _members(f"[{runs[i][0].item}&&{runs[j][0].item}]", members[i]):
                raise Unsupported(f"split classes {runs[i][0].text} and {runs[j][0].text} overlap")
    kinds: list[list[tuple[str, bool]]] = []  # per kind of piece: (alternative, hard) in order
    for (k, hi), chars in zip(runs, members, strict=True):
        if _can_consume(final, k.item, chars):
            if hi is not None:
                raise Unsupported(f"the last split would cut the {k.text}{{1,{hi}}} chunks again")
            kinds.append(_alternatives(final, k.item, k.text, chars))
        else:
            kinds.append([(k.text + ("+" if hi is None else ("" if hi == 1 else f"{{1,{hi}}}")), False)])
    if runs:
        other = "[^" + "".join(k.item for k, _ in runs) + "]"
        kinds.append(_alternatives(final, other, other, None))
    else:
        kinds.append(_alternatives(final, None, "[\\s\\S]", None))
    return _merge(kinds)


def _hard(node: Any) -> bool:
    """Whether fancy-regex runs ``node`` in its backtracking VM (lookarounds) rather than handing
    it to the regex crate."""
    if isinstance(node, _Look):
        return True
    if isinstance(node, _Seq | _Alt):
        return any(_hard(n) for n in node.items)
    if isinstance(node, _Repeat | _Caseless):
        return _hard(node.node)
    return False


def _alternatives(final: Any, within: str | None, cls: str, members: str | None) -> list[tuple[str, bool]]:
    """The last split's top-level alternatives restricted to one kind of piece (dropping those
    that cannot match there when ``members`` lists its characters), then the catch-all."""
    alts = final.items if isinstance(final, _Alt) else [final]
    if members is not None:
        alts = [a for a in alts if _can_consume(a, within or "", members)]
    out = [(emit(a, within), _hard(a)) for a in alts]
    whole = "|".join(text for text, _ in out)
    out.append((f"(?:(?!{whole}){cls})+", True))
    return out


def _merge(kinds: list[list[tuple[str, bool]]]) -> str:
    """One alternation of every kind's alternatives. Kinds start with disjoint characters, so only
    the order within a kind matters; sorting by (hard alternatives before, hard) keeps it and lets
    the easy ones between two hard ones form one group that fancy-regex hands to the regex crate
    in one call."""
    keyed = []
    for alts in kinds:
        hard_before = 0
        for text, hard in alts:
            keyed.append(((hard_before, hard), text, hard))
            hard_before += hard
    keyed.sort(key=lambda x: x[0])
    out: list[str] = []
    easy: list[str] = []
    for _, text, hard in keyed:
        if hard:
            if easy:
                out.append("(?:" + "|".join(easy) + ")")
                easy = []
            out.append(text)
        else:
            easy.append(text)
    if easy:
        out.append("(?:" + "|".join(easy) + ")")
    return "|".join(out)


# -- the tokenizer.json --------------------------------------------------------------------------


def _normalizer(spec: dict[str, Any] | None) -> bool:
    """True for NFC, False for no normalization; Unsupported for anything else."""
    if spec is None:
        return False
    kind = spec.get("type")
    if kind == "NFC":
        return True
    if kind == "Sequence":
        parts = spec.get("normalizers") or []
        if not parts:
            return False
        if len(parts) == 1:
            return _normalizer(parts[0])
    raise Unsupported(f"normalizer {kind} (only none or NFC)")


def _split_patterns(spec: dict[str, Any] | None) -> list[str]:
    """The regexes of the Isolated splits the pre-tokenizer applies, in order."""
    if spec is None:
        raise Unsupported("no pre-tokenizer (pieces would be whole documents)")
    parts = spec.get("pretokenizers") if spec.get("type") == "Sequence" else [spec]
    parts = parts or []
    if not parts or parts[-1].get("type") != "ByteLevel":
        raise Unsupported("the pre-tokenizer does not end with ByteLevel")
    patterns = []
    for p in parts[:-1]:
        if p.get("type") != "Split":
            raise Unsupported(f"pre-tokenizer {p.get('type')} before ByteLevel (only Split)")
        if p.get("behavior") != "Isolated" or p.get("invert"):
            raise Unsupported(f"Split behavior {p.get('behavior')} invert={p.get('invert')} (only Isolated)")
        pattern = p.get("pattern") or {}
        if "Regex" in pattern:
            patterns.append(pattern["Regex"])
        elif "String" in pattern:
            patterns.append("".join(f"\\x{{{ord(c):X}}}" for c in pattern["String"]))
        else:
            raise Unsupported(f"Split pattern {pattern}")
    byte_level = parts[-1]
    if byte_level.get("add_prefix_space", True):  # the ByteLevel default
        raise Unsupported("ByteLevel add_prefix_space")
    if byte_level.get("use_regex", True):
        patterns.append(GPT2_PATTERN)
    return patterns


def _inside(xs: list[str], ys: list[str]) -> tuple[str, str] | None:
    """(x, y) with x inside (or equal to) y, or None."""
    joined = "\x00".join(ys)
    for x in xs:
        if x in joined:
            return x, next(y for y in ys if x in y)
    return None


def _chain(xs: list[str], ys: list[str]) -> tuple[str, str] | None:
    """(x, y) where a proper end of x is a proper start of y (x then y can overlap), or None."""
    starts: dict[str, str] = {}
    for y in ys:
        for k in range(1, len(y)):
            starts.setdefault(y[:k], y)
    for x in xs:
        for k in range(1, len(x)):
            if x[k:] in starts:
                return x, starts[x[k:]]
    return None


def _added_tokens(data: dict[str, Any], nfc: bool) -> dict[str, int]:
    """Non-special added tokens (content -> id): they split the text as in tokenizers.

    tokenizers finds added tokens leftmost-longest, first those matched on the raw text
    (normalized false), then the others in the remaining pieces, and skips the matches of special
    tokens (text here), which hides whatever they overlap. One leftmost-longest pass over the
    non-special tokens gives the same splits unless a special token of the same pass can hide one
    (it contains it, or starts before it and overlaps it), or a first-pass token can take the text
    of a second-pass token that starts earlier (it lies inside it, or the second one's end is its
    start): then no fast path.
    """
    tokens = data.get("added_tokens") or []
    added = [t for t in tokens if not t.get("special")]
    if not added:
        return {}
    for t in added:
        if not t["content"]:
            raise Unsupported("an empty added token")
        if t.get("lstrip") or t.get("rstrip") or t.get("single_word"):
            raise Unsupported(f"added token {t['content']!r} with lstrip/rstrip/single_word")
        if nfc:
            raise Unsupported(f"added token {t['content']!r} with a normalizer")

    def contents(special: bool, normalized: bool) -> list[str]:
        return [
            t["content"]
            for t in tokens
            if bool(t.get("special")) == special and bool(t.get("normalized")) == normalized
        ]

    first, second = contents(False, False), contents(False, True)
    checks = [(first, contents(True, False)), (second, contents(True, True))]
    for ours, specials in checks:
        pair = _inside(ours, specials) or _chain(specials, ours)
        if pair:
            raise Unsupported(f"added token {pair[0]!r} can be hidden by the special token {pair[1]!r}")
    pair = _inside(first, second) or _chain(second, first)
    if pair:
        raise Unsupported(f"added tokens {pair[0]!r} and {pair[1]!r} can overlap")
    return {t["content"]: int(t["id"]) for t in added}


@dataclass
class Spec:
    """What a tiktoken Encoding needs, plus the rank -> tokenizer id map."""

    pattern: str
    ranks: dict[bytes, int]
    added: dict[str, int]  # non-special added tokens: content -> tokenizer id
    lookup: np.ndarray  # rank -> tokenizer id (int32)
    nfc: bool
    # ignore_merges: texts of vocabulary entries that no merge makes; tokenizers takes such a
    # piece whole, tiktoken cannot: each must encode alike (e.g. never be a whole piece)
    whole: list[str]


def build_spec(data: dict[str, Any]) -> Spec:
    """Translate a parsed tokenizer.json; Unsupported with the reason when tiktoken cannot match it."""
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise Unsupported(f"model {model.get('type')} (only BPE)")
    for key in ("byte_fallback",):
        if model.get(key):
            raise Unsupported(key)
    if model.get("dropout"):
        raise Unsupported("BPE dropout")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise Unsupported(key)
    if data.get("truncation") or data.get("padding"):
        raise Unsupported("truncation or padding is configured")
    nfc = _normalizer(data.get("normalizer"))
    pattern = combined_pattern(_split_patterns(data.get("pre_tokenizer")))
    vocab: dict[str, int] = model.get("vocab") or {}
    ranks: dict[bytes, int] = {}
    ids: list[int] = []
    for b, c in byte_to_unicode().items():
        if c not in vocab:
            raise Unsupported(f"byte {b:#04x} ({c!r}) is not in the vocabulary")
    for b in range(256):
        ranks[bytes([b])] = b
        ids.append(vocab[byte_to_unicode()[b]])
    for m in model.get("merges") or []:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        token = a + b
        key = _level_bytes(token)
        if key is None:
            raise Unsupported(f"merge {m!r} is not over byte-level symbols")
        if key not in ranks:
            if token not in vocab:
                raise Unsupported(f"merge result {token!r} is not in the vocabulary")
            ranks[key] = len(ids)
            ids.append(vocab[token])
    whole: list[str] = []
    if model.get("ignore_merges"):
        for t in vocab:
            key = _level_bytes(t)
            if key is not None and key not in ranks:
                with contextlib.suppress(UnicodeDecodeError):  # else never a whole piece of text
                    whole.append(key.decode("utf-8"))
    added = _added_tokens(data, nfc)
    return Spec(pattern, ranks, added, np.asarray(ids, dtype=np.int32), nfc, whole)


class TiktokenBPE:
    """Encodes like the tokenizer.json it was built from (see :func:`build_spec`), with tiktoken.

    ``encode_batch`` contract: int32 id arrays, no special tokens added, special-token strings
    encoded as text, non-special added tokens as their own ids.
    """

    def __init__(self, spec: Spec):
        from tiktoken import _tiktoken

        self.spec = spec
        try:
            self._core = _tiktoken.CoreBPE(spec.ranks, {}, spec.pattern)
        except Exception as e:  # a regex the Rust engine rejects
            raise Unsupported(f"tiktoken rejects the regex: {e}") from None
        self._lookup = spec.lookup
        self._empty = np.zeros(0, dtype=np.int32)
        # texts without these cannot hold an added token (a cheap test before the split)
        starts = sorted({t[:2] for t in spec.added})
        self._maybe_added = re.compile("|".join(map(re.escape, starts))) if starts else None
        alternatives = sorted(spec.added, key=lambda t: (-len(t), t))  # longest first at a position
        self._split = re.compile("(" + "|".join(map(re.escape, alternatives)) + ")") if spec.added else None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_key = (0, 0)

    def _plain(self, text: str) -> np.ndarray:
        ranks = np.frombuffer(self._core.encode_to_tiktoken_buffer(text, set()), dtype=np.uint32)
        return self._lookup[ranks]

    def _with_added(self, text: str) -> np.ndarray:
        parts = self._split.split(text)  # type: ignore[union-attr]  # text, token, text, ..., text
        out = [
            np.asarray([self.spec.added[part]], dtype=np.int32) if i % 2 else self._plain(part)
            for i, part in enumerate(parts)
            if part
        ]
        return np.concatenate(out) if out else self._empty

    def encode(self, text: str) -> np.ndarray:
        """Ids of one text."""
        return self._encode_list([text])[0]

    def _encode_list(self, texts: list[str]) -> list[np.ndarray]:
        """Ids of every text; those without added tokens are slices (views) of one array, mapped
        from ranks to ids with one lookup for the whole list."""
        encode, none = self._core.encode_to_tiktoken_buffer, set()
        nfc, maybe_added = self.spec.nfc, self._maybe_added
        buffers: list[Any] = []  # tiktoken ranks (uint32 buffers) of each text without added tokens
        with_added: dict[int, np.ndarray] = {}  # the others, by index
        for i, text in enumerate(texts):
            if nfc:
                text = unicodedata.normalize("NFC", text)
            if maybe_added is not None and maybe_added.search(text):
                with_added[i] = self._with_added(text)
                buffers.append(b"")
            else:
                buffers.append(encode(text, none))
        ids = self._lookup[np.frombuffer(b"".join(buffers), dtype=np.uint32)]
        ends = np.cumsum([memoryview(b).nbytes >> 2 for b in buffers]).tolist()
        out = [ids[start:end] for start, end in zip([0, *ends], ends, strict=False)]
        for i, array in with_added.items():
            out[i] = array
        return out

    def encode_batch(self, texts: list[str], threads: int = 1) -> list[np.ndarray]:
        """Ids of every text, in order, using up to ``threads`` threads (tiktoken releases the GIL)."""
        threads = max(1, min(threads, len(texts)))
        if threads == 1:
            return self._encode_list(texts)
        key = (threads, os.getpid())  # a pool inherited through fork has no threads
        if self._pool is None or self._pool_key != key:
            if self._pool is not None and self._pool_key[1] == key[1]:
                self._pool.shutdown()
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="tiktoken")
            self._pool_key = key
        # a few contiguous slices per thread: balanced enough, little overhead per slice
        step = -(-len(texts) // (threads * 4))
        parts = self._pool.map(self._encode_list, [texts[i : i + step] for i in range(0, len(texts), step)])
        return [ids for part in parts for ids in part]


def build_engine(data: dict[str, Any], reference: Any = None) -> TiktokenBPE:
    """A tiktoken engine for a parsed tokenizer.json; Unsupported (with the reason) when impossible.

    reference: the tokenizers encoder (texts -> id arrays), needed only to check the vocabulary
    entries that ``ignore_merges`` makes reachable (see :class:`Spec`).
    """
    spec = build_spec(data)
    engine = TiktokenBPE(spec)
    if spec.whole:
        if reference is None:
            raise Unsupported(f"ignore_merges with {len(spec.whole)} vocabulary entries no merge makes")
        for text, ref, ids in zip(
            spec.whole, reference(spec.whole), engine.encode_batch(spec.whole), strict=True
        ):
            if not np.array_equal(ref, ids):
                raise Unsupported(
                    f"ignore_merges: the vocabulary entry {text!r} is taken whole by tokenizers"
                )
    return engine
