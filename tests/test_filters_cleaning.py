"""Quality filters: length, script mix, punctuation, garbled text, repetition."""

from __future__ import annotations

import pytest

from dataprep.stage import RecipeError
from stages._repeated_ngrams import ngram_scores
from stages.filter_garbled import garbled_scores

try:  # tests/ may or may not be a package
    from ._cleaning_helpers import drop_reason, real_lines, run_stage
except ImportError:
    from _cleaning_helpers import drop_reason, real_lines, run_stage  # type: ignore[no-redef]

POEMS = real_lines("poem")
REVIEWS = real_lines("review")


@pytest.mark.parametrize(
    "name",
    ["filter_length", "filter_script", "filter_punctuation", "filter_garbled", "filter_repetition"],
)
def test_real_prose_and_poetry_survive(name: str) -> None:
    texts = [*POEMS, *real_lines("review_fullwidth"), *real_lines("review_char_refs"), *real_lines("review")]
    results, stats = run_stage(name, texts)
    assert [r for r in results if not hasattr(r, "text")] == []
    assert stats.histograms and all(h.total() == len(texts) for h in stats.histograms.values())


def test_length_bounds() -> None:
    assert drop_reason("filter_length", "太短了") == "too_short"
    assert drop_reason("filter_length", "x" * 50, max_chars=40) == "too_long"
    assert drop_reason("filter_length", "一二三四五六七八\n九十", min_lines=3) == "too_few_lines"
    assert drop_reason("filter_length", POEMS[0]) is None
    with pytest.raises(RecipeError):
        run_stage("filter_length", ["x"], min_chars=10, max_chars=5)


def test_script_mix() -> None:
    assert drop_reason("filter_script", "上证A股1258·491265·861322·041265·48") == "low_han_share"
    english = "This is an ordinary English sentence written by a person, with 王 in it."
    assert drop_reason("filter_script", english) is None  # not a Chinese document
    assert drop_reason("filter_script", english, chinese_at=0.0) == "low_han_share"  # Chinese-only corpus
    art = "★☆★☆★☆★☆ ♥♥♥♥♥♥ ☎☎☎☎ ■■■■■■■■ 好东西 ★☆★☆★☆★☆"
    assert drop_reason("filter_script", art) == "too_many_symbols"
    results, _ = run_stage("filter_script", ["check in & check out比较快，服务也很好。"])
    assert hasattr(results[0], "text")


def test_punctuation_runs() -> None:
    names = "中国评剧院演员戴月琴北京市昌平县十三陵中心小学教师张燕红" * 12
    assert drop_reason("filter_punctuation", names) == "no_punctuation"
    assert drop_reason("filter_punctuation", names, max_chars=1000) is None
    english = " ".join(["word"] * 110)  # 440 non-space characters, no marks: below the Latin limit
    assert drop_reason("filter_punctuation", english) is None
    assert drop_reason("filter_punctuation", english + " " + " ".join(["more"] * 60)) == "no_punctuation"


def test_garbled_text() -> None:
    mojibake = "我们一起去公园散步吧，今天天气很好，阳光明媚，适合出门走走。".encode().decode(
        "gbk", "replace"
    )
    assert garbled_scores(mojibake)["gbk_mojibake_share"] > 0.3
    assert drop_reason("filter_garbled", mojibake) == "mojibake"
    assert drop_reason("filter_garbled", "好的锟斤拷锟斤拷锟斤拷锟斤拷锟斤拷，谢谢") == "mojibake"
    assert (
        drop_reason("filter_garbled", "这本书\ufffd\ufffd\ufffd很好看，推荐大家\ufffd\ufffd读。")
        == "bad_chars"
    )
    rare = "".join(chr(0x3400 + i * 7) for i in range(30))  # extension A soup
    assert drop_reason("filter_garbled", rare) == "rare_chars"
    for poem in POEMS:
        assert garbled_scores(poem)["rare_han_share"] < 0.25


def test_repetition_scores_chinese_on_characters() -> None:
    spam = "4999买的 机器和价格都不错 " * 6
    (scores,) = ngram_scores([spam], 20)
    assert scores["dup_10gram"] > 0.9 and scores["top_2gram"] > 0.25
    assert scores["han_units"] > 0.5
    assert drop_reason("filter_repetition", spam, min_units=20) == "repeated_ngrams"
    assert (
        drop_reason("filter_repetition", real_lines("review_repeated")[0], min_units=20) == "repeated_ngrams"
    )


def test_repetition_lines_and_refrains() -> None:
    lines = "\n".join(["点击这里查看更多精彩内容"] * 4 + ["第一行不同", "第二行不同"])
    assert drop_reason("filter_repetition", lines) == "repeated_lines"
    shijing = [p for p in POEMS if "国风" in p or "雅" in p]
    assert shijing
    for poem in shijing:
        assert drop_reason("filter_repetition", poem) is None  # refrains are not spam


def test_repetition_english_uses_gopher_limits() -> None:
    text = "buy cheap meds now " * 30
    assert drop_reason("filter_repetition", text) == "repeated_ngrams"
    prose = (
        "The committee met on Tuesday to review the budget. Several members raised concerns about "
        "the cost of the new library, while others argued that the town had postponed the project "
        "for too long. After two hours of debate they agreed to ask the architect for a cheaper plan "
        "and to hold a public meeting next month before any final vote is taken on the matter."
    )
    assert drop_reason("filter_repetition", prose) is None


def test_drops_carry_score_and_detail() -> None:
    (result,), _ = run_stage("filter_length", ["短"])
    assert result.reason == "too_short" and result.score == 1 and "chars" in result.detail  # type: ignore[union-attr]
    (kept,), _ = run_stage("filter_length", [POEMS[0]], keep_scores=True)
    assert kept.meta["scores"]["filter_length"]["chars"] == len(POEMS[0])  # type: ignore[union-attr]
