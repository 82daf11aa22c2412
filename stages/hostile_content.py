"""Hostile-content removal: script/style blocks, long base64 or hex blobs, armored key blocks and
shell payloads are cut out of documents; each removal is counted (``removed.<kind>``).
A document left empty is dropped as ``hostile_only``.

Kinds:
- ``script``: <script>, <style>, <iframe>, <object>, <embed> elements (with contents; an unclosed
  one up to the end of the document), and javascript: URLs.
- ``base64``: a run of base64 characters of at least ``min_base64_chars`` (single token, or
  consecutive lines of 40+ base64 characters), holding upper case, lower case and digits.
- ``hex``: at least ``min_hex_chars`` hex digits in a row, or 16+ escaped bytes (\\x41\\x42...,
  0x41, 0x42, ...).
- ``key_block``: -----BEGIN ...----- ... -----END ...----- armored blocks (keys, signatures).
- ``shell``: the whole line holding a shell payload: a download piped into a shell or interpreter
  (curl ... | sh, wget -O- ... | bash, bash <(curl ...), sh -c "$(curl ...)"), base64-decoded
  text piped into a shell, PowerShell download-and-execute (IEX ... DownloadString,
  -EncodedCommand), reverse shells (/dev/tcp/, nc -e /bin/sh), fork bombs, rm -rf /.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import MapStage, StageContext, StageResult, param, register
from stages._charclass import batch_chars, count_per_text, flags_per_text, mostly_wide
from stages._lines import tidy

SCRIPT = re.compile(
    r"<(script|style|iframe|object|embed)\b[^>]*>.*?(?:</\1\s*>|\Z)|<(?:embed|iframe)\b[^>]*/?>"
    r"|javascript:[^\s\"'<>]+",
    re.I | re.S,
)
# armored blocks, except the header of a clear-signed message (its text is content)
SCRIPT_HINTS = ("<script", "<style", "<iframe", "<object", "<embed", "javascript:")
KEY_BLOCK = re.compile(
    r"-----BEGIN ((?!PGP SIGNED MESSAGE)[A-Z0-9 ]+)-----.*?(?:-----END \1-----|\Z)"
    r"|-----BEGIN PGP SIGNED MESSAGE-----\n(?:Hash: [^\n]*\n)?",
    re.S,
)
HEX_ESCAPES = re.compile(r"(?:\\x[0-9A-Fa-f]{2}){16,}|(?:0x[0-9A-Fa-f]{2},\s*){15,}0x[0-9A-Fa-f]{2}")
DOWNLOADER = r"(?:curl|wget|fetch|iwr|Invoke-WebRequest)\b"
SHELL = r"(?:sudo\s+(?:-\S+\s+)*)?(?:ba|z|da|k|c|tc|fi)?sh\b"
SHELL_PAYLOAD = re.compile(
    "|".join(
        [
            rf"{DOWNLOADER}[^\n|;]*\|\s*{SHELL}",
            rf"{DOWNLOADER}[^\n|;]*\|\s*(?:sudo\s+)?(?:python[0-9.]*|perl|ruby|php|node)\b",
            rf"{SHELL}\s+<\(\s*{DOWNLOADER}",
            rf"{SHELL}\s+-c\s+[\"']?\$\(\s*{DOWNLOADER}",
            rf"base64\s+(?:-d|--decode|-D)\b[^\n]*\|\s*{SHELL}",
            r"(?:IEX|Invoke-Expression)\b[^\n]*(?:DownloadString|DownloadFile|Net\.WebClient|iwr|Invoke-WebRequest)",
            r"powershell(?:\.exe)?\b[^\n]*\s-(?:e|ec|enc|encodedcommand)\s+[A-Za-z0-9+/=]{20,}",
            r"/dev/tcp/[0-9A-Za-z.-]+/\d+",
            r"\b(?:nc|ncat|netcat)\b[^\n]*\s-e\s+/bin/(?:ba)?sh",
            r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",
            r"\brm\s+-(?:rf|fr)\s+(?:--no-preserve-root\s+)?/(?:\s|\*|$)",
        ]
    ),
    re.I | re.M,
)
SHELL_HINTS = (
    "curl",
    "wget",
    "fetch",
    "/dev/tcp",
    ":()",
    "rm -",
    "base64",
    "nc ",
    "ncat",
    "netcat",
    "IEX",
    "iex",
    "Invoke-",
    "invoke-",
    "owerShell",
    "owershell",
    "OWERSHELL",
    "CURL",
    "WGET",
    "iwr",
)


@lru_cache(maxsize=1)
def _shell_hints() -> object:
    import ahocorasick

    automaton = ahocorasick.Automaton()
    for k in SHELL_HINTS:
        automaton.add_word(k, k)
    automaton.make_automaton()
    return automaton


def _has_shell_hint(text: str) -> bool:
    """``any(k in text for k in SHELL_HINTS)`` in one automaton pass."""
    return next(_shell_hints().iter(text), None) is not None  # type: ignore[attr-defined]


LONG_TOKEN = re.compile(r"[!-~]{40}")
BASE64_LINE_HINT = re.compile(r"\n[A-Za-z0-9+/]{40}")
BASE64_LINE = r"[A-Za-z0-9+/]{40,}={0,2}"


# Characters the checks need (bits of ``text_hints``): a text without them skips those checks.
H_LT, H_COLON, H_DASH, H_BACKSLASH, H_ZERO, H_LETTER, H_LONG = (1 << i for i in range(7))
ALL_HINTS = 0x7F


@lru_cache(maxsize=1)
def _hint_table() -> np.ndarray:
    table = np.zeros(0x110000, dtype=np.uint8)
    for c, bit in (("<", H_LT), (":", H_COLON), ("-", H_DASH), ("\\", H_BACKSLASH), ("0", H_ZERO)):
        table[ord(c)] |= bit
    for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz":
        table[ord(c)] |= H_LETTER
    return table


@lru_cache(maxsize=1)
def _printable_ascii() -> np.ndarray:
    table = np.zeros(0x110000, dtype=bool)
    table[0x21:0x7F] = True
    return table


def text_hints(texts: list[str]) -> list[int]:
    """Per text, the H_* bits of the characters it holds; H_LONG when it holds at least 40
    printable ASCII characters (LONG_TOKEN needs 40 in a row)."""
    bc = batch_chars(texts)
    flags = flags_per_text(bc, _hint_table()).astype(np.int64)
    flags |= np.where(count_per_text(bc, _printable_ascii()) >= 40, H_LONG, 0)
    return flags.tolist()


@dataclass
class HostileParams:
    min_base64_chars: int = param(200, help="shortest base64 blob removed")
    min_hex_chars: int = param(128, help="shortest run of hex digits removed")
    remove_scripts: bool = param(True, help="remove script/style/iframe/object/embed and javascript: URLs")
    remove_blobs: bool = param(True, help="remove base64 and hex blobs and armored key blocks")
    remove_shell: bool = param(True, help="remove lines holding shell payloads")

    def validate(self) -> None:
        if self.min_base64_chars < 40 or self.min_hex_chars < 32:
            raise ValueError("min_base64_chars must be >= 40 and min_hex_chars >= 32")


def _mixed_base64(s: str) -> bool:
    return any(c.isupper() for c in s) and any(c.islower() for c in s) and any(c.isdigit() for c in s)


@register
class HostileContent(MapStage):
    """Cut scripts, encoded blobs and shell payloads out of documents; count each removal."""

    name = "hostile_content"
    Params = HostileParams

    def __init__(self, params: HostileParams):
        super().__init__(params)
        n = params.min_base64_chars
        lines = rf"(?:^{BASE64_LINE}[ \t]*\n){{2,}}(?:^[A-Za-z0-9+/]*={{0,2}}[ \t]*$)?"
        self.base64_lines = re.compile(lines, re.M)
        self.base64 = re.compile(rf"[A-Za-z0-9+/]{{{n},}}={{0,2}}")
        self.hex = re.compile(rf"(?<![0-9A-Za-z])[0-9A-Fa-fx]{{{params.min_hex_chars},}}+(?![0-9A-Za-z])")
        self._min_b64 = n

    def clean(self, text: str, removed: dict[str, int], hints: int = ALL_HINTS) -> str:
        """``text`` with hostile content removed; counts removals per kind into ``removed``.
        ``hints`` (from ``text_hints``): the H_* characters ``text`` holds; checks for what it
        lacks are skipped (until a removal changes the text)."""
        p = self.params

        def counted(kind: str, repl: str = ""):  # type: ignore[no-untyped-def]
            def f(m: re.Match[str]) -> str:
                removed[kind] = removed.get(kind, 0) + 1
                return repl

            return f

        before = text
        if (
            p.remove_scripts
            and hints & (H_LT | H_COLON)
            and ("<" in text or ":" in text)
            and any(t in text.lower() for t in SCRIPT_HINTS)
        ):
            text = SCRIPT.sub(counted("script", " "), text)
        if p.remove_blobs:
            if text is not before:
                hints = ALL_HINTS
            if hints & H_DASH and "-----BEGIN " in text:
                text = KEY_BLOCK.sub(counted("key_block"), text)
                hints = ALL_HINTS

            def blob(m: re.Match[str]) -> str:
                s = m.group()
                if len(s.replace("\n", "").strip()) < self._min_b64 or not _mixed_base64(s):
                    return s
                removed["base64"] = removed.get("base64", 0) + 1
                return "\n" if s.endswith("\n") else ""

            if hints & H_LONG and LONG_TOKEN.search(text):
                if BASE64_LINE_HINT.search(text):
                    text = self.base64_lines.sub(blob, text)
                text = self.base64.sub(blob, text)
                text = self.hex.sub(counted("hex"), text)
                hints = ALL_HINTS
            if hints & (H_BACKSLASH | H_ZERO) and ("\\x" in text or "0x" in text):
                text = HEX_ESCAPES.sub(counted("hex"), text)
        if text is not before:
            hints = ALL_HINTS
        if p.remove_shell and hints & (H_LETTER | H_COLON) and _has_shell_hint(text):
            lines = text.split("\n")
            kept = [line for line in lines if not (_has_shell_hint(line) and SHELL_PAYLOAD.search(line))]
            if len(kept) != len(lines):
                removed["shell"] = removed.get("shell", 0) + len(lines) - len(kept)
                text = "\n".join(kept)
        return text

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        out: list[StageResult] = []
        removed: dict[str, int] = {}
        changed = 0
        texts = [d.text for d in batch]
        wide = mostly_wide(texts)
        if wide is None:
            hints = text_hints(texts) if batch else []
        else:  # ASCII-only texts take every check
            hints = [ALL_HINTS] * len(texts)
            for i, h in zip(wide, text_hints([texts[i] for i in wide]) if wide else [], strict=True):
                hints[i] = h
        for doc, h in zip(batch, hints, strict=True):
            if not h:
                out.append(doc if doc.text else Drop(doc, "hostile_only"))
                continue
            before = sum(removed.values())
            text = self.clean(doc.text, removed, h)
            if sum(removed.values()) != before:
                changed += 1
                doc.text = tidy(text)
            out.append(doc if doc.text else Drop(doc, "hostile_only"))
        for kind, n in removed.items():
            ctx.stats.count(f"removed.{kind}", n)
        ctx.stats.count("docs_changed", changed)
        return out
