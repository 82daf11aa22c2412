"""Rebuild stages/data/han_forms.json: the Han characters OpenCC t2s changes and s2t does not
(Traditional-only forms) and those s2t changes and t2s does not (Simplified-only forms), each
character converted alone, with fingerprints of the t2s and s2t dictionaries they were read from.

Usage: python bench/make_han_forms.py

The lang_id stage labels Chinese ``Hant`` when a text has more Traditional-only than
Simplified-only characters. It reads this file when the installed OpenCC has the recorded
fingerprints and otherwise computes the same sets itself (about half a second per process).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stages._opencc import fingerprint as opencc_fingerprint  # noqa: E402
from stages._script_classes import HAN_FORMS_FILE, han_forms_computed  # noqa: E402


def main() -> None:
    import opencc

    trad, simp = han_forms_computed()
    out = {
        "opencc": getattr(opencc, "__version__", ""),
        "fingerprints": {c: opencc_fingerprint(c) for c in ("t2s", "s2t")},
        "trad": trad,
        "simp": simp,
    }
    HAN_FORMS_FILE.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{HAN_FORMS_FILE}: {len(trad)} Traditional-only, {len(simp)} Simplified-only characters")


if __name__ == "__main__":
    main()
