"""dataprep.formats.arrow: Arrow arrays from and to numpy through their buffers, without pandas."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from dataprep.formats import arrow


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint64])
def test_numbers_are_the_arrays_pyarrow_converts(dtype: type[np.generic]) -> None:
    values = np.arange(-3, 40, 3).astype(dtype)[::2]  # not contiguous
    assert arrow.numbers(values, dtype).equals(pa.array(np.ascontiguousarray(values)))
    assert arrow.numbers(values[:0], dtype).equals(pa.array(values[:0]))


def test_strings_are_the_arrays_pyarrow_converts() -> None:
    texts = ["", "abc", "秦川雄帝宅", "e\u0301", "😀 x"]
    assert arrow.strings(texts).equals(pa.array(texts, type=pa.string()))
    assert arrow.strings([]).equals(pa.array([], type=pa.string()))
    data = [t.encode("utf-8") for t in texts]  # the same array built from its buffers
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in data])]).astype(np.int32)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    assert arrow.strings(texts).equals(pa.Array.from_buffers(pa.string(), len(texts), buffers))
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate, as str.encode says
        arrow.strings(["a\ud800"])


def test_to_numpy_reads_chunked_and_sliced_columns() -> None:
    chunks = [pa.array(np.arange(10, dtype=np.uint64)).slice(3, 5), pa.array(np.arange(4, dtype=np.uint64))]
    column = pa.chunked_array(chunks)
    out = arrow.to_numpy(column, np.uint64)
    assert out.tolist() == column.to_numpy().tolist()
    out[0] = 99  # a copy, writable
    assert arrow.to_numpy(pa.chunked_array([], type=pa.int32()), np.int32).tolist() == []
    with pytest.raises(ValueError):
        arrow.to_numpy(pa.array([1, None], type=pa.int32()), np.int32)


# pyarrow imports pandas by itself wherever pandas is installed (datasets, a dev dependency, brings
# it); what these check is that dataprep never needs it: the same steps with pandas unimportable.
NO_PANDAS = """
import sys
class NoPandas:  # import pandas fails as it does where pandas is not installed
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoPandas())
"""


def test_writing_and_reading_a_parquet_file_never_needs_pandas(tmp_path) -> None:
    script = (
        NO_PANDAS
        + f"""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from dataprep.formats import arrow
schema = pa.schema([("id", pa.string()), ("n", pa.int32())])
columns = [arrow.strings(["a", "b"]), arrow.numbers(np.array([1, 2]), np.int32)]
table = pa.Table.from_arrays(columns, schema=schema)
pq.write_table(table, {str(tmp_path / "t.parquet")!r})
back = pq.ParquetFile({str(tmp_path / "t.parquet")!r}).read()
assert arrow.to_numpy(back.column("n"), np.int32).tolist() == [1, 2]
assert "pandas" not in sys.modules
"""
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_int32_lists_are_the_arrays_pyarrow_converts() -> None:
    arrays = [np.array([1, 2, 3]), None, np.array([], dtype=np.int32), np.array([7], dtype=np.int64), None]
    expected = pa.array([None if a is None else a.tolist() for a in arrays], type=pa.list_(pa.int32()))
    got = arrow.int32_lists(arrays)
    got.validate(full=True)
    assert got.equals(expected)
    assert arrow.int32_lists([np.array([4, 5])]).equals(pa.array([[4, 5]], type=pa.list_(pa.int32())))
    assert arrow.int32_lists([]).equals(pa.array([], type=pa.list_(pa.int32())))
    assert arrow.int32_lists([None] * 9).equals(pa.array([None] * 9, type=pa.list_(pa.int32())))


def test_documents_written_as_parquet_never_need_pandas(tmp_path) -> None:
    script = (
        NO_PANDAS
        + f"""
from pathlib import Path
import numpy as np
from dataprep.docstore import DocWriter, read_docs
from dataprep.document import Document
docs = [Document("a", "文本", "s", meta={{"k": 1}}), Document("b", "x", "s", tokens=np.array([3, 4]))]
w = DocWriter(Path({str(tmp_path / "d.parquet")!r}))
w.write(docs)
w.close()
back = [d for b in read_docs(Path({str(tmp_path / "d.parquet")!r}), 10) for d in b]
assert back[0].tokens is None and back[1].tokens.tolist() == [3, 4] and back[0].meta == {{"k": 1}}
assert "pandas" not in sys.modules
"""
    )
    subprocess.run([sys.executable, "-c", script], check=True)
