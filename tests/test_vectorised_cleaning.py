"""The vectorised batch paths of the cleaning stages equal their per-document reference paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stages import _repeated_lines as rep
from stages._charclass import BatchChars
from stages._layout import layout

# characters the line and layout rules look at: newlines, blanks, separators, backticks,
# prompts, fences, CJK, Latin, a lone surrogate, a character beyond the BMP
ALPHABET = [*"\n\n\n  \t\u3000\x1c\x85|`$#~-=>{};长相思。ab1", "\ud800", "\U00020000", "```", "$ ls", "| a |"]
texts_st = st.lists(st.lists(st.sampled_from(ALPHABET), max_size=40).map("".join), min_size=1, max_size=12)


def reference_line_shares(texts: list[str], min_line_chars: int) -> np.ndarray:
    bc = BatchChars.of(texts)
    lay = layout(bc)
    return np.array([rep._line_shares(t, min_line_chars, lay.kinds_of(i)) for i, t in enumerate(texts)])


@settings(max_examples=300, deadline=None)
@given(texts_st, st.sampled_from([0, 1, 2, 5]))
def test_line_shares_equal_the_per_document_path(texts: list[str], min_line_chars: int) -> None:
    bc = BatchChars.of(texts)
    assert np.array_equal(
        rep.line_share_columns(bc, min_line_chars), reference_line_shares(texts, min_line_chars)
    )


@settings(max_examples=60, deadline=None)
@given(texts_st)
def test_line_shares_on_hash_collisions(texts: list[str]) -> None:
    """With every piece hashing alike, the exact comparison sends texts with differing pieces of
    one key down the per-document path: the scores stay the same."""
    original = rep.Prefix.hashes
    try:
        rep.Prefix.hashes = lambda self, first, length: np.zeros(len(first), dtype=np.uint64)  # type: ignore[method-assign]
        got = rep.line_share_columns(BatchChars.of(texts), 1)
    finally:
        rep.Prefix.hashes = original  # type: ignore[method-assign]
    assert np.array_equal(got, reference_line_shares(texts, 1))


def test_line_shares_of_a_repeated_poem_and_a_manual() -> None:
    poem = "长相思，山一重。\n别的句子在这里。\n\n长相思，山一重。\n别的句子在这里。\n\n长相思，山一重。"
    again = "Then run it again and again."
    manual = f"Run it:\n\n$ make build\n$ make build\n\n{again}\n\n{again}"
    texts = [poem, manual, "", "\n\n\n", "一行\n\n\n\n一行"]
    got = rep.line_share_columns(BatchChars.of(texts), 5)
    assert np.array_equal(got, reference_line_shares(texts, 5))
    assert got[0, 0] > 0.5 and got[0, 2] > 0 and got[1, 2] > 0 and got[4, 0] == 0 and got[4, 2] == 0.5


# -- normalize: OpenCC t2s as a table where it converts character by character -----------------

# Traditional characters, the first characters of phrases (乾隆 keeps 乾, 著作 keeps 著), an
# ideographic description character, a compatibility ideograph, NUL, Latin and newlines
OPENCC_ALPHABET = [*"漢語說話乾隆著作權書後面臺灣\u2ff0氵每\uf900\x00ab \n", "乾隆", "著作", "⿰氵每"]


@pytest.fixture(scope="module")
def t2s():  # type: ignore[no-untyped-def]
    from stages._opencc import CharMap, converter

    table = CharMap.of("t2s")
    if table is None:
        pytest.skip("installed OpenCC dictionaries are not the recorded ones")
    return table, converter("t2s").convert


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(OPENCC_ALPHABET), max_size=30).map("".join), min_size=2, max_size=10)
)
def test_opencc_table_equals_opencc_per_document(t2s, segments: list[str]) -> None:  # type: ignore[no-untyped-def]
    table, convert = t2s
    assert table.convert_marked(segments, convert)[0] == [convert(s) for s in segments]


def test_opencc_table_sends_phrases_to_opencc(t2s) -> None:  # type: ignore[no-untyped-def]
    table, convert = t2s
    segments = ["乾隆皇帝的書", "乾燥的天氣", "⿰氵每漢", "漢語"]
    assert table.convert_marked(segments, convert)[0] == [convert(s) for s in segments]
    assert convert("乾隆") != "".join(map(convert, "乾隆"))  # (a phrase does not convert char by char)


def test_opencc_batch_keeps_an_incomplete_description_sequence_to_its_document(t2s) -> None:  # type: ignore[no-untyped-def]
    """OpenCC keeps a whole ideographic description sequence as it is: joined by a newline, the
    incomplete "⿰漢" of one document would take the newline and the next one as operands."""
    from stages._opencc import _convert_all

    table, convert = t2s
    segments = ["⿰漢", "漢語", "⿱漢", "語"]
    expected = [convert(s) for s in segments]
    assert convert("\n".join(segments[:2])) != "\n".join(expected[:2])  # (why it matters)
    assert _convert_all(segments, convert) == expected
    assert table.convert_marked(segments, convert)[0] == expected


# -- normalize: the batch path (flags, quiet texts, the table) equals the per-text Normalizer --

NORMALIZE_ALPHABET = st.sampled_from(
    [
        *"漢語說話乾隆著作書後臺灣中文abc1 \n\t\u3000：，（）Ａ１&;#\x1b\u200b\xa0é浣犲ソ",
        "乾隆",
        "\n\n\n",
        "&#183;",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(NORMALIZE_ALPHABET, max_size=40).map("".join), min_size=1, max_size=12))
def test_normalize_batch_equals_per_text(texts: list[str]) -> None:
    from dataprep.document import Document
    from dataprep.stage import StageContext
    from dataprep.stats import StageStats
    from stages.normalize import Normalize, NormalizeParams, Normalizer

    params = NormalizeParams()
    docs = [Document(id=str(i), text=t) for i, t in enumerate(texts)]
    Normalize(params).process(docs, StageContext(stats=StageStats(), work_dir=Path(".")))
    one = Normalizer(params)
    assert [d.text for d in docs] == [one(t)[0] for t in texts]


# -- boilerplate: the batch prefilter only skips lines the exact per-text path keeps -----------

BOILERPLATE_ALPHABET = st.sampled_from(
    [
        *"首页新闻关于我们杜甫三绝句一二 \n\t\u3000|·/>-ab",
        " | ",
        " / ",
        " > ",
        "  ",
        "版权所有",
        "Home",
        "首页",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(BOILERPLATE_ALPHABET, max_size=30).map("".join), min_size=1, max_size=12))
@example(["三绝句 一 杜甫\n首页 | 新闻 | 关于我们\n正文", "首页 > 新闻中心 > 正文", "野望 杜甫"])
def test_boilerplate_batch_equals_exact_path(texts: list[str]) -> None:
    from dataprep.document import Document
    from dataprep.stage import StageContext
    from dataprep.stats import StageStats
    from stages.boilerplate import Boilerplate, BoilerplateParams

    stage = Boilerplate(BoilerplateParams())
    docs = [Document(id=str(i), text=t) for i, t in enumerate(texts)]
    stage.process(docs, StageContext(stats=StageStats(), work_dir=Path(".")))
    assert [d.text for d in docs] == [stage.clean(t, {}) for t in texts]


# -- documents between passes: metadata JSON reused for equal metadata -------------------------

META_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, float("nan")]),
    st.text(max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "lang"]), META_VALUES, max_size=3), max_size=20))
def test_meta_json_equals_the_encoder(metas: list[dict]) -> None:  # type: ignore[type-arg]
    from dataprep.document import _META_ENCODER, Document

    for meta in [*metas, {1: "x"}, {True: "x"}, {"a": [1]}, {"a": (1, 2)}]:
        expected = _META_ENCODER.encode(meta) if meta else ""
        assert Document(id="x", text="t", meta=dict(meta)).meta_json() == expected


def test_frames_store_each_documents_metadata_once(tmp_path: Path) -> None:
    from dataprep.docstore import DocWriter, read_docs
    from dataprep.document import Document

    meta = {
        "source": "npm:chinese-poetry@2.0.1 dist/quantangshi/poet.tang.*.json",
        "lang": "zh",
        "score": 1.0,
    }
    docs = [Document(id=str(i), text="床前明月光", meta=dict(meta)) for i in range(1000)]
    writer = DocWriter(tmp_path / "t.frames")
    writer.write(docs)
    writer.close()
    # Arrow frames hold each document's metadata JSON once (no copy beyond it, no pickle memo of
    # shared values): the file is the strings' bytes plus their offsets and Arrow's framing
    raw = sum(
        len(d.id) + len(d.text.encode()) + len(d.source or "") + len(d.meta_json().encode()) for d in docs
    )
    assert raw < (tmp_path / "t.frames").stat().st_size < raw + 24 * len(docs) + 4096  # 5 offsets each
    back = [d for batch in read_docs(tmp_path / "t.frames", 1000) for d in batch]
    assert [d.meta for d in back] == [meta] * 1000
