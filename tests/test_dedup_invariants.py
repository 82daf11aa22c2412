"""What the dedup chain (paragraph_dedup, then minhash_dedup) must never do, whatever the corpus:

(a) two documents that are near duplicates apart from corpus-wide boilerplate stay near
    duplicates to MinHash, whichever copy paragraph_dedup keeps the boilerplate in;
(b) boilerplate shared by many unrelated documents (a common header, a licence footer, markup
    preambles), however long, never makes them near duplicates of each other.

The documents are real Song ci (sample_corpus/poetry/songci.parquet, MIT); boilerplate lines
are drawn per example.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import opencc
import pyarrow.parquet as pq
import pytest
from dedup_support import run_chain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataprep.document import Document, Drop
from dataprep.stage import build_params
from stages import _minhash as mh
from stages import _regional
from stages.minhash_dedup import MinhashDedup, MinhashDedupParams
from stages.paragraph_dedup import ParagraphDedup, ParagraphDedupParams

SAMPLE = Path(__file__).resolve().parent.parent / "sample_corpus"
BOILERPLATE = [
    "版权所有 © 2024 某某科技有限公司 保留所有权利 京ICP备12345678号",
    "首页 | 新闻 | 体育 | 财经 | 科技 | 娱乐 | 联系我们 | 关于本站 | 网站地图",
    "免责声明：本文仅代表作者个人观点，与本站无关，转载请注明出处。",
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    "Licensed under the Apache License, Version 2.0 (the License); you may not use this file",
    "扫一扫在手机上阅读本文 分享到：微信 微博 QQ空间 豆瓣 人人网 更多",
    "本站所有文章均来自网络，如有侵权请联系站长删除，联系邮箱见页面底部。",
    "上一篇：返回列表 下一篇：没有了 相关文章推荐 热门标签 最新评论 阅读排行",
]
CHAIN_SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@functools.lru_cache(maxsize=1)
def documents() -> list[str]:
    """Unrelated real documents: six consecutive Song ci each (~300 characters)."""
    texts = pq.read_table(SAMPLE / "poetry" / "songci.parquet", columns=["text"]).column("text").to_pylist()
    return ["\n".join(texts[i : i + 6]) for i in range(0, 6 * 40, 6)]


def jaccard(a: str, b: str) -> float:
    sa, sb = set(mh.shingle_strings(a)), set(mh.shingle_strings(b))
    return len(sa & sb) / len(sa | sb)


def chain(tmp: Path, docs: list[Document], max_docs: int = 3) -> list:
    stages = [
        ParagraphDedup(build_params(ParagraphDedupParams, {"max_docs": max_docs}, "t")),
        MinhashDedup(build_params(MinhashDedupParams, {}, "t")),
    ]
    half = len(docs) // 2
    results = run_chain(stages, [docs[:half], docs[half:]], tmp)
    return [r for task in results for r in task]


def near_dropped(results: list) -> set[str]:
    return {r.doc.id for r in results if isinstance(r, Drop) and r.reason == "near_duplicate"}


def with_lines(text: str, header: list[str], footer: list[str]) -> str:
    return "\n".join([*header, text, *footer])


@CHAIN_SETTINGS
@given(
    base=st.integers(0, 39),
    edit_at=st.floats(0.1, 0.9),
    lines=st.lists(st.sampled_from(BOILERPLATE), min_size=1, max_size=4, unique=True),
    holders=st.lists(st.integers(0, 18), min_size=4, max_size=12, unique=True),
    placement=st.sampled_from(["first copy", "second copy", "both", "neither"]),
    order=st.sampled_from(["as built", "reversed", "interleaved"]),
)
def test_near_duplicates_stay_near_duplicates_whatever_paragraph_dedup_removes(
    tmp_path: Path,
    base: int,
    edit_at: float,
    lines: list[str],
    holders: list[int],
    placement: str,
    order: str,
) -> None:
    pool = documents()
    original = pool[base]
    k = int(edit_at * len(original))
    copy = original[:k] + ("某" if original[k] != "某" else "甲") + original[k + 1 :]
    assert jaccard(original, copy) >= 0.95
    unrelated = [t for i, t in enumerate(pool[:20]) if i != base][:19]
    # boilerplate: the lines are in more than max_docs (3) unrelated documents
    docs = [
        Document(f"u{i}", with_lines(t, lines, []) if i in holders else t) for i, t in enumerate(unrelated)
    ]
    first = with_lines(original, lines, lines) if placement in ("first copy", "both") else original
    second = with_lines(copy, lines, []) if placement in ("second copy", "both") else copy
    docs += [Document("A", first), Document("B", second)]
    if order == "reversed":
        docs.reverse()
    elif order == "interleaved":
        docs = docs[::2] + docs[1::2]
    dropped = near_dropped(chain(tmp_path / f"w{abs(hash((base, k, tuple(lines), placement, order)))}", docs))
    assert len(dropped & {"A", "B"}) == 1, dropped
    assert dropped <= {"A", "B"}


@CHAIN_SETTINGS
@given(
    count=st.integers(4, 12),
    lines=st.lists(st.sampled_from(BOILERPLATE), min_size=1, max_size=8, unique=True),
    repeat=st.integers(1, 8),
    placement=st.sampled_from(["header", "footer", "both"]),
)
def test_shared_boilerplate_never_makes_unrelated_documents_near_duplicates(
    tmp_path: Path, count: int, lines: list[str], repeat: int, placement: str
) -> None:
    block = [f"{line} {r}" if r else line for r in range(repeat) for line in lines]  # up to 64 lines
    header = block if placement in ("header", "both") else []
    footer = block if placement in ("footer", "both") else []
    docs = [Document(f"u{i}", with_lines(t, header, footer)) for i, t in enumerate(documents()[:count])]
    results = chain(tmp_path / f"w{abs(hash((count, tuple(lines), repeat, placement)))}", docs)
    assert near_dropped(results) == set()


def dominating_block() -> list[str]:
    """Lines of 20+ characters of real text, 9 times as long as a document."""
    lines = "\n".join(documents()[30:39]).split("\n")
    return ["，".join(lines[i : i + 3]) for i in range(0, len(lines), 3)]


def test_boilerplate_that_dominates_every_document_makes_no_near_duplicates(tmp_path: Path) -> None:
    block = dominating_block()
    docs = [Document(f"u{i}", with_lines(t, block, block)) for i, t in enumerate(documents()[:6])]
    assert all(jaccard(a.text, b.text) >= 0.8 for a, b in itertools.combinations(docs, 2))  # as read
    assert near_dropped(chain(tmp_path, docs)) == set()


def test_without_paragraph_dedup_the_boilerplate_counts(tmp_path: Path) -> None:
    """The view only exists where paragraph_dedup ran: alone, minhash_dedup sees the whole text."""
    block = dominating_block()
    docs = [Document(f"u{i}", with_lines(t, block, [])) for i, t in enumerate(documents()[:4])]
    stage = MinhashDedup(build_params(MinhashDedupParams, {}, "t"))
    results = [r for task in run_chain([stage], [docs], tmp_path) for r in task]
    assert len(near_dropped(results)) == 3


# ---------------------------------------------------------------------------------------------
# Regional phrasing


@functools.lru_cache(maxsize=1)
def opencc_with_the_table() -> opencc.OpenCC:
    return _regional._converter()


KEYS = [k for k, _ in _regional.entries()]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(KEYS),
            st.sampled_from(KEYS).map(lambda k: k[:-1] or k),
            st.sampled_from(KEYS).map(lambda k: k[1:] or k),
            st.text(alphabet="的服务器资讯网路程式档案模组\n 。abc", max_size=4),
        ),
        max_size=12,
    )
)
def test_regional_fold_is_opencc_forward_maximum_matching_over_the_table(parts: list[str]) -> None:
    text = "".join(parts)
    assert _regional.fold_regional([text]) == [opencc_with_the_table().convert(text)]


@pytest.mark.parametrize("folded", [False, True])
def test_triggers_mark_what_each_entry_marks_on_its_own(folded: bool) -> None:
    """The trigger tables (built for all entries at once) equal the ones built entry by entry."""
    fold = mh.char_tables(True)[0] if folded else np.arange(0x110000, dtype=np.uint32)
    chars = np.zeros(len(fold), dtype=np.uint8)
    bigrams = np.zeros(1 << _regional.BITMAP_BITS, dtype=np.uint8)
    for key, value in _regional.entries():
        if len(key) == 1 and value == key:  # changes nothing: never a candidate
            continue
        cps = fold[[ord(c) for c in key]]
        if len(cps) == 1:
            chars[cps[0]] |= _regional.ONE_CHAR_KEY
            continue
        chars[cps[0]] |= _regional.STARTS_A_KEY
        chars[cps[1]] |= _regional.SECOND_OF_A_KEY
        if len(cps) == 2:
            bigrams[_regional._bigram_hash(cps[0], cps[1])] |= _regional.PAIR
        else:
            bigrams[_regional._bigram_hash(cps[0], cps[1])] |= _regional.FIRST
            bigrams[_regional._bigram_hash(cps[1], cps[2])] |= _regional.SECOND
    triggers = _regional.Triggers(fold)
    assert np.array_equal(triggers.chars, chars)
    assert np.array_equal(triggers.bigrams, bigrams)


def test_the_shingler_folds_as_the_text_fold_does() -> None:
    taiwan, mainland = "这台伺服器的资讯档案在网路上。", "这台服务器的信息文件在网络上。"
    texts = [*documents()[:10], taiwan, mainland, "plain English"]
    folded = mh.shingle_batch(_regional.fold_regional(texts))
    inline = mh.shingle_batch(texts, fold_regional=True)
    assert (folded.hashes == inline.hashes).all() and (folded.offsets == inline.offsets).all()
    assert mh.shingle_strings(taiwan, fold_regional=True) == mh.shingle_strings(mainland, fold_regional=True)


def test_a_taiwan_copy_converted_to_simplified_is_a_near_duplicate_only_once_folded() -> None:
    mainland = "在服务器上添加插件之前，请先检查网络设置，并确认模块已经激活。信息会保存在日志文件中。"
    taiwan = "在伺服器上新增外掛之前，請先檢查網路設定，並確認模組已經啟用。資訊會保存在日誌檔案中。"
    converted = opencc.OpenCC("t2s").convert(taiwan)
    plain = set(mh.shingle_strings(mainland)), set(mh.shingle_strings(converted))
    folded = (
        set(mh.shingle_strings(mainland, fold_regional=True)),
        set(mh.shingle_strings(converted, fold_regional=True)),
    )
    assert len(plain[0] & plain[1]) / len(plain[0] | plain[1]) < 0.5
    assert len(folded[0] & folded[1]) / len(folded[0] | folded[1]) >= 0.8
