"""Reader for JSON Lines (.jsonl / .json / .ndjson, optionally .gz or .zst): one document per line."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from dataprep.document import Document
from dataprep.readers import LineReader
from dataprep.recipe import InputParams
from dataprep.stage import InputSplit, ReadReport, param, register

SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # \uD800-\uDFFF in the raw line
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # what json.loads leaves of an unpaired one


class NotJson(ValueError):
    """A line json.loads accepts or chokes on that is no JSON record: NaN/Infinity, a number too
    large for a float, an integer of more digits than Python converts, nesting too deep."""


def _no_constant(name: str) -> object:
    raise NotJson(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise NotJson(f"number {text[:40]} overflows a float")
    return x


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def _parse(line: str) -> object:
    """The JSON value of ``line`` (surrounding whitespace allowed), as ``json.loads`` decodes it
    but strict: NaN, Infinity and floats that overflow raise :class:`NotJson`; an integer beyond
    Python's digit limit raises ValueError; nesting too deep for the parser raises
    RecursionError. A line that is one object from its first to its last character is decoded
    without the whitespace scans."""
    if line[:1] == "{":
        try:
            obj, end = _DECODER.raw_decode(line)
        except json.JSONDecodeError:
            end = -1
        if end == len(line):
            return obj
    return _DECODER.decode(line)


FLAT_VALUE_TYPES = (str, int, bool, type(None))  # orjson's values of these equal json's


def parse_flat(raw: bytes) -> dict | None:
    """The object of a raw JSONL line (UTF-8 bytes) when orjson parses it and every value is a
    string, an integer (orjson's integers are exact within 64 bits; beyond, it returns a float),
    a boolean or null: then it is what :func:`_parse` makes of the decoded line, duplicate keys
    included. None for anything else (not JSON for orjson, another top level, floats, nesting,
    unpaired surrogate escapes, invalid UTF-8, raw control bytes): those go the general way, which
    reports them as it always did."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict:
        return None
    for v in obj.values():
        if not isinstance(v, FLAT_VALUE_TYPES):
            return None
    return obj


def _without_lone_surrogates(obj: dict) -> tuple[dict, bool]:
    """obj with every unpaired UTF-16 surrogate (not encodable as UTF-8) replaced by U+FFFD."""
    dumped = json.dumps(obj, ensure_ascii=False)
    if not LONE_SURROGATE.search(dumped):
        return obj, False
    return json.loads(LONE_SURROGATE.sub("\ufffd", dumped)), True


@dataclass
class JsonlParams(InputParams):
    text_field: str = param("text", help="JSON key holding the document text")
    id_field: str = param("id", help="JSON key holding the document id (file:line when absent)")


@register
class JsonlReader(LineReader):
    """One JSON object per line; text from text_field, id from id_field, other keys kept as meta."""

    name = "jsonl"
    extensions = (".jsonl", ".json", ".ndjson")
    Params = JsonlParams

    def parse_raw(self, raw: bytes) -> dict | None:
        obj = parse_flat(raw)
        if obj is None or type(obj.get(self.params.text_field)) is not str:
            return None  # reported (missing field, wrong type) the general way
        return obj

    def _document(self, text: str, obj: dict, where: str, split: InputSplit, report: ReadReport) -> Document:
        """The document of a record's text and its other fields (``obj``, text field removed)."""
        if "\x00" in text:
            report.repair("nul_bytes", where, "NUL character(s) removed from the text")
            text = text.replace("\x00", "")
        doc_id = obj.pop(self.params.id_field, None)
        return report.emit(
            Document(id=str(doc_id) if doc_id is not None else where, text=text, source=split.rel, meta=obj)
        )

    def read(self, split: InputSplit, report: ReadReport) -> Iterator[Document]:
        p: JsonlParams = self.params
        for rec in self.lines(split, report):
            if rec.value is not None:  # a flat object holding its text, parsed from the raw bytes
                obj = rec.value
                yield self._document(obj.pop(p.text_field), obj, f"{split.rel}:{rec.line}", split, report)
                continue
            if not rec.text or rec.text.isspace():
                continue  # blank lines separate nothing in JSONL; they are not records
            where = f"{split.rel}:{rec.line}"  # only used when something is wrong, or as the id
            try:
                obj = _parse(rec.text)
            except json.JSONDecodeError as e:
                report.record_error(
                    "malformed_json", where, f"malformed JSON ({e.msg}, column {e.colno})", rec.text
                )
                continue
            except RecursionError:
                report.record_error("malformed_json", where, "JSON nested too deep to parse", rec.text[:1000])
                continue
            except ValueError as e:  # NotJson, or an integer of too many digits
                message = str(e) if isinstance(e, NotJson) else "integer of too many digits"
                report.record_error(
                    "malformed_json", where, f"not a JSON record ({message})", rec.text[:1000]
                )
                continue
            if not isinstance(obj, dict):
                report.record_error(
                    "malformed_json", where, f"expected a JSON object, got {type(obj).__name__}", rec.text
                )
                continue
            if "\\u" in rec.text and SURROGATE_ESCAPE.search(rec.text):
                obj, changed = _without_lone_surrogates(obj)
                if changed:
                    message = "unpaired UTF-16 surrogate escape(s), which are not text"
                    if p.invalid_utf8 == "drop":
                        report.record_error("invalid_utf8", where, message, rec.text)
                        continue
                    report.repair("invalid_utf8", where, message + " (replaced with U+FFFD)")
            text = obj.pop(p.text_field, None)
            if text is None:
                report.record_error(
                    "missing_field", where, f"no {p.text_field!r} field (set input.text_field)", rec.text
                )
                continue
            if not isinstance(text, str):
                report.record_error(
                    "bad_field_type",
                    where,
                    f"{p.text_field!r} is {type(text).__name__}, not a string",
                    rec.text,
                )
                continue
            yield self._document(text, obj, where, split, report)
