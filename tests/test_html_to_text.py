"""html_to_text: e-mail (MIME) and HTML documents to plain text."""

from __future__ import annotations

import base64

try:  # tests/ may or may not be a package
    from ._cleaning_helpers import kept_text, real_lines, run_stage
except ImportError:
    from _cleaning_helpers import kept_text, real_lines, run_stage  # type: ignore[no-redef]

from stages.html_to_text import html_to_text, looks_like_email, looks_like_html

MULTIPART = """From someone@example.com  Thu Aug 22 12:36:23 2002
From: Someone <someone@example.com>
To: list@example.com
Subject: =?utf-8?b?5rWL6K+V?= report
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="XX"

--XX
Content-Type: multipart/alternative; boundary="YY"

--YY
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: base64

{plain}
--YY
Content-Type: text/html; charset=utf-8

<html><body><p>HTML version</p></body></html>
--YY--
--XX
Content-Type: image/png; name="a.png"
Content-Transfer-Encoding: base64
Content-Disposition: attachment; filename="a.png"

iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==
--XX--
"""


def test_multipart_mail_decoded_attachments_dropped() -> None:
    plain = base64.b64encode("你好，这是正文。\nSecond line.".encode()).decode()
    results, stats = run_stage("html_to_text", [MULTIPART.format(plain=plain)])
    text = results[0].text  # type: ignore[union-attr]
    assert text == "Subject: 测试 report\n\n你好，这是正文。\nSecond line."
    assert stats.counters["attachments_dropped"] == 1 and stats.counters["alternative_skipped"] == 1
    assert stats.counters["mime_parts_decoded"] == 1


def test_real_mails() -> None:
    for kind in ("mail_plain", "mail_html", "mail_base64"):
        (mail,) = real_lines(kind)
        assert looks_like_email(mail)
        out = kept_text("html_to_text", mail)
        assert out is not None and out.startswith("Subject: ")
        assert "Received:" not in out and "Content-Type:" not in out
        assert "<p>" not in out.lower() and "<br" not in out.lower()


def test_html_document() -> None:
    page = (
        "<!DOCTYPE html><html><head><title>标题</title><style>p{color:red}</style>"
        "<script>var x = '<p>not text</p>';</script></head><body><div>第一段&nbsp;文字</div>"
        "<p>第二段 &amp; <b>粗体</b></p><table><tr><td>a</td><td>b</td></tr></table>"
        "<pre>line1\n  line2</pre><!-- comment --></body></html>"
    )
    text, removed = html_to_text(page)
    assert removed == 2
    assert [line for line in text.split("\n") if line] == [
        "标题",
        "第一段\xa0文字",
        "第二段 & 粗体",
        "a b",
        "line1",
        "line2",
    ]
    _, stats = run_stage("html_to_text", [page])
    assert stats.counters["html_docs"] == 1


def test_plain_text_untouched() -> None:
    for text in [*real_lines("poem"), "a < b and c > d", "Subject line without headers"]:
        assert not looks_like_email(text) and not looks_like_html(text)
        assert kept_text("html_to_text", text) == text


def test_mail_without_text_dropped() -> None:
    mail = (
        "From: a@example.com\nSubject: pic\nContent-Type: image/gif\nContent-Transfer-Encoding: base64\n\n"
        "R0lGODlhAQABAAAAACw=\n"
    )
    results, _ = run_stage("html_to_text", [mail])
    assert results[0].reason == "no_text"  # type: ignore[union-attr]


def test_single_part_quoted_printable_and_big5() -> None:
    qp = (
        "From: a@example.com\nSubject: hi\nContent-Type: text/plain; charset=utf-8\n"
        "Content-Transfer-Encoding: quoted-printable\n\ncaf=C3=A9 =E4=BD=A0=E5=A5=BD\n"
    )
    assert kept_text("html_to_text", qp) == "Subject: hi\n\ncafé 你好"
    big5_as_latin1 = "中文郵件".encode("big5").decode("latin-1")
    mail = f"From: a@example.com\nSubject: x\nContent-Type: text/plain; charset=big5\n\n{big5_as_latin1}\n"
    assert kept_text("html_to_text", mail) == "Subject: x\n\n中文郵件"
