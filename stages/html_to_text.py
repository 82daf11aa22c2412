"""E-mail and HTML input to plain text.

An RFC 822 e-mail (a header block first, optionally after an mbox "From " line) becomes the
headers named in ``keep_headers`` (e.g. "Subject: ...") followed by its text parts: text/plain
parts as they are, text/html parts through the HTML converter, base64 and quoted-printable parts
decoded with their declared charset (unknown charsets: UTF-8, else cp1252). In
multipart/alternative only the plain part is kept when there is one. Non-text parts (images,
applications, signatures) and parts with a file name are dropped and counted, as are uuencoded
blocks inside text parts.

An HTML document (or HTML part) becomes text: comments and the contents of script, style,
noscript, template, svg, object and iframe elements removed; block elements (p, div, br, li, tr,
h1-h6, ...) become line breaks, table cells a space; other tags removed; character references
decoded; whitespace collapsed as a browser does (kept inside pre).

Documents that are neither are passed through unchanged. An e-mail without any text part is
dropped as ``no_text``.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from email.message import Message
from typing import Literal

from dataprep.document import Document, Drop
from dataprep.stage import MapStage, StageContext, StageResult, param, register

HEADER_LINE = re.compile(r"[!-9;-~]+:")  # RFC 5322 field name: printable ASCII but ':'; then ':'
MALFORMED_HEADER_LINES = 2  # tolerated inside a header block (">Received: ..." from broken relays)
KNOWN_HEADERS = {
    "from",
    "to",
    "subject",
    "date",
    "received",
    "message-id",
    "content-type",
    "mime-version",
    "return-path",
    "delivered-to",
    "reply-to",
}


def looks_like_email(text: str) -> bool:
    """True when ``text`` starts with an RFC 822 header block holding a well-known header."""
    head = text[:4096].lstrip("\n")
    lines = head.split("\n")[:-1]  # the last piece may be cut at 4096 characters
    if lines and lines[0].startswith("From "):
        lines = lines[1:]
    known = headers = malformed = 0
    for line in lines[:80]:
        line = line.rstrip("\r")
        if not line:
            break
        if line[0] in " \t":
            if headers == 0:
                return False
            continue
        m = HEADER_LINE.match(line)
        if m is None:
            malformed += 1
            if malformed > MALFORMED_HEADER_LINES or headers == 0:
                return False
            continue
        headers += 1
        known += line[: m.end() - 1].lower() in KNOWN_HEADERS
    return headers >= 2 and known >= 1


HTML_MARKERS = re.compile(r"<!doctype html|<html[\s>]|<body[\s>]", re.I)
HTML_TAG = re.compile(
    r"</?(?:p|div|br|table|tr|td|span|font|a|li|ul|img|b|i|center|h[1-6])\b[^>]{0,4000}>", re.I
)


def looks_like_html(text: str, min_tags: int = 5) -> bool:
    """True for documents that are markup: an <html>/<body>/doctype marker, or at least
    ``min_tags`` common tags and one tag per 300 characters."""
    if HTML_MARKERS.search(text, 0, 20_000):
        return True
    tags = len(HTML_TAG.findall(text, 0, 100_000))
    return tags >= min_tags and tags * 300 >= min(len(text), 100_000)


DROPPED_ELEMENTS = re.compile(
    r"<(script|style|noscript|template|svg|object|iframe)\b[^>]{0,4000}>.*?(?:</\1\s*>|\Z)", re.I | re.S
)
COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
PRE = re.compile(r"<pre\b[^>]{0,4000}>(.*?)</pre\s*>", re.I | re.S)
WHITESPACE = re.compile(r"[ \t\r\n\f]+")
BLOCK_TAG = re.compile(
    r"</?(?:p|div|br|tr|li|ul|ol|dl|dd|dt|h[1-6]|table|thead|tbody|tfoot|caption|blockquote|pre|hr|"
    r"title|section|article|header|footer|nav|aside|form|center|address|figure|figcaption|main|"
    r"option|body|html|head)\b[^>]{0,4000}>",
    re.I,
)
CELL_TAG = re.compile(r"</?(?:td|th)\b[^>]{0,4000}>", re.I)
ANY_TAG = re.compile(r"</?[A-Za-z][^>]{0,4000}>|<![^>]{0,4000}>|<\?[^>]{0,4000}>")  # bounded: stays linear
SPACES_AROUND_NEWLINE = re.compile(r"[ \t\u00a0]*\n[ \t\u00a0]*")
MANY_NEWLINES = re.compile(r"\n{3,}")
MANY_SPACES = re.compile(r"  +")


def html_to_text(markup: str) -> tuple[str, int]:
    """(text, number of script/style/... elements removed) for an HTML document or fragment."""
    removed = 0

    def drop(m: re.Match[str]) -> str:
        nonlocal removed
        removed += 1
        return " "

    text = COMMENT.sub(" ", markup)
    text = DROPPED_ELEMENTS.sub(drop, text)
    if "<pre" in text or "<PRE" in text:
        text = PRE.sub(lambda m: "<br>" + m.group(1).replace("\n", "<br>") + "<br>", text)
    text = WHITESPACE.sub(" ", text)
    text = BLOCK_TAG.sub("\n", text)
    text = CELL_TAG.sub(" ", text)
    text = ANY_TAG.sub("", text)
    text = html.unescape(text)
    text = MANY_SPACES.sub(" ", text)
    text = SPACES_AROUND_NEWLINE.sub("\n", text)
    text = MANY_NEWLINES.sub("\n\n", text)
    return text.strip(), removed


UUENCODED = re.compile(r"^begin [0-7]{3,4} \S[^\n]*\n(?:[^\n]*\n)*?end$", re.M)
CHARSET_ALIASES = {"gb2312": "gbk", "gb_2312-80": "gbk", "chinesebig5": "big5", "x-gbk": "gbk"}


def _add(counts: dict[str, int], key: str, n: int = 1) -> None:
    if n:
        counts[key] = counts.get(key, 0) + n


def _decode(payload: bytes, charset: str | None) -> str:
    import codecs

    cs = CHARSET_ALIASES.get((charset or "").lower(), (charset or "").lower())
    if cs:
        try:
            codecs.lookup(cs)
            return payload.decode(cs, errors="replace")
        except LookupError:
            pass
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload.decode("cp1252", errors="replace")


@dataclass
class HtmlToTextParams:
    mode: Literal["auto", "email", "html", "off"] = param(
        "auto", help="auto: detect e-mails and HTML per document; email/html: treat all as that"
    )
    keep_headers: list[str] = param(["Subject"], help="e-mail headers kept as 'Name: value' lines")
    html_min_tags: int = param(5, help="auto mode: tags needed (and one per 300 chars) to call it HTML")


@register
class HtmlToText(MapStage):
    """E-mail (MIME) and HTML documents to plain text; attachments and scripts dropped, counted."""

    name = "html_to_text"
    Params = HtmlToTextParams

    def _email(self, text: str, counts: dict[str, int]) -> str:
        import email
        from email.parser import HeaderParser

        # headers only first (the body stays one string); only multiparts need the full parser
        msg = HeaderParser().parsestr(text)
        if msg.get_content_maintype() == "multipart" or msg.get_content_type() == "message/rfc822":
            msg = email.message_from_string(text)
        lines = []
        for name in self.params.keep_headers:
            value = msg.get(name)
            if value:
                lines.append(f"{name}: {_header_text(value)}")
        parts: list[str] = []
        self._collect(msg, parts, counts)
        if not parts:
            return ""
        return "\n\n".join(["\n".join(lines), *parts] if lines else parts)

    def _collect(self, part: Message, parts: list[str], counts: dict[str, int]) -> None:
        """Append the text of ``part`` (recursively for multiparts) to ``parts``."""
        if part.is_multipart():
            children = [c for c in part.get_payload() if isinstance(c, Message)]  # type: ignore[union-attr]
            if part.get_content_subtype() == "alternative":
                plain = [c for c in children if c.get_content_type() == "text/plain"]
                if plain:
                    _add(counts, "alternative_skipped", len(children) - len(plain))
                    children = plain
            for child in children:
                self._collect(child, parts, counts)
            return
        ctype = part.get_content_type()
        if part.get_content_maintype() != "text" or part.get_filename() or ctype == "text/rfc822-headers":
            _add(counts, "attachments_dropped")
            return
        cte = str(part.get("Content-Transfer-Encoding", "")).strip().lower()
        if cte in ("base64", "quoted-printable"):
            raw = part.get_payload(decode=True)
            body = _decode(raw, part.get_content_charset()) if isinstance(raw, bytes) else ""
            _add(counts, "mime_parts_decoded")
        else:
            payload = part.get_payload()
            body = payload if isinstance(payload, str) else ""
            charset = (part.get_content_charset() or "").lower()
            if body and not body.isascii() and charset not in ("", "us-ascii", "utf-8", "utf8"):
                # an 8-bit part that was read as Latin-1: decode it with its declared charset
                try:
                    body = _decode(body.encode("latin-1"), charset)
                    _add(counts, "charset_redecoded")
                except UnicodeEncodeError:
                    pass
        if ctype == "text/html" or looks_like_html(body, self.params.html_min_tags):
            body, removed = html_to_text(body)
            _add(counts, "html_parts")
            _add(counts, "script_style_removed", removed)
        if "begin " in body:
            body, n = UUENCODED.subn("", body)
            _add(counts, "uuencoded_dropped", n)
        body = body.strip()
        if body:
            parts.append(body)

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        mode = self.params.mode
        out: list[StageResult] = []
        counts: dict[str, int] = {}
        prefilter = mode == "auto" and self.params.html_min_tags >= 1
        for doc in batch:
            if mode == "off" or (prefilter and not may_be_markup(doc.text)):
                out.append(doc)
                continue
            if mode == "email" or (mode == "auto" and looks_like_email(doc.text)):
                _add(counts, "emails")
                doc.text = self._email(doc.text.replace("\r\n", "\n"), counts)
                out.append(
                    doc if doc.text.strip() else Drop(doc, "no_text", detail="e-mail without text part")
                )
                continue
            if mode == "html" or (mode == "auto" and looks_like_html(doc.text, self.params.html_min_tags)):
                _add(counts, "html_docs")
                doc.text, removed = html_to_text(doc.text)
                _add(counts, "script_style_removed", removed)
                out.append(doc if doc.text.strip() else Drop(doc, "no_text", detail="markup without text"))
                continue
            out.append(doc)
        for k, v in counts.items():
            ctx.stats.count(k, v)
        return out


HEADER_START = frozenset(chr(c) for c in range(0x21, 0x7F) if c != ord(":"))


def may_be_markup(text: str) -> bool:
    """``text`` may be an e-mail or HTML in auto mode. HTML needs a "<" (every marker and tag
    starts with one); an e-mail's first line (after leading newlines) is a header line or an mbox
    "From " line, so it starts with a character of HEADER_LINE."""
    if "<" in text:
        return True
    first = text[:1]
    if first == "\n":
        first = text.lstrip("\n")[:1]
    return first in HEADER_START


def _header_text(value: object) -> str:
    """A header value with RFC 2047 encoded words decoded and folding removed."""
    from email.header import decode_header

    try:
        pieces = decode_header(str(value))
    except Exception:
        return " ".join(str(value).split())
    out = []
    for chunk, charset in pieces:
        out.append(_decode(chunk, charset) if isinstance(chunk, bytes) else chunk)
    return " ".join("".join(out).split())
