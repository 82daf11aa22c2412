"""Reader for Apache Parquet files: one document per row, split into tasks by row groups."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dataprep.document import Document
from dataprep.recipe import InputParams
from dataprep.stage import InputSplit, Reader, ReadReport, param, register


@dataclass
class ParquetParams(InputParams):
    text_field: str = param("text", help="column holding the document text")
    id_field: str = param("id", help="column holding the document id (file:row when absent)")


@register
class ParquetReader(Reader):
    """Rows of a Parquet file; other columns are kept as meta. A split is a range of row groups
    (start/end are row-group indices, first_line is the 1-based row number of its first row)."""

    name = "parquet"
    extensions = (".parquet",)
    Params = ParquetParams

    @classmethod
    def plan(cls, path: str, rel: str, params: InputParams) -> list[InputSplit]:
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(path).metadata
        file_bytes = os.path.getsize(path)
        splits: list[InputSplit] = []
        start, first_row, size, rows = 0, 1, 0, 0
        for g in range(meta.num_row_groups):
            size += meta.row_group(g).total_byte_size
            rows += meta.row_group(g).num_rows
            if size >= params.split_bytes or g == meta.num_row_groups - 1:
                nbytes = file_bytes * rows // max(meta.num_rows, 1)
                splits.append(InputSplit(path, rel, cls.name, start, g + 1, first_row, nbytes))
                start, first_row, size, rows = g + 1, first_row + rows, 0, 0
        return splits or [InputSplit(path, rel, cls.name, 0, 0, 1, file_bytes)]

    def read(self, split: InputSplit, report: ReadReport) -> Iterator[Document]:
        import pyarrow.parquet as pq

        p: ParquetParams = self.params
        try:
            f = pq.ParquetFile(split.path)
        except Exception as e:  # removed, replaced or cut since the plan was made
            report.file_error("read_error", split.rel, f"cannot open since planning: {type(e).__name__}: {e}")
            return
        names = f.schema_arrow.names
        if p.text_field not in names:
            report.file_error(
                "missing_field", split.rel, f"no column {p.text_field!r} (columns: {', '.join(names)})"
            )
            return
        groups = list(range(split.start, split.end))
        rows_total = sum(f.metadata.row_group(g).num_rows for g in groups) or 1
        rows_done = 0
        for batch, row in self._batches(f, groups, split.rel, split.first_line, report):
            columns = batch.to_pydict()
            texts = columns.pop(p.text_field)
            ids = columns.pop(p.id_field, None)
            for i, text in enumerate(texts):
                where = f"{split.rel}:{row}"
                row += 1
                if not isinstance(text, str):
                    kind = "missing_field" if text is None else "bad_field_type"
                    report.record_error(
                        kind,
                        where,
                        f"{p.text_field!r} is {type(text).__name__}",
                        json.dumps({k: v[i] for k, v in columns.items()}, ensure_ascii=False, default=str),
                    )
                    continue
                meta = {k: v[i] for k, v in columns.items()}
                doc_id = ids[i] if ids is not None and ids[i] is not None else where
                yield report.emit(
                    Document(id=str(doc_id), text=text.replace("\x00", ""), source=split.rel, meta=meta)
                )
            rows_done += batch.num_rows
            report.position = split.nbytes * rows_done // rows_total  # on-disk bytes, pro rata

    @staticmethod
    def _batches(f: Any, groups: list[int], rel: str, first_row: int, report: ReadReport) -> Iterator[Any]:
        """(record batch, row number of its first row) of row groups ``groups``, one group at a
        time: a group that cannot
        be read (a corrupt page, a cut column chunk) is a read_error at its first unread row
        (``rel:row``), its other rows are not read, and the next group is read."""
        row = first_row
        for g in groups:
            rows = f.metadata.row_group(g).num_rows
            done = 0
            try:
                for batch in f.iter_batches(batch_size=4096, row_groups=[g]):
                    yield batch, row + done
                    done += batch.num_rows
            except Exception as e:  # pyarrow raises OSError or ArrowException subclasses
                lost = rows - done
                message = f"row group {g} unreadable, {lost} row(s) from here skipped: {type(e).__name__}: "
                report.file_error("read_error", f"{rel}:{row + done}", message + str(e).splitlines()[0])
            row += rows
