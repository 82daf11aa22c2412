"""Benchmark decontamination: documents sharing an n-gram with a benchmark item are dropped, or
the matching spans are cut out (as GPT-3, datatrove and Dolma do).

eval sets: ``eval_sets`` lists JSONL (.jsonl/.json/.ndjson, optionally .gz/.zst) or Parquet
           files of benchmark items; an entry is a path or ``{path, name, fields}``. An item's text
           is its ``fields`` in order (default question, choices, answer; a list field, e.g. the
           choices, gives each element), joined by spaces. Items missing a field (or with an empty
           one) are skipped and counted (``items_skipped.<benchmark>``); items with fewer tokens
           than the n-gram length have no n-gram and are counted (``items_too_short.<benchmark>``).
n-grams:   normalised and tokenised alike on both sides (``stages/_ngrams``: width, case,
           Traditional -> Simplified, punctuation and whitespace ignored; every CJK character a
           token, every Latin word a token). Items at least half CJK are indexed by ``ngram_cjk``
           consecutive tokens (characters), the others by ``ngram_word`` (words; 13 as in GPT-3).
           Documents are looked up with both lengths, so a Chinese document quoting an English
           item is found too.
index:     built once in the driver (setup) from every eval set: sorted unique 64-bit hashes with
           the item of each, memory-mapped by the workers; the corpus side streams batch by batch.
decide:    a document with at least ``min_matches`` matching n-grams is contaminated. ``action:
           drop`` drops it as ``contaminated`` (score = matching n-grams; rejected/ record's
           ``extra.matches``: benchmark, item, its id or line, and the character span in the
           document of each matched item). ``action: cut`` removes the matched spans widened by
           ``cut_margin`` characters (GPT-3 cut 200), joins what is left with line breaks and
           records the matches in ``doc.meta["contamination"]``; a document left with fewer than
           ``min_chars_left`` non-space characters is dropped as ``contaminated``.
stats:     ``docs_matched.<benchmark>``, ``ngrams_matched.<benchmark>``, ``items.<benchmark>``,
           ``index_ngrams``; examples (the report's table): benchmark item and the document span
           side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import DriverContext, MapStage, RecipeError, StageContext, StageResult, param, register

EXAMPLE_CHARS = 400
ITEMS_FILE = "items.json"


@dataclass
class DecontaminateParams:
    eval_sets: list[Any] = param(
        help="benchmark files (JSONL or Parquet): paths, or {path, name, fields} mappings"
    )
    fields: list[str] = param(
        ["question", "choices", "answer"], help="fields of an item whose text is indexed (all needed)"
    )
    ngram_cjk: int = param(13, help="n-gram length in characters for Chinese (CJK) items")
    ngram_word: int = param(13, help="n-gram length in words for other items (GPT-3: 13)")
    action: Literal["drop", "cut"] = param("drop", help="drop contaminated documents, or cut the spans")
    min_matches: int = param(1, help="matching n-grams that make a document contaminated")
    cut_margin: int = param(200, help="action cut: characters removed on each side of a matched span")
    min_chars_left: int = param(50, help="action cut: drop the document when fewer non-space chars stay")
    examples: int = param(5, help="matches recorded per task for report.html")

    def validate(self) -> None:
        if not self.eval_sets:
            raise ValueError("eval_sets must name at least one benchmark file")
        for entry in self.eval_sets:
            if isinstance(entry, dict):
                unknown = set(entry) - {"path", "name", "fields"}
                if "path" not in entry or unknown:
                    raise ValueError(
                        f"eval set {entry!r}: a mapping needs 'path' (and may have name, fields)"
                    )
            elif not isinstance(entry, str):
                raise ValueError(f"eval set {entry!r}: a path or a mapping with 'path'")
        if not self.fields:
            raise ValueError("fields must name at least one field")
        if self.ngram_cjk < 2 or self.ngram_word < 2:
            raise ValueError("n-gram lengths must be at least 2")
        if self.min_matches < 1:
            raise ValueError("min_matches must be at least 1")


@dataclass(frozen=True)
class EvalSet:
    path: Path
    name: str
    fields: list[str]


def eval_sets(params: DecontaminateParams) -> list[EvalSet]:
    """The eval sets of ``params`` (names default to the file name without its suffixes)."""
    out = []
    for entry in params.eval_sets:
        spec = entry if isinstance(entry, dict) else {"path": entry}
        path = Path(str(spec["path"])).expanduser()
        name = str(spec.get("name") or path.name.split(".")[0])
        out.append(EvalSet(path, name, list(spec.get("fields") or params.fields)))
    return out


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL (optionally .gz / .zst) or Parquet file; lines that are not JSON
    objects become None."""
    from dataprep.io import RawInput, logical_suffix

    if logical_suffix(path) == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    records: list[Any] = []
    with RawInput(path) as raw:
        for line in raw.stream:
            line = line.strip()
            if not line:
                continue
            try:
                value = json.loads(line)
            except ValueError:
                value = None
            records.append(value if isinstance(value, dict) else None)
    return records


