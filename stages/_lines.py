"""Helpers for stages that remove lines or spans from documents (no stage here)."""

from __future__ import annotations

import re

BLANK_RUNS = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def tidy(text: str) -> str:
    """Collapse the blank lines a removal leaves behind and strip the ends."""
    if "\n\n\n" in text or "\n \n" in text:
        text = BLANK_RUNS.sub("\n\n", text)
    return text.strip()
