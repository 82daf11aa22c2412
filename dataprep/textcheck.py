"""Whether a file's first bytes read as text in the declared encoding: the note (kind, message)
a file gets when they do not (binary; not UTF-8, with the encoding charset-normalizer finds;
UTF-16/32 without a byte-order mark). Asked by planning of the files it sniffs, and by the
reader of the small files planning leaves unsniffed (:attr:`InputSplit.sniff`)."""

from __future__ import annotations

import codecs
import re

from dataprep.io import (
    SNIFF_BYTES,
    bom_encoding,
    control_bytes,
    guess_encoding,
    is_utf8,
    looks_binary,
    undecodable_bytes,
)

BINARY_NOTE = ("binary_file", "looks binary (control bytes or undecodable text), skipped")


def text_note(head: bytes, encoding: str) -> tuple[str, str] | None:
    """None when a file whose first (decompressed) bytes are ``head`` reads as text in
    ``encoding``, else its note (kind, message): not UTF-8 (:func:`_as_utf8`), or binary
    (:func:`looks_binary`). The common case, UTF-8 without a byte-order mark, counts the control
    and undecodable bytes once for both rules; only a head that looks legacy or holds NULs asks
    charset-normalizer (:func:`_as_utf8`)."""
    if bom_encoding(head) is None and is_utf8(encoding):
        controls, bad = control_bytes(head), undecodable_bytes(head)
        legacy = bad - 3 > 0.05 * len(head) and controls <= 0.01 * len(head)
        if not legacy and b"\x00" not in head:  # neither a legacy encoding nor UTF-16/32 to name
            if controls > 0.10 * len(head) or bad - 3 > 0.30 * len(head):  # looks_binary's rule
                return BINARY_NOTE
            return None
    text, encoding_note = _as_utf8(head, encoding)
    if encoding_note:
        return ("not_utf8", encoding_note)
    return BINARY_NOTE if looks_binary(text) else None


NOT_UTF8 = "not UTF-8 (legacy Chinese text is often GB18030 or Big5): set input.encoding"


def _as_utf8(head: bytes, encoding: str) -> tuple[bytes, str]:
    """(a file's first bytes as UTF-8, for the binary check; "" or why the file cannot be read as
    text in ``encoding``). A byte-order mark decides the encoding; without one, a head that is
    mostly not UTF-8 under the default encoding (or UTF-16/32 without a mark) is named as such
    instead of being repaired into U+FFFD garbage (or taken for binary), with the encoding
    charset-normalizer finds (bench/bench_charset.py: on real GB18030 / Big5 text it names 98% /
    100% right, at about 0.6 ms a file, asked only about such heads): the user sets
    input.encoding."""
    bom = bom_encoding(head)
    codec = bom[0] if bom else encoding
    if is_utf8(codec) and bom is None:
        bad = undecodable_bytes(head)
        controls = control_bytes(head)
        if bad - 3 > 0.05 * len(head) and controls <= 0.01 * len(head):  # text, not binary
            guess = guess_encoding(head, whole=len(head) < SNIFF_BYTES)
            if guess is None or guess in ("utf-8", "ascii"):
                return head, NOT_UTF8
            return head, f"not UTF-8; charset-normalizer finds {guess}: set input.encoding: {guess}"
        if b"\x00" in head:  # UTF-16/32 without a byte-order mark has NULs (binary files too)
            wide = _wide_text(head)
            if wide:
                return (
                    head,
                    f"{wide} without a byte-order mark (charset-normalizer): set input.encoding: {wide}",
                )
        return head, ""
    if bom is None and b"\x00" in head and not codecs.lookup(codec).name.startswith(("utf-16", "utf-32")):
        wide = _wide_text(head)  # e.g. input.encoding: gb18030 for a corpus with UTF-16 files in it
        if wide:
            return head, f"{wide} without a byte-order mark, not {encoding}: set input.encoding: {wide}"
    text = head[bom[1] :] if bom else head
    return text.decode(codec, "ignore").encode("utf-8"), ""


def _wide_text(head: bytes) -> str | None:
    """The UTF-16/32 codec a head without a byte-order mark is text in, per charset-normalizer
    and checked: it decodes in that codec and has no control characters but tab, newline and
    CR; else None."""
    guess = guess_encoding(head, whole=len(head) < SNIFF_BYTES)
    if guess is None or not guess.startswith(("utf-16", "utf-32")):
        return None
    text = head[: len(head) // 4 * 4].decode(guess, "replace").rstrip("\ufffd")
    return guess if not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]", text) else None
