"""Reader for plain text (.txt, optionally .gz or .zst): a document per line, or per block of lines
separated by blank lines."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from dataprep.document import Document
from dataprep.readers import LineReader
from dataprep.recipe import InputParams
from dataprep.stage import InputSplit, ReadReport, param, register


@dataclass
class TxtParams(InputParams):
    txt_mode: Literal["line", "block"] = param(
        "line", help="line: one document per non-empty line; block: documents separated by blank lines"
    )
    max_block_lines: int = param(
        100_000, help="block mode: a block with more lines is cut into several documents"
    )


@register
class TxtReader(LineReader):
    """Plain UTF-8 text. Ids are 'file:line' of the document's first line."""

    name = "txt"
    extensions = (".txt", ".text", ".md")
    Params = TxtParams

    @classmethod
    def chunkable(cls, params: InputParams) -> bool:
        return getattr(params, "txt_mode", "line") == "line"

    @classmethod
    def whole_file(cls, params: InputParams) -> bool:
        return getattr(params, "txt_mode", "line") == "block"  # blocks straddle offsets

    def read(self, split: InputSplit, report: ReadReport) -> Iterator[Document]:
        if self.params.txt_mode == "line":
            for rec in self.lines(split, report):
                if rec.text.strip():
                    yield report.emit(Document(id=f"{split.rel}:{rec.line}", text=rec.text, source=split.rel))
            return
        block: list[str] = []
        first = 0
        for rec in self.lines(split, report):
            if rec.text.strip():
                if not block:
                    first = rec.line
                block.append(rec.text)
                if len(block) < self.params.max_block_lines:
                    continue
            if block:
                yield report.emit(
                    Document(id=f"{split.rel}:{first}", text="\n".join(block), source=split.rel)
                )
                block = []
        if block:
            yield report.emit(Document(id=f"{split.rel}:{first}", text="\n".join(block), source=split.rel))
