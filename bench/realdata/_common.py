"""Shared helpers of the real-data builders: splits, Jaccard, JSONL output, and the mechanical readers
that turn shipped files (HTML, gettext catalogues, roff man pages) into plain text.

Every reader here is a mechanical rendering of a file as shipped; none adds words of its own.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import re
import struct
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, TextIO

HELDOUT_FRACTION = 0.30
SHINGLE = 5

# locale (as the source names it) -> (lang, script)
LOCALES: dict[str, tuple[str, str]] = {
    "zh_CN": ("zh", "Hans"),
    "zh_Hans": ("zh", "Hans"),
    "zh-cn": ("zh", "Hans"),
    "zh-CN": ("zh", "Hans"),
    "zh_TW": ("zh", "Hant"),
    "zh_Hant": ("zh", "Hant"),
    "zh-tw": ("zh", "Hant"),
    "zh-TW": ("zh", "Hant"),
    "zh_HK": ("zh", "Hant"),
    "yue": ("yue", "Hant"),
    "en": ("en", "Latn"),
    "en-US": ("en", "Latn"),
    "en_US": ("en", "Latn"),
    "C": ("en", "Latn"),
    "ja": ("ja", "Jpan"),
    "ko": ("ko", "Kore"),
    "ru": ("ru", "Cyrl"),
    "de": ("de", "Latn"),
    "es": ("es", "Latn"),
    "it": ("it", "Latn"),
    "fr": ("fr", "Latn"),
    "pt": ("pt", "Latn"),
    "pt-BR": ("pt", "Latn"),
    "pt_BR": ("pt", "Latn"),
}

VARIANT: dict[str, str] = {
    "zh_CN": "zh_CN",
    "zh_Hans": "zh_CN",
    "zh-cn": "zh_CN",
    "zh-CN": "zh_CN",
    "zh_TW": "zh_TW",
    "zh_Hant": "zh_TW",
    "zh-tw": "zh_TW",
    "zh-TW": "zh_TW",
    "zh_HK": "zh_HK",
}


def split_of(group: str) -> str:
    """``heldout`` for ~30% of group ids, ``dev`` for the rest; a pure function of the group id."""
    h = int.from_bytes(hashlib.sha1(f"dataprep-realdata:{group}".encode()).digest()[:8], "big")
    return "heldout" if h / 2**64 < HELDOUT_FRACTION else "dev"


def stable_hash(*parts: str) -> int:
    return int.from_bytes(hashlib.sha1("\x1f".join(parts).encode()).digest()[:8], "big")


def stable_sample(items: list[Any], n: int, key: Callable[[Any], str], salt: str) -> list[Any]:
    """The ``n`` items with the smallest salted hash of ``key(item)``, in their original order."""
    if len(items) <= n:
        return list(items)
    ranked = sorted(range(len(items)), key=lambda i: stable_hash(salt, key(items[i])))[:n]
    return [items[i] for i in sorted(ranked)]


# --- "as read" Jaccard ---------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _t2s() -> Any:
    import opencc

    return opencc.OpenCC("t2s")


def t2s(text: str) -> str:
    return str(_t2s().convert(text))


def shingles(text: str, k: int = SHINGLE) -> set[str]:
    """Character k-grams over the sequence of non-space characters (a text shorter than k: one gram)."""
    chars = "".join(ch for ch in text if not ch.isspace())
    if len(chars) <= k:
        return {chars} if chars else set()
    return {chars[i : i + k] for i in range(len(chars) - k + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def jaccard_as_read(a: str, b: str) -> tuple[float, float]:
    """(Jaccard after OpenCC t2s of both texts, Jaccard of the raw texts)."""
    return jaccard(shingles(t2s(a)), shingles(t2s(b))), jaccard(shingles(a), shingles(b))


# --- output --------------------------------------------------------------------------------------


class JsonlWriter:
    """Streams documents to a JSONL file (``.gz`` suffix: gzip) and counts them."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        if path.suffix == ".gz":
            self._f: TextIO = gzip.open(path, "wt", encoding="utf-8")  # noqa: SIM115 (closed in close())
        else:
            self._f = path.open("w", encoding="utf-8")
        self.count = 0

    def write(self, doc: dict[str, Any]) -> None:
        self._f.write(json.dumps(doc, ensure_ascii=False) + "\n")
        self.count += 1

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def doc(
    *,
    id: str,
    source: str,
    licence: str,
    lang: str,
    script: str,
    category: str,
    group: str,
    text: str,
    **extra: Any,
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": id,
        "source": source,
        "licence": licence,
        "lang": lang,
        "script": script,
        "category": category,
        "split": split_of(group),
        "group": group,
    }
    d.update(extra)
    d["text"] = text
    return d


