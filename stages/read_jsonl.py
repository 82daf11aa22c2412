"""Reader for JSON Lines (.jsonl / .json / .ndjson, optionally .gz or .zst): one document per line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from dataprep.document import Document
from dataprep.readers import LineReader
from dataprep.recipe import InputParams
from dataprep.stage import InputSplit, ReadReport, param, register


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

    def read(self, split: InputSplit, report: ReadReport) -> Iterator[Document]:
        p: JsonlParams = self.params
        for rec in self.lines(split, report):
            if not rec.text or rec.text.isspace():
                continue  # blank lines separate nothing in JSONL; they are not records
            where = f"{split.rel}:{rec.line}"  # only used when something is wrong, or as the id
            try:
                obj = json.loads(rec.text)
            except json.JSONDecodeError as e:
                report.record_error(
                    "malformed_json", where, f"malformed JSON ({e.msg}, column {e.colno})", rec.text
                )
                continue
            if not isinstance(obj, dict):
                report.record_error(
                    "malformed_json", where, f"expected a JSON object, got {type(obj).__name__}", rec.text
                )
                continue
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
            if "\x00" in text:
                report.repair("nul_bytes", where, "NUL character(s) removed from the text")
                text = text.replace("\x00", "")
            doc_id = obj.pop(p.id_field, None)
            yield report.emit(
                Document(
                    id=str(doc_id) if doc_id is not None else where,
                    text=text,
                    source=split.rel,
                    meta=obj,
                )
            )
