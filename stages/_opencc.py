"""The installed OpenCC: converters, the files a config reads, and their fingerprint (one place
for the normalize and lang_id stages and the bench scripts that rebuild their data files); and
step 7 of ``normalize``, Traditional -> Simplified on the CJK runs of a text
(``to_simplified_batch``: protected spans and Latin letters untouched, one OpenCC call per batch,
a per-character table where that converts exactly).
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from stages._chars import HAN_RE


@lru_cache(maxsize=8)
def converter(config: str) -> object:
    """An ``opencc.OpenCC(config)``, built once per process and config."""
    import opencc

    return opencc.OpenCC(config)


def config_path(config: str) -> Path | None:
    """The installed JSON file of OpenCC ``config``, found next to the t2s config (no converter
    is built for ``config``), or None."""
    path = Path(str(getattr(converter("t2s"), "config", ""))).with_name(f"{config}.json")
    return path if path.is_file() else None


def dictionaries(config: str, section: str = "") -> list[Path]:
    """The dictionary files OpenCC ``config`` reads, in the order of its JSON file (repeats kept;
    empty when the config file cannot be found); ``section``: only those under that top-level key
    of the JSON file (e.g. "normalization")."""
    path = config_path(config)
    if path is None:
        return []
    files: list[Path] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("file"), str):
                files.append(path.parent / node["file"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    data = json.loads(path.read_text(encoding="utf-8"))
    walk(data.get(section, []) if section else data)
    return files


def fingerprint(config: str) -> str | None:
    """blake2b-128 hex of the installed config file and of every dictionary it reads (name and
    bytes, in the order of :func:`dictionaries`), or None when one of them is missing."""
    path = config_path(config)
    files = dictionaries(config)
    if path is None or not files or not all(f.is_file() for f in files):
        return None
    h = hashlib.blake2b(path.read_bytes(), digest_size=16)
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


# -- normalize's step 7: OpenCC on CJK runs ----------------------------------------------------
PROTECTED = re.compile(
    r"```.*?```|`[^`\n]+`"
    r"|(?:https?|ftp)://[^\s<>\"'，。！？；：、（）【】「」『』《》]+"
    r"|[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+",
    re.S,
)
LATIN_LETTERS = re.compile(r"([A-Za-z]+)")


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
    if not recorded or recorded.get("fingerprint") != fingerprint(config):
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
        convert = converter(config).convert  # type: ignore[attr-defined]
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
        path = config_path(config)
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
    convert = converter(config).convert  # type: ignore[attr-defined]
    pieces: list[list[str] | None] = []  # per text: its segments (None: one segment, or no Han)
    where: list[list[int]] = []  # per text of several segments, the ones to convert
    todo: list[str] = []
    kind: list[int] = []  # 0: no Han, 1: one segment, 2: several
    for i, text in enumerate(texts):
        if not (has_han[i] if has_han is not None else HAN_RE.search(text) is not None):
            kind.append(0)
        elif not ("://" in text or "@" in text or "`" in text):  # one segment, holding Han
            kind.append(1)
            todo.append(text)
        else:
            segs = _segments(text)
            at = [k for k in range(0, len(segs), 2) if HAN_RE.search(segs[k])]
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
    return "".join(p if j % 2 or not HAN_RE.search(p) else convert(p) for j, p in enumerate(parts))
