"""Shared helpers for the cleaning-stage tests (data files live in tests/data/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dataprep.document import Document, Drop
from dataprep.stage import StageContext, build_params, get
from dataprep.stats import StageStats

DATA = Path(__file__).parent / "data"
# the cleaning stages of the default recipe, in order
CLEANING = [
    "html_to_text",
    "lang_id",
    "normalize",
    "hostile_content",
    "boilerplate",
    "filter_length",
    "filter_script",
    "filter_garbled",
    "filter_punctuation",
    "filter_repetition",
    "pii",
]


def real_lines(kind: str) -> list[str]:
    """Texts of tests/data/real_lines.jsonl whose kind starts with ``kind``."""
    rows = [json.loads(line) for line in (DATA / "real_lines.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r["text"] for r in rows if r["kind"].startswith(kind)]


def run_stage(name: str, texts: list[str], **params: Any) -> tuple[list[Document | Drop], StageStats]:
    """Build stage ``name`` from ``params`` (validated like a recipe) and run it on ``texts``."""
    cls = get(name)
    stage = cls(build_params(cls.Params, params, name))
    ctx = StageContext(stats=StageStats(), work_dir=Path("."))
    stage.begin_task(ctx)
    docs = [Document(id=str(i), text=t) for i, t in enumerate(texts)]
    results = stage.process(docs, ctx)
    assert len(results) == len(docs)
    return results, ctx.stats


def kept_text(name: str, text: str, **params: Any) -> str | None:
    """The text after stage ``name``, or None when the document was dropped."""
    (result,), _ = run_stage(name, [text], **params)
    return None if isinstance(result, Drop) else result.text


def drop_reason(name: str, text: str, **params: Any) -> str | None:
    (result,), _ = run_stage(name, [text], **params)
    return result.reason if isinstance(result, Drop) else None
