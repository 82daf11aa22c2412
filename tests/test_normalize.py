"""normalize: Unicode repair, CJK-safe width folding, OpenCC on CJK runs, newlines."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stages._chars import HAN
from stages._opencc import to_simplified
from stages._text_repair import repair_mojibake
from stages._width_fold import fold_width
from stages.normalize import normalize_text

try:  # tests/ may or may not be a package
    from ._cleaning_helpers import DATA, real_lines, run_stage
except ImportError:
    from _cleaning_helpers import DATA, real_lines, run_stage  # type: ignore[no-redef]

HAN_CHAR = re.compile(f"[{HAN}]")


# -- width folding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("迈向新世纪（附图片１张）", "迈向新世纪（附图片1张）"),  # digits fold, CJK brackets stay
        ("价格：１００元，增长１５％。", "价格：100元，增长15%。"),
        ("Ｈｅｌｌｏ，Ｗｏｒｌｄ！", "Hello,World!"),
        ("Note：see ｈｔｔｐ://ａ．ｂ", "Note:see http://a.b"),
        ("他说：“Hello，”然后走了。", "他说：“Hello，”然后走了。"),  # comma next to a CJK quote run
        ("１．５倍", "1.5倍"),
        ("比较浅．但是", "比较浅．但是"),  # full-width stop used as a Chinese period
        ("（ＡＢＣ）", "(ABC)"),
        ("价格（ＵＳＤ）", "价格（USD）"),
        ("作者:柳开（９４６－９９９）", "作者:柳开（946-999）"),  # pair kept: CJK before it
        ("abc\u3000def", "abc def"),
        ("中文\u3000中文", "中文\u3000中文"),
        ("￥１２", "¥12"),
        ("ｶﾀｶﾅ｡", "ｶﾀｶﾅ。"),  # half-width katakana untouched, half-width 。 folded
    ],
)
def test_width_folding_mapping(raw: str, expected: str) -> None:
    assert fold_width(raw) == expected


def test_cjk_punctuation_is_never_folded() -> None:
    text = "他说，「好」『对』、然后。真的吗？是！好；注：……《书》【注】"
    assert fold_width(text) == text


def test_width_folding_on_real_reviews() -> None:
    for text in real_lines("review_fullwidth"):
        out = normalize_text(text, opencc="off")
        assert not re.search("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]", out)  # no full-width alnum left
        assert out.count("，") == text.count("，")  # Chinese commas all kept
        assert [c for c in out if HAN_CHAR.match(c)] == [c for c in text if HAN_CHAR.match(c)]


# -- OpenCC ------------------------------------------------------------------------------------

CASES = json.loads((DATA / "opencc_cases.json").read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("config", ["t2s", "tw2sp", "hk2s"])
def test_opencc_cases(config: str) -> None:
    cases = [c for c in CASES if config in c["expected"]]
    assert cases
    wrong = []
    latin = re.compile("[A-Za-z]+")
    for c in cases:
        got, expected = to_simplified(c["input"], config), c["expected"][config]
        if latin.findall(expected) != latin.findall(c["input"]):
            # OpenCC would change Latin letters (BMW集團 -> 宝马集团): by design they are kept
            assert latin.findall(got) == latin.findall(c["input"])
        elif got != expected:
            wrong.append((c["id"], c["input"], got, expected))
    assert not wrong


def test_opencc_leaves_urls_emails_code_and_latin_alone() -> None:
    text = "臺灣 https://zh.wikipedia.org/wiki/臺灣 mail 張三@臺灣.tw `print('臺灣')` B肝"
    out = to_simplified(text, "tw2sp")
    assert out.startswith("台湾 https://zh.wikipedia.org/wiki/臺灣 ")
    assert "`print('臺灣')`" in out
    assert out.endswith("B肝")  # tw2sp would map B肝 -> 乙肝; Latin letters stay


def test_opencc_off_and_real_poems() -> None:
    poem = real_lines("poem")[0]
    assert to_simplified(poem, "off") == poem
    simplified = normalize_text(poem)
    assert "壯" in poem and "壮" in simplified and "壯" not in simplified


# -- repair, controls, newlines ----------------------------------------------------------------


def test_mojibake_repairs() -> None:
    assert repair_mojibake("你好世界".encode().decode("gbk"))[0] == "你好世界"  # UTF-8 read as GBK
    assert repair_mojibake("你好世界".encode("gbk").decode("latin-1"))[0] == "你好世界"
    assert repair_mojibake("cafÃ© â€œquotedâ€\x9d")[0] == "café “quoted”"
    # lines of real spam mails (SpamAssassin corpus): GBK and Big5 read as Latin-1
    assert repair_mojibake("ÖÐÉ½ÊÐÅ·ÍþÕÕÃ÷Æ÷²Ä³§\n¹«Ë¾¼ò½é£º")[0] == "中山市欧威照明器材厂\n公司简介："
    assert repair_mojibake("¶ñ¼g¤¤¤å¥þ¦W¡A¤Å¶ñ¼g¼ÊºÙ")[0] == "填寫中文全名，勿填寫暱稱"
    for fine in ["浣溪沙 张孝祥", "Ärger über Öl", "秦川雄帝宅，函谷壯皇居。", "Communiqué", "ÀÉÈ é à"]:
        assert repair_mojibake(fine)[0] == fine


def test_ansi_controls_invisible_and_newlines() -> None:
    raw = "\x1b[32m《感遇》\x1b[m\r\n作者：张九龄\u200b\ufeff\x07\r\r\n\n\n"
    raw += "兰叶春葳蕤，  \u2028桂华秋皎洁。\x85end\t "
    assert normalize_text(raw) == "《感遇》\n作者：张九龄\n\n兰叶春葳蕤，\n桂华秋皎洁。\nend"


def test_paragraph_separator_and_char_refs() -> None:
    assert normalize_text("a\n\n\n\nb\nc", paragraph_separator="\n") == "a\nb\nc"
    assert normalize_text("a\n\n\n\nb") == "a\n\nb"
    text = real_lines("review_char_refs")[0]
    assert "&#160;" in text and "&#" not in normalize_text(text)


def test_stage_drops_empty_and_counts() -> None:
    results, stats = run_stage("normalize", ["\u200b \n\t", "臺灣１２３"])
    assert results[0].reason == "empty"  # type: ignore[union-attr]
    assert results[1].text == "台湾123"  # type: ignore[union-attr]
    assert stats.counters["opencc_changed"] == 1 and stats.counters["width_folded"] == 1


# -- properties ---------------------------------------------------------------------------------

ALPHABET = st.sampled_from(
    list("abcXYZ019 .,:;!?()-/@&#x\t\n\r")
    + list("中文臺灣壯麗漢字的了，。！？；：「」『』、…（）【】《》")
    + [chr(c) for c in range(0xFF01, 0xFF5F, 3)]
    + [
        "\u3000",
        "\u200b",
        "\ufeff",
        "\x1b",
        "[",
        "m",
        "\x85",
        "\u2028",
        "\x00",
        "\xa0",
        "\uf900",
        "é",
        "Ã",
        "©",
    ]
)
TEXTS = st.lists(ALPHABET, max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
@example("ééÃéÃＢ")  # folding Ｂ completed a GBK-as-Latin-1 run that only a second pass repaired
@example("ÃÃÃÃ©")  # the Latin-1 repair ("Ã©" -> "é") left a GBK-as-Latin-1 run behind
def test_idempotent(text: str) -> None:
    once = normalize_text(text)
    assert normalize_text(once) == once


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_han_characters_preserved_without_opencc(text: str) -> None:
    out = normalize_text(text, opencc="off", repair_mojibake=False)
    expected = [c for c in unicodedata.normalize("NFC", text) if HAN_CHAR.match(c)]
    assert [c for c in out if HAN_CHAR.match(c)] == expected


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_han_changes_only_by_opencc(text: str) -> None:
    plain = normalize_text(text, opencc="off", repair_mojibake=False)
    converted = normalize_text(text, opencc="t2s", repair_mojibake=False)
    assert [c for c in converted if HAN_CHAR.match(c)] == [
        c for c in to_simplified(plain, "t2s") if HAN_CHAR.match(c)
    ]


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_length_never_grows(text: str) -> None:
    out = normalize_text(text, opencc="off", repair_mojibake=False)
    assert len(out) <= len(unicodedata.normalize("NFC", text))