def item_text(record: dict[str, Any] | None, fields: list[str]) -> str | None:
    """The text of an item (its fields joined by spaces), None when a field is missing or empty."""
    if record is None:
        return None
    parts: list[str] = []
    for f in fields:
        value = record.get(f)
        if isinstance(value, list | tuple):
            value = " ".join(str(v) for v in value if v is not None)
        if value is None or not str(value).strip():
            return None
        parts.append(str(value))
    return " ".join(parts)


@register
class Decontaminate(MapStage):
    """Drop documents (or cut spans) that share n-grams with benchmark items (eval_sets)."""

    name = "decontaminate"
    Params = DecontaminateParams

    def __init__(self, params: DecontaminateParams):
        super().__init__(params)
        self._index: Any = None
        self._items: list[dict[str, Any]] | None = None
        self._index_dir: Path | None = None

    def drop_hint(self, reason: str, label: str) -> str | None:
        return (
            f"check {label}'s eval_sets (these documents contain benchmark text), or set action: cut, "
            "or raise min_matches / the n-gram lengths"
        )

    def setup(self, ctx: DriverContext) -> None:
        from stages._ngrams import build_index

        texts: list[str] = []
        items: list[dict[str, Any]] = []
        for es in eval_sets(self.params):
            if not es.path.is_file():
                raise RecipeError(f"{ctx.label}: eval set {str(es.path)!r} not found")
            try:
                records = read_records(es.path)
            except (OSError, ValueError) as e:
                raise RecipeError(f"{ctx.label}: cannot read eval set {es.path}: {e}") from None
            first = len(items)
            for line, record in enumerate(records, 1):
                text = item_text(record, es.fields)
                if text is None:
                    ctx.stats.count(f"items_skipped.{es.name}")
                    continue
                assert record is not None
                ident = record.get("id", record.get("task_id", f"{es.path.name}:{line}"))
                items.append({"benchmark": es.name, "item": str(ident), "text": text[:EXAMPLE_CHARS]})
                texts.append(text)
            ctx.stats.count(f"items.{es.name}", len(items) - first)
        count, per_item = build_index(texts, self.params.ngram_cjk, self.params.ngram_word, ctx.work_dir)
        for item, n in zip(items, per_item.tolist(), strict=True):
            if n == 0:
                ctx.stats.count(f"items_too_short.{item['benchmark']}")
        ctx.stats.count("index_ngrams", count)
        tmp = ctx.work_dir / (ITEMS_FILE + ".tmp")
        tmp.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
        tmp.replace(ctx.work_dir / ITEMS_FILE)

    def begin_task(self, ctx: StageContext) -> None:
        if self._index_dir != ctx.work_dir:
            from stages._ngrams import NgramIndex

            self._index, self._index_dir = NgramIndex(ctx.work_dir), ctx.work_dir
            self._items = json.loads((ctx.work_dir / ITEMS_FILE).read_text(encoding="utf-8"))

    def matches(self, texts: list[str]) -> list[list[tuple[int, int, int]]]:
        """Per text: (item, first char, end char) of every matching n-gram, in text order."""
        from stages._ngrams import ngram_hashes, tokenize

        tokens = tokenize(texts)
        tok_doc = np.repeat(np.arange(len(texts), dtype=np.int64), tokens.counts())
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for n in sorted({self.params.ngram_cjk, self.params.ngram_word}):
            g, k = ngram_hashes(tokens, n)
            item = self._index.lookup(g)
            hit = np.flatnonzero(item >= 0)
            found.append((k[hit], k[hit] + n - 1, item[hit]))
        out: list[list[tuple[int, int, int]]] = [[] for _ in texts]
        if not found:
            return out
        first = np.concatenate([f[0] for f in found])
        last = np.concatenate([f[1] for f in found])
        item = np.concatenate([f[2] for f in found])
        order = np.lexsort((last, first))
        for a, b, i in zip(first[order].tolist(), last[order].tolist(), item[order].tolist(), strict=True):
            out[int(tok_doc[a])].append((i, int(tokens.start[a]), int(tokens.end[b])))
        return out

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        p: DecontaminateParams = self.params
        assert self._items is not None
        results: list[StageResult] = []
        for doc, found in zip(batch, self.matches([d.text for d in batch]), strict=True):
            if len(found) < p.min_matches:
                results.append(doc)
                continue
            per_item: dict[int, list[int]] = {}
            for item, a, b in found:
                span = per_item.setdefault(item, [a, b, 0])
                span[0], span[1], span[2] = min(span[0], a), max(span[1], b), span[2] + 1
            records = []
            for item, (a, b, n) in sorted(per_item.items()):
                info = self._items[item]
                records.append({"benchmark": info["benchmark"], "item": info["item"], "start": a, "end": b})
                ctx.stats.count(f"ngrams_matched.{info['benchmark']}", n)
                self._example(ctx, info, doc, a, b)
            for name in sorted({r["benchmark"] for r in records}):
                ctx.stats.count(f"docs_matched.{name}")
            first = records[0]
            detail = (
                f"{len(found)} n-grams of {len(records)} item(s); first: {first['benchmark']} "
                f"{first['item']} at {first['start']}-{first['end']}"
            )
            if p.action == "drop":
                results.append(
                    Drop(doc, "contaminated", score=len(found), detail=detail, extra={"matches": records})
                )
                continue
            text = self._cut(doc.text, [(a, b) for _, a, b in found])
            if sum(not c.isspace() for c in text) < p.min_chars_left:
                results.append(
                    Drop(doc, "contaminated", score=len(found), detail=detail, extra={"matches": records})
                )
                continue
            ctx.stats.count("docs_cut")
            ctx.stats.count("chars_cut", len(doc.text) - len(text))
            doc.text = text
            doc.meta["contamination"] = records
            results.append(doc)
        return results

    def _cut(self, text: str, spans: list[tuple[int, int]]) -> str:
        """``text`` without ``spans`` widened by cut_margin; the pieces left joined by line breaks."""
        margin = self.params.cut_margin
        merged: list[list[int]] = []
        for a, b in sorted(spans):
            a, b = max(0, a - margin), min(len(text), b + margin)
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        pieces, at = [], 0
        for a, b in merged:
            pieces.append(text[at:a].strip())
            at = b
        pieces.append(text[at:].strip())
        return "\n".join(p for p in pieces if p)

    def _example(self, ctx: StageContext, info: dict[str, Any], doc: Document, a: int, b: int) -> None:
        if len(ctx.stats.examples) >= self.params.examples:
            return
        lo, hi = max(0, a - 60), min(len(doc.text), b + 60)
        span = ("…" if lo else "") + doc.text[lo:hi] + ("…" if hi < len(doc.text) else "")
        ctx.stats.add_example(
            f"{info['benchmark']} item {info['item']} in {doc.where} (characters {a}-{b})",
            [
                {"label": f"benchmark item ({info['benchmark']} {info['item']})", "text": info["text"]},
                {"label": f"document {doc.id}", "text": span},
            ],
        )