def nonspace_len(text: str) -> int:
    return sum(1 for ch in text if not ch.isspace())


_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff]")


def han_fraction(text: str) -> float:
    n = nonspace_len(text)
    return len(_HAN.findall(text)) / n if n else 0.0


def latin_fraction(text: str) -> float:
    n = nonspace_len(text)
    return sum(1 for ch in text if ch.isascii() and ch.isalpha()) / n if n else 0.0


def kana_fraction(text: str) -> float:
    n = nonspace_len(text)
    return len(_KANA.findall(text)) / n if n else 0.0


def hangul_fraction(text: str) -> float:
    n = nonspace_len(text)
    return len(_HANGUL.findall(text)) / n if n else 0.0


# --- HTML -> text --------------------------------------------------------------------------------

_BLOCK = {
    "p",
    "div",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "li",
    "dt",
    "dd",
    "tr",
    "table",
    "ul",
    "ol",
    "dl",
    "pre",
    "blockquote",
    "section",
    "header",
    "footer",
    "nav",
    "aside",
    "hr",
    "br",
    "caption",
    "figure",
    "figcaption",
    "tbody",
    "thead",
    "title",
    "form",
    "address",
}
_VOID = {
    "br",
    "hr",
    "img",
    "meta",
    "link",
    "input",
    "area",
    "base",
    "col",
    "embed",
    "param",
    "source",
    "track",
    "wbr",
}
_DROP = {"script", "style", "head", "noscript", "template", "svg", "button", "select", "textarea"}


