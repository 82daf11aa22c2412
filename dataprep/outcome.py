"""The line a run fails with when no document is left: how many were read, what dropped them (by
reason, with where the largest reason's first drop came from) and what to change in the recipe.

The run still writes stats.json and report.html (which shows the line); see
:func:`dataprep.executor.prepare`.
"""

from __future__ import annotations

from typing import Any

SHOWN_REASONS = 4  # reasons named in the line, largest first


def read_hint(reason: str, input_params: dict[str, Any]) -> str | None:
    """What to change when the readers drop most records for ``reason`` (``input:`` options)."""
    hints = {
        "line_too_long": f"raise input.max_line_bytes (now {input_params.get('max_line_bytes')}) "
        "or cut such records into lines",
        "malformed_json": "fix the JSON lines named, or set input.format if these files are not JSONL",
        "missing_field": f"set input.text_field to the field that holds the text "
        f"(now {input_params.get('text_field')!r})",
        "bad_field_type": f"set input.text_field to a field that holds text "
        f"(now {input_params.get('text_field')!r})",
        "invalid_utf8": "set input.invalid_utf8: replace to keep such records with U+FFFD",
        "invalid_encoding": f"check input.encoding (now {input_params.get('encoding')!r}), or set "
        "input.invalid_utf8: replace to keep such records with U+FFFD",
    }
    return hints.get(reason)


def nothing_left_message(stats: dict[str, Any], hints: dict[str, str], input_params: dict[str, Any]) -> str:
    """One line: ``K of N documents left: <stage/reason> <count> (first: <where>), ...; <hint>``:
    reasons largest first, where the largest one's first drop came from, then what to change for
    it and for the stage that dropped the last documents left (a deduplication never does: it
    keeps one of each). ``hints``: what to change, by ``stage/reason`` (none for some reasons);
    ``input_params``: the recipe's ``input:``."""
    totals = stats["totals"]
    if totals["docs_in"] == 0:
        skipped: dict[str, list[str]] = {}  # kind of note -> files
        for note in stats["input"]["file_notes"]:
            skipped.setdefault(note["kind"], []).append(note["file"])
        listed = ", ".join(f"{kind} {len(fs)} (first: {fs[0]})" for kind, fs in skipped.items())
        return (
            f"no document was read from {stats['input']['files']} input file(s)"
            + (f" (skipped: {listed})" if listed else "")
            + f": check the INPUT paths and input.format (now {input_params.get('format')})"
        )
    reasons = sorted(totals["dropped_by_reason"].items(), key=lambda kv: -kv[1])  # ties: stage order
    first = {
        f"{s['label']}/{r}": where for s in stats["stages"] for r, where in s.get("first_drop", {}).items()
    }
    top = reasons[0][0]
    named = [
        f"{key} {n}" + (f" (first: {first[key]})" if key == top and key in first else "")
        for key, n in reasons
    ]
    if len(named) > SHOWN_REASONS:
        named = [*named[:SHOWN_REASONS], f"{len(named) - SHOWN_REASONS} more reasons"]
    # the stage that dropped the last documents left, by its largest reason: what emptied the run
    last = next(s for s in reversed(stats["stages"]) if s["drops"])
    emptied = f"{last['label']}/{max(last['drops'].items(), key=lambda kv: kv[1])[0]}"
    todo = list(dict.fromkeys(h for h in (hints.get(top), hints.get(emptied)) if h))
    todo = todo or [f"see why {emptied.split('/')[0]} drops them (rejected/ holds each with its reason)"]
    return f"{totals['kept']} of {totals['docs_in']} documents left: {', '.join(named)}; {'; '.join(todo)}"
