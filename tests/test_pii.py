"""PII scrubbing: true positives replaced, look-alikes left alone."""

from __future__ import annotations

import pytest

from stages.pii import ID_CHECK, ID_WEIGHTS, PiiParams, PiiScrubber, luhn_ok, valid_resident_id

try:  # tests/ may or may not be a package
    from ._cleaning_helpers import run_stage
except ImportError:
    from _cleaning_helpers import run_stage  # type: ignore[no-redef]


def _resident_id(body17: str) -> str:
    return body17 + ID_CHECK[sum(int(c) * w for c, w in zip(body17, ID_WEIGHTS, strict=True)) % 11]


def _luhn_complete(body: str) -> str:
    return next(body + d for d in "0123456789" if luhn_ok(body + d))


VALID_ID = _resident_id("11010519491231002")  # Beijing, born 1949-12-31
SCRUB = PiiScrubber(PiiParams())


def scrub(text: str) -> str:
    return SCRUB.scrub(text)[0]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("邮箱zhang.san@example.com，欢迎来信", "邮箱<EMAIL>，欢迎来信"),
        ("From: jm@jmason.org (Justin Mason)", "From: <EMAIL> (Justin Mason)"),
        ("电话13812345678", "电话<PHONE>"),
        ("请拨 +86 138-1234-5678 或 0086 13912345678", "请拨 <PHONE> 或 <PHONE>"),
        (f"身份证号{VALID_ID}。", "身份证号<ID>。"),
        ("卡号 4111 1111 1111 1111 谢谢", "卡号 <BANK_CARD> 谢谢"),
        (f"银联卡{_luhn_complete('621226020000000000')}", "银联卡<BANK_CARD>"),
        ("server at 192.168.1.20 responded", "server at <IP> responded"),
        ("addr 2001:db8::8a2e:370:7334 up", "addr <IP> up"),
        (
            "https://api.example.com/v1/items?access_token=abcDEF123&page=2",
            "https://api.example.com/v1/items?access_token=<SECRET>&page=2",
        ),
        ("ftp://admin:hunter2@files.example.com/pub", "ftp://<SECRET>@files.example.com/pub"),
    ],
)
def test_true_positives_replaced(raw: str, expected: str) -> None:
    assert scrub(raw) == expected


@pytest.mark.parametrize(
    "text",
    [
        "订单号：202312150001234567，请查收",  # 18 digits, no valid province/date/check
        "订单号 4111111111111111 已发货",  # Luhn-valid, but named an order number
        "快递单号 SF1234567890123",
        "日期 2023-12-15 12:30:45，时间戳 1700000000000",
        "版本 1.2.3.4 发布，v10.0.0.1 修复了问题，version 2.0.0.1",
        "Python 3.11.2 and numpy 1.26.4",
        "价格 12.50 元，增长 3.5%",
        "电话号码138123456789多了一位",  # 12 digits: not a mobile number
        "std::vector<int> and a::b::c",
        "MAC 00:1A:2B:3C:4D:5E",
        "本地 127.0.0.1 和 0.0.0.0 不算",
        "https://example.com/search?q=token&page=2",
        "ISBN 9787020002207",
        "IP 地址 999.1.1.1 无效",
    ],
)
def test_look_alikes_left_alone(text: str) -> None:
    assert scrub(text) == text


def test_id_and_luhn_validation() -> None:
    assert valid_resident_id(VALID_ID)
    wrong_check = VALID_ID[:-1] + ("0" if VALID_ID[-1] != "0" else "1")
    assert not valid_resident_id(wrong_check)
    assert not valid_resident_id(_resident_id("11010519491331002"))  # month 13
    assert not valid_resident_id(_resident_id("99010519491231002"))  # no province 99
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")


def test_counts_per_type_and_type_selection() -> None:
    text = f"a@b.com 13812345678 {VALID_ID} 10.1.2.3 c@d.org"
    results, stats = run_stage("pii", [text])
    assert results[0].text == "<EMAIL> <PHONE> <ID> <IP> <EMAIL>"  # type: ignore[union-attr]
    assert stats.counters["pii.email"] == 2 and stats.counters["pii.phone"] == 1
    assert stats.counters["pii.id"] == 1 and stats.counters["pii.ip"] == 1
    results, _ = run_stage("pii", [text], types=["email"])
    assert results[0].text.startswith("<EMAIL> 13812345678")  # type: ignore[union-attr]
