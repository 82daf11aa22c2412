"""Language identification set: real documents labelled with the language their source says they are in
(the locale of the translation), never a model's guess.

Usage:
    python bench/realdata/build_langid.py --cache DIR --out OUT [--docs-per-lang N] [--short-per-lang N]

Writes OUT/langid/docs.jsonl. ``category``:
  * ``document``: document-length texts: LibreOffice help pages (12 locales), debian-reference sections
    (9 locales), HKCanCor conversations (Cantonese, in chunks of 40 utterances);
  * ``short``: 10-80 characters: Django and Wagtail catalogue messages (one msgstr; English: msgids),
    CTCPC Cantonese sentences, HKCanCor utterances;
  * ``message_chunk``: 15-40 consecutive messages of one Django / Wagtail catalogue, one a line
    (licence-clean document-length texts for every language; UI strings, not prose);
  * ``mixed_zh_en_tech``: Chinese debian-reference sections with shell commands or ASCII tables of
    package names (Latin letters 20-70% of the non-space characters), labelled zh.
Pages and sections left (mostly) untranslated are dropped: a line of a translated page that is
identical to a line of the English page of the same id counts as untranslated (indented code lines
excepted); a document is kept when under 20% of its characters are in such lines.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _common import (
    LOCALES,
    JsonlWriter,
    doc,
    han_fraction,
    hangul_fraction,
    kana_fraction,
    latin_fraction,
    message_text,
    nonspace_len,
    stable_hash,
    stable_sample,
)
from _sources import (
    LO_DIRS,
    Unit,
    catalogue,
    catalogue_files,
    ctcpc,
    dref_sections,
    hkcancor,
    lo_pages,
)
from fetch import BY_KEY, default_cache

UNTRANSLATED_MAX = 0.20
DREF_LANGS = ("zh-cn", "zh-tw", "en", "de", "es", "fr", "it", "ja", "pt")
DJANGO_LOCALES = ("zh_Hans", "zh_Hant", "ja", "ko", "de", "es", "it", "fr", "ru", "pt", "pt_BR")
LANG_NAME = {
    "zh-cn": "zh_CN",
    "zh-tw": "zh_TW",
    "zh-CN": "zh_CN",
    "zh-TW": "zh_TW",
    "zh_Hans": "zh_CN",
    "zh_Hant": "zh_TW",
}


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("    ")]


def untranslated_fraction(text: str, english: str | None) -> float:
    if english is None:
        return 0.0
    en = set(_lines(english))
    lines = _lines(text)
    total = sum(len(ln) for ln in lines)
    if not total:
        return 1.0
    return sum(len(ln) for ln in lines if ln in en and any(ch.isalpha() for ch in ln)) / total


def _plausible(text: str, lang: str) -> bool:
    """Sanity checks that only catch documents of the wrong script (not a language model)."""
    if lang == "zh":
        return han_fraction(text) >= 0.3
    if lang == "ja":
        return kana_fraction(text) >= 0.05
    if lang == "ko":
        return hangul_fraction(text) >= 0.3
    return True


def _udoc(u: Unit, category: str, group: str, **extra: Any) -> dict[str, Any]:
    lang, script = LOCALES[u.locale]
    return doc(
        id=f"{u.key.split(':', 1)[1]}:{u.path}",
        source=u.source,
        licence=u.licence,
        lang=lang,
        script=script,
        category=category,
        group=group,
        text=u.text,
        registry=u.key.split(":")[0],
        clean=u.clean,
        locale=LANG_NAME.get(u.locale, u.locale),
        **extra,
    )


def lo_documents(cache: Path, per_lang: int) -> list[dict[str, Any]]:
    english = {u.align: u.text for u in lo_pages(cache, "en-us")}
    out = []
    for lang in LO_DIRS:
        cand = []
        for u in lo_pages(cache, lang):
            if nonspace_len(u.text) < 300:
                continue
            frac = 0.0 if lang == "en-us" else untranslated_fraction(u.text, english.get(u.align))
            if frac >= UNTRANSLATED_MAX or not _plausible(u.text, LOCALES[u.locale][0]):
                continue
            cand.append((u, frac))
        for u, frac in stable_sample(cand, per_lang, key=lambda uf: uf[0].align, salt=f"lo-langid:{lang}"):
            out.append(_udoc(u, "document", u.align, untranslated_frac=round(frac, 3)))
    return out


Docs = list[dict[str, Any]]


def dref_documents(cache: Path, per_lang: int, mixed: int) -> tuple[Docs, Docs]:
    english = {u.align: u.text for u in dref_sections(cache, "en")}
    docs, mixed_docs = [], []
    for lang in DREF_LANGS:
        cand, mcand = [], []
        for u in dref_sections(cache, lang):
            if nonspace_len(u.text) < 300:
                continue
            frac = 0.0 if lang == "en" else untranslated_fraction(u.text, english.get(u.align))
            if frac >= UNTRANSLATED_MAX:
                continue
            lat = latin_fraction(u.text)
            lines = u.text.splitlines()
            code = sum(1 for ln in lines if ln.lstrip().startswith(("$ ", "# ")))
            table = sum(1 for ln in lines if ln.lstrip().startswith(("|", "+-")))
            if lang.startswith("zh") and 0.2 <= lat <= 0.7 and (code or table >= 3):
                mcand.append((u, frac))
            elif _plausible(u.text, LOCALES[u.locale][0]):
                cand.append((u, frac))
        for u, frac in stable_sample(cand, per_lang, key=lambda uf: uf[0].align, salt=f"dref-langid:{lang}"):
            docs.append(_udoc(u, "document", u.align, untranslated_frac=round(frac, 3)))
        picked = stable_sample(mcand, mixed // 2, key=lambda uf: uf[0].align, salt=f"dref-mixed:{lang}")
        for u, frac in picked:
            mixed_docs.append(
                _udoc(
                    u,
                    "mixed_zh_en_tech",
                    u.align,
                    untranslated_frac=round(frac, 3),
                    latin_frac=round(latin_fraction(u.text), 3),
                )
            )
    return docs, mixed_docs


SHORT_CATALOGUES = (
    ("pypi:django", "django/**/locale/{loc}/LC_MESSAGES/*.po"),
    ("pypi:wagtail", "wagtail/**/locale/{loc}/LC_MESSAGES/*.po"),
)


def catalogue_short(cache: Path, per_lang: int) -> list[dict[str, Any]]:
    """Single catalogue messages of 10-80 characters from Django and Wagtail; English: the msgids."""
    out = []
    msgids: dict[str, tuple[str, str]] = {}
    for loc in DJANGO_LOCALES:
        cand = []
        seen = set()
        files = [
            (key, cat_id, path)
            for key, pattern in SHORT_CATALOGUES
            for cat_id, path in catalogue_files(cache, key, pattern, loc)
        ]
        for key, cat_id, path in files:
            for m in catalogue(cache, key, path):
                t = message_text(m.msgstr)
                if not 10 <= len(t) <= 80 or t == m.msgid or t in seen or "\n" in t:
                    continue
                if not _plausible(t, LOCALES[loc][0]) and loc in ("zh_Hans", "zh_Hant", "ko"):
                    continue
                seen.add(t)
                cand.append((key, cat_id.replace("{loc}", loc), m.key, t))
                msgids.setdefault(m.key, (key, cat_id.replace("{loc}", "*")))
        for key, rel, mkey, t in stable_sample(cand, per_lang, key=lambda c: c[2], salt=f"msg:{loc}"):
            pkg = BY_KEY[key]
            lang, script = LOCALES[loc]
            out.append(
                doc(
                    id=f"{pkg.name}:{rel}#{mkey}",
                    source=f"{pkg.label}:{rel}",
                    licence=pkg.licence,
                    lang=lang,
                    script=script,
                    category="short",
                    group=f"msg:{mkey}",
                    text=t,
                    registry="pypi",
                    clean=True,
                    locale=LANG_NAME.get(loc, loc),
                )
            )
    ids = [
        (key, rel, k)
        for k, (key, rel) in msgids.items()
        if 10 <= len(message_text(k.split("\x04")[-1])) <= 80 and "\n" not in k
    ]
    for key, rel, k in stable_sample(sorted(ids), per_lang, key=lambda c: c[2], salt="msg:en"):
        pkg = BY_KEY[key]
        out.append(
            doc(
                id=f"{pkg.name}:{rel}#msgid:{k}",
                source=f"{pkg.label}:{rel}",
                licence=pkg.licence,
                lang="en",
                script="Latn",
                category="short",
                group=f"msg:{k}",
                text=message_text(k.split("\x04")[-1]),
                registry="pypi",
                clean=True,
                locale="en",
                note="msgid (English source string of the catalogues)",
            )
        )
    return out


def catalogue_chunks(cache: Path, per_lang: int) -> list[dict[str, Any]]:
    """Licence-clean document-length texts for every language: runs of 15-40 consecutive translated
    messages of one Django / Wagtail catalogue, one message a line (category ``message_chunk``)."""
    out = []
    for loc in DJANGO_LOCALES:
        cand = []
        for key, pattern in SHORT_CATALOGUES:
            for cat_id, path in catalogue_files(cache, key, pattern, loc):
                msgs = [
                    message_text(m.msgstr)
                    for m in catalogue(cache, key, path)
                    if message_text(m.msgstr) and message_text(m.msgstr) != m.msgid
                ]
                i = n = 0
                while i + 15 <= len(msgs):
                    size = 15 + stable_hash(cat_id, loc, str(n)) % 26
                    cand.append((key, cat_id, n, "\n".join(msgs[i : i + size])))
                    i += size
                    n += 1
        for key, cat_id, n, text in stable_sample(
            cand, per_lang, key=lambda c: f"{c[1]}#{c[2]}", salt=f"chunk:{loc}"
        ):
            if not _plausible(text, LOCALES[loc][0]):
                continue
            pkg = BY_KEY[key]
            rel = cat_id.replace("{loc}", loc)
            lang, script = LOCALES[loc]
            out.append(
                doc(
                    id=f"{pkg.name}:{rel}#chunk{n}",
                    source=f"{pkg.label}:{rel}",
                    licence=pkg.licence,
                    lang=lang,
                    script=script,
                    category="message_chunk",
                    group=f"msgchunk:{cat_id}#{n}:{loc}",
                    text=text,
                    registry="pypi",
                    clean=True,
                    locale=LANG_NAME.get(loc, loc),
                )
            )
    return out


def cantonese(cache: Path, n_docs: int, n_short: int) -> list[dict[str, Any]]:
    pkg = BY_KEY["pypi:pycantonese"]
    lic_hk = "CC BY 4.0 (HKCanCor, K. K. Luke and May L. Y. Wong); package MIT"
    lic_ct = "CC0-1.0 (CTCPC sentences); package MIT"
    docs, shorts = [], []
    for path, utts in hkcancor(cache):
        for i in range(0, len(utts), 40):
            part = utts[i : i + 40]
            if len(part) < 10:
                continue
            docs.append(
                doc(
                    id=f"pycantonese:{path}#u{i}",
                    source=f"{pkg.label}:{path}",
                    licence=lic_hk,
                    lang="yue",
                    script="Hant",
                    category="document",
                    group=f"hkcancor:{path}",
                    text="\n".join(part),
                    registry="pypi",
                    clean=True,
                    locale="yue",
                    transform="word spaces of the segmented transcription removed",
                )
            )
        for j, u in enumerate(utts):
            if 10 <= len(u) <= 80 and han_fraction(u) >= 0.5:
                shorts.append(
                    doc(
                        id=f"pycantonese:{path}#utt{j}",
                        source=f"{pkg.label}:{path}",
                        licence=lic_hk,
                        lang="yue",
                        script="Hant",
                        category="short",
                        group=f"hkcancor:{path}",
                        text=u,
                        registry="pypi",
                        clean=True,
                        locale="yue",
                        transform="word spaces of the segmented transcription removed",
                    )
                )
    out = stable_sample(docs, n_docs, key=lambda d: d["id"], salt="hkcancor-docs")
    out += stable_sample(shorts, n_short // 2, key=lambda d: d["id"], salt="hkcancor-short")
    sents = ctcpc(cache)
    cand = [
        (i, s.strip()) for i, s in enumerate(sents) if 10 <= len(s.strip()) <= 80 and han_fraction(s) >= 0.5
    ]
    for i, s in stable_sample(cand, n_short - n_short // 2, key=lambda c: str(c[0]), salt="ctcpc"):
        out.append(
            doc(
                id=f"pycantonese:pycantonese/data/ctcpc/sents.json#{i}",
                source=f"{pkg.label}:pycantonese/data/ctcpc/sents.json",
                licence=lic_ct,
                lang="yue",
                script="Hant",
                category="short",
                group=f"ctcpc:{i}",
                text=s,
                registry="pypi",
                clean=True,
                locale="yue",
            )
        )
    return out


def build(cache: Path, out: Path, per_lang: int, short_per_lang: int) -> dict[str, Any]:
    w = JsonlWriter(out / "langid" / "docs.jsonl")
    stats: Counter[tuple[str, str, str]] = Counter()
    parts: list[list[dict[str, Any]]] = []
    print("langid: libreoffice", file=sys.stderr, flush=True)
    parts.append(lo_documents(cache, per_lang))
    print("langid: debian-reference", file=sys.stderr, flush=True)
    d, m = dref_documents(cache, per_lang // 2, per_lang)
    parts += [d, m]
    print("langid: django, cantonese", file=sys.stderr, flush=True)
    parts.append(catalogue_short(cache, short_per_lang))
    parts.append(catalogue_chunks(cache, per_lang // 5))
    parts.append(cantonese(cache, per_lang, short_per_lang))
    for part in parts:
        for x in part:
            w.write(x)
            label = x["lang"] + ("/" + x["script"] if x["lang"] == "zh" else "")
            stats[(label, x["category"], x["split"])] += 1
    w.close()
    table: dict[str, dict[str, int]] = defaultdict(dict)
    for (lang, cat, split), n in sorted(stats.items()):
        table[lang][f"{cat}/{split}"] = n
    return {"docs": w.count, "by_lang": dict(table)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--docs-per-lang", type=int, default=300)
    ap.add_argument("--short-per-lang", type=int, default=400)
    a = ap.parse_args(argv)
    print(build(a.cache, a.out, a.docs_per_lang, a.short_per_lang))
    return 0


if __name__ == "__main__":
    sys.exit(main())
