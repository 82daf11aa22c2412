"""Text normalization (minimal): unify newlines and strip trailing spaces; drop documents that end
up empty. The full Chinese-aware normalizer (width folding, OpenCC, Unicode repair) replaces this."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dataprep.document import Document, Drop
from dataprep.stage import MapStage, StageContext, StageResult, param, register

NEWLINES = re.compile(r"\r\n|[\r\u2028\u2029\x85]")
TRAILING_SPACE = re.compile(r"[ \t]+$", re.MULTILINE)


@dataclass
class NormalizeParams:
    strip_trailing_space: bool = param(True, help="remove spaces and tabs at the end of every line")


@register
class Normalize(MapStage):
    """Newlines -> \\n (\\r\\n, \\r, U+2028, U+2029, U+0085), trailing spaces removed; empty -> dropped."""

    name = "normalize"
    Params = NormalizeParams

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        out: list[StageResult] = []
        for doc in batch:
            text = NEWLINES.sub("\n", doc.text)
            if self.params.strip_trailing_space:
                text = TRAILING_SPACE.sub("", text)
            if text != doc.text:
                ctx.stats.count("changed")
            doc.text = text
            out.append(doc if text.strip() else Drop(doc, "empty"))
        return out