class _Text(HTMLParser):
    """Renders HTML as text: block elements on their own lines, ``<pre>`` kept verbatim and indented by
    four spaces, list items prefixed with ``* ``, table rows as ``| a | b |`` lines, ``<img alt>`` dropped.
    ``keep(tag, attrs)``/``drop(tag, attrs)`` choose the subtrees rendered."""

    def __init__(
        self,
        keep: Callable[[str, dict[str, str]], bool] | None,
        drop: Callable[[str, dict[str, str]], bool] | None,
    ) -> None:
        super().__init__(convert_charrefs=True)
        self.keep_fn, self.drop_fn = keep, drop
        self.lines: list[str] = []
        self.cur: list[str] = []
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, opened a keep region, opened a drop region)
        self.keep_depth = 0 if keep else 1
        self.drop_depth = 0
        self.pre = 0
        self.cells: list[str] | None = None
        self.cell: list[str] | None = None
        self.outer: list[tuple[list[str] | None, list[str] | None]] = []  # row state around nested tables

    @property
    def on(self) -> bool:
        return self.keep_depth > 0 and self.drop_depth == 0

    def _flush(self) -> None:
        if self.cell is not None:
            return
        s = re.sub(r"[ \t\r\n\f\u00a0]+", " ", "".join(self.cur)).strip()
        self.cur = []
        if s:
            self.lines.append(s)

    def _blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    def handle_starttag(self, tag: str, attrs_l: list[tuple[str, str | None]]) -> None:
        attrs = {k: (v or "") for k, v in attrs_l}
        if tag in _VOID:
            if tag == "br" and self.on:
                if self.pre:
                    self.cur.append("\n")
                elif self.cell is not None:
                    self.cell.append(" ")
                else:
                    self._flush()
            return
        k = bool(self.keep_fn and self.keep_fn(tag, attrs))
        d = tag in _DROP or bool(self.drop_fn and self.drop_fn(tag, attrs))
        self.stack.append((tag, k, d))
        self.keep_depth += k
        self.drop_depth += d
        if not self.on:
            return
        if tag == "table":
            self.outer.append((self.cells, self.cell))
            if self.cell is not None:
                self.lines.append(re.sub(r"\s+", " ", "".join(self.cell)).strip())
            self.cells = self.cell = None
        if tag == "pre":
            self._flush()
            self._blank()
            self.pre += 1
        elif self.cell is not None and tag in _BLOCK:
            self.cell.append(" ")
        elif tag == "tr":
            self._flush()
            self.cells = []
        elif tag in ("td", "th") and self.cells is not None:
            self.cell = []
        elif tag in _BLOCK:
            self._flush()
            if tag in ("p", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "dl"):
                self._blank()
            if tag == "li":
                self.cur.append("* ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        # close up to the matching open tag (tolerates unclosed <p>, <li>, ...)
        idx = next((i for i in range(len(self.stack) - 1, -1, -1) if self.stack[i][0] == tag), None)
        if idx is None:
            return
        while len(self.stack) > idx:
            t, k, d = self.stack.pop()
            was_on = self.on
            if was_on:
                self._close(t)
            self.keep_depth -= k
            self.drop_depth -= d

    def _close(self, tag: str) -> None:
        if tag == "pre":
            text = "".join(self.cur)
            self.cur = []
            self.pre -= 1
            body = text.strip("\n").splitlines()
            self.lines.extend("    " + ln.rstrip() if ln.strip() else "" for ln in body)
            self._blank()
        elif tag in ("td", "th") and self.cell is not None and self.cells is not None:
            self.cells.append(re.sub(r"\s+", " ", "".join(self.cell)).strip())
            self.cell = None
        elif tag == "tr" and self.cells is not None:
            cells, self.cells = self.cells, None
            if any(cells):
                self.lines.append("| " + " | ".join(cells) + " |")
        elif tag in _BLOCK:
            if tag == "table" and self.outer:
                self.cells, cell = self.outer.pop()
                self.cell = [] if cell is not None else None
            if self.cell is not None:
                self.cell.append(" ")
                return
            self._flush()
            if tag in ("p", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "dl"):
                self._blank()

    def handle_data(self, data: str) -> None:
        if not self.on:
            return
        if self.cell is not None:
            self.cell.append(data)
        else:
            self.cur.append(data)

    def text(self) -> str:
        self._flush()
        out = "\n".join(self.lines).strip("\n")
        return re.sub(r"\n{3,}", "\n\n", out)


def html_to_text(
    markup: str,
    keep: Callable[[str, dict[str, str]], bool] | None = None,
    drop: Callable[[str, dict[str, str]], bool] | None = None,
) -> str:
    p = _Text(keep, drop)
    p.feed(markup)
    p.close()
    return p.text()


def has_class(attrs: dict[str, str], *names: str) -> bool:
    cls = attrs.get("class", "").split()
    return any(n in cls for n in names)


# --- gettext catalogues --------------------------------------------------------------------------


@dataclass
class Message:
    msgid: str
    msgstr: str
    context: str = ""
    plural: str = ""
    fuzzy: bool = False

    @property
    def key(self) -> str:
        return f"{self.context}\x04{self.msgid}" if self.context else self.msgid


_PO_ESC = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _po_esc(m: re.Match[str]) -> str:
    g = m[1]
    return chr(int(g, 8)) if g.isdigit() else _PO_ESC.get(g, g)


def _po_unquote(s: str) -> str:
    s = s.strip()
    if not (len(s) >= 2 and s.startswith('"') and s.endswith('"')):
        return ""
    return re.sub(r'\\(["\\ntr]|[0-7]{1,3})', _po_esc, s[1:-1])


def read_po(path: Path) -> list[Message]:
    """Messages of a .po file in file order: translated, not obsolete, header dropped. For plural
    forms the first msgstr[0] is kept. Fuzzy entries are returned with ``fuzzy=True``."""
    out: list[Message] = []
    cur: dict[str, str] = {}
    field = ""
    fuzzy = False

    def done() -> None:
        nonlocal cur, fuzzy
        if "msgid" in cur and cur.get("msgid") and cur.get("msgstr"):
            out.append(
                Message(
                    cur["msgid"], cur["msgstr"], cur.get("msgctxt", ""), cur.get("msgid_plural", ""), fuzzy
                )
            )
        cur, fuzzy = {}, False

    with path.open(encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if line.startswith("#~"):
                continue
            if not line.strip() or line.startswith("#"):
                if "msgstr" in cur:
                    done()
                if line.startswith("#,"):
                    fuzzy = "fuzzy" in line
                field = ""
                continue
            m = re.match(r"(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s+(\".*\")\s*$", line)
            if m:
                name = m[1]
                if name in ("msgctxt", "msgid") and "msgstr" in cur:
                    done()
                if name.startswith("msgstr["):
                    if m[2] != "0":
                        field = "_skip"
                        continue
                    name = "msgstr"
                field = name
                cur[field] = cur.get(field, "") + _po_unquote(m[3])
            elif line.startswith('"') and field and field != "_skip":
                cur[field] = cur.get(field, "") + _po_unquote(line)
    done()
    return out


def read_mo(path: Path) -> list[Message]:
    """Messages of a compiled .mo catalogue (in the file's msgid order, which is sorted)."""
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    end = "<" if magic == 0x950412DE else ">"
    _, n, o_orig, o_tran = struct.unpack(end + "4I", data[4:20])
    out: list[Message] = []
    for i in range(n):
        ln, off = struct.unpack(end + "2I", data[o_orig + 8 * i : o_orig + 8 * i + 8])
        lt, ot = struct.unpack(end + "2I", data[o_tran + 8 * i : o_tran + 8 * i + 8])
        mid = data[off : off + ln].decode("utf-8", "replace")
        mstr = data[ot : ot + lt].decode("utf-8", "replace")
        if not mid:
            continue
        ctx = ""
        if "\x04" in mid:
            ctx, mid = mid.split("\x04", 1)
        mid, _, plural = mid.partition("\x00")
        mstr = mstr.split("\x00", 1)[0]
        if mstr:
            out.append(Message(mid, mstr, ctx, plural))
    return out


def read_catalogue(path: Path) -> list[Message]:
    return read_mo(path) if path.suffix == ".mo" else read_po(path)


_FORMAT = re.compile(r"%\([^)]*\)[-#0 +]*\d*(?:\.\d+)?[sdifrx]|%[-#0 +]*\d*(?:\.\d+)?[sdifrx%]|\{[^{}]*\}")


def message_text(msgstr: str) -> str:
    """A catalogue message as a reader sees it in the UI: HTML tags and mnemonics markers stay out,
    placeholders stay in (they are part of the shipped string)."""
    s = re.sub(r"<[^>]+>", "", msgstr)
    s = html.unescape(s)
    return s.strip()


# --- roff man pages -> text ----------------------------------------------------------------------

_ROFF_ESC = [
    (re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)"), ""),
    (re.compile(r"\\s[-+]?\d"), ""),
    (re.compile(r"\\\*\((?:lq|rq)"), '"'),
    (re.compile(r"\\\*\(Tm"), "(TM)"),
    (re.compile(r"\\\*(?:\[[^\]]*\]|\(..|.)"), ""),
    (re.compile(r"\\\((?:lq|rq|dq)"), '"'),
    (re.compile(r"\\\((?:oq|cq|aq)"), "'"),
    (re.compile(r"\\\((?:em|en)"), "-"),
    (re.compile(r"\\\((?:bu)"), "*"),
    (re.compile(r"\\\((?:co)"), "(C)"),
    (re.compile(r"\\\((?:mu)"), "x"),
    (
        re.compile(
            r"\\\(..",
        ),
        "",
    ),
    (re.compile(r"\\\[[^\]]*\]"), ""),
    (re.compile(r"\\[,/&:|^%]"), ""),
    (re.compile(r"\\[ ~0]"), " "),
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\c$"), ""),
    (re.compile(r"\\(.)"), r"\1"),
]


def _roff_inline(s: str) -> str:
    for pat, rep in _ROFF_ESC:
        s = pat.sub(rep, s)
    return s


def _roff_args(rest: str) -> list[str]:
    return [
        a[1:-1] if len(a) > 1 and a.startswith('"') and a.endswith('"') else a
        for a in re.findall(r'"[^"]*"|\S+', rest)
    ]


def roff_to_text(src: str) -> str:
    """Renders a man(7) page as plain text the way a pager lays it out, roughly: section headings at
    column 0, body indented by 7 spaces, ``.TP`` tags on their own line with the text below indented
    further, ``.nf``/``.EX`` blocks kept line by line. Paragraphs are not refilled."""
    out: list[str] = []
    para: list[str] = []
    indent = 7
    tp_pending = False
    nofill = False

    def flush() -> None:
        nonlocal para
        if para:
            s = " ".join(p for p in para if p)
            s = re.sub(r"[ \t]+", " ", s).strip()
            if s:
                out.append(" " * indent + s)
            para = []

    for raw in src.splitlines():
        line = raw.rstrip()
        if line.startswith(('.\\"', "'\\\"", '\\"')) or line in (".", "'"):
            continue
        if line.startswith((".", "'")) and len(line) > 1:
            m = re.match(r"[.'](\S+)\s*(.*)", line)
            if not m:
                continue
            req, rest = m[1], m[2]
            args = _roff_args(rest)
            if req in ("SH", "SS"):
                flush()
                if out and out[-1] != "":
                    out.append("")
                title = _roff_inline(" ".join(args))
                out.append(title if req == "SH" else "   " + title)
                indent = 7
                tp_pending = False
            elif req in ("PP", "P", "LP", "sp", "br"):
                flush()
                if req != "br" and out and out[-1] != "":
                    out.append("")
                if req in ("PP", "P", "LP"):
                    indent = 7
            elif req == "TP":
                flush()
                if out and out[-1] != "":
                    out.append("")
                indent = 7
                tp_pending = True
            elif req == "IP":
                flush()
                if out and out[-1] != "":
                    out.append("")
                indent = 7
                if args:
                    out.append(" " * indent + _roff_inline(args[0]))
                indent = 14
            elif req in ("RS",):
                flush()
                indent += 7
            elif req in ("RE",):
                flush()
                indent = max(7, indent - 7)
            elif req in ("nf", "EX"):
                flush()
                nofill = True
            elif req in ("fi", "EE"):
                flush()
                nofill = False
            elif req in ("B", "I", "BI", "BR", "IB", "IR", "RB", "RI", "SM", "SB"):
                sep = " " if req in ("B", "I", "SM", "SB") else ""  # BR, IR, ...: alternate fonts, no space
                text = _roff_inline(sep.join(args))
                if nofill:
                    out.append(" " * indent + text)
                elif tp_pending:
                    out.append(" " * indent + text)
                    tp_pending = False
                    indent = 14
                else:
                    para.append(text)
            elif req == "TH":
                title = " ".join(_roff_inline(a) for a in args[:2])
                out.append(title.strip())
                out.append("")
            elif req in ("UR", "MT"):
                para.append(_roff_inline(" ".join(args)))
            # every other request (.ad, .hy, .de, .ie, .ft, .ne, .in, .ti, .TQ, ...) is layout only
            continue
        text = _roff_inline(line)
        if nofill:
            flush()
            out.append(" " * indent + text)
        elif tp_pending:
            out.append(" " * indent + text.strip())
            tp_pending = False
            indent = 14
        else:
            para.append(text)
    flush()
    res = "\n".join(out).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", res)


def iter_files(root: Path, pattern: str) -> list[Path]:
    return sorted(p for p in root.glob(pattern) if p.is_file())


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def chunks(items: list[Any], lo: int, hi: int) -> Iterable[list[Any]]:
    """Consecutive chunks of ``items`` of about (lo+hi)/2 items, none shorter than ``lo`` except when the
    whole list is shorter (the last short chunk is merged into the previous one)."""
    size = (lo + hi) // 2
    out = [items[i : i + size] for i in range(0, len(items), size)]
    if len(out) > 1 and len(out[-1]) < lo:
        last = out.pop()
        out[-1] = out[-1] + last
    return out
