"""report.html: the page (HTML) around the figures, from stats.json, manifest.json and the
example rejected records; :func:`write_report` writes it into OUT."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from dataprep.io import write_text_atomic
from dataprep.report.data import CATEGORY_PREFIXES, input_problem_rows, plot_specs, rejected_examples
from dataprep.report.figures import mix_figure, render_plot, spec_key
from dataprep.report.style import PAGE_CSS


def mix_section(mix: dict[str, Any]) -> str:
    """The data mix: target against achieved per source (a figure and a table), whether it was
    met, and which sources ran short."""
    sources = mix.get("sources") or {}
    if not sources:
        return ""
    fields = [
        ("target_share", "target", lambda v: f"{100 * v:.2f}%"),
        ("achieved_share", "achieved", lambda v: f"{100 * v:.2f}%"),
        ("epochs", "epochs", lambda v: f"{v:.3g}"),
        ("max_epochs", "max epochs", lambda v: f"{v:g}"),
        ("docs_input", "docs read", lambda v: f"{v:,}"),
        ("docs_available", "docs after cleaning", lambda v: f"{v:,}"),
        ("tokens_available", "tokens available", lambda v: f"{v:,}"),
        ("docs_written", "docs written", lambda v: f"{v:,}"),
        ("tokens_written", "tokens written", lambda v: f"{v:,}"),
        ("short_tokens", "tokens short", lambda v: f"{v:,}"),
    ]
    rows = [
        [name] + [fmt(src[key]) if isinstance(src.get(key), int | float) else "" for key, _, fmt in fields]
        for name, src in sources.items()
    ]
    met = mix.get("met")
    short = html.escape(
        ", ".join(
            f"{name} short by {int(sources.get(name, {}).get('short_tokens') or 0):,} tokens"
            for name in mix.get("short") or []
        )
    )
    verdict = (
        "<p>Every source is within the tolerance of its target.</p>"
        if met
        else f"<p class='outcome'><b>The mix was not met:</b> {short}</p>"
    )
    return (
        "<h2 id='mix'>Data mix</h2>"
        + (verdict if met is not None else "")
        + mix_figure(sources)
        + _table(rows, ["source", *(label for _, label, _ in fields)])
    )


def _table(rows: list[list[Any]], header: list[str], css_class: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    attr = f" class='{css_class}'" if css_class else ""
    # in a box that scrolls sideways: a table wider than the window does not widen the page
    return f"<div class='scroll'><table{attr}><tr>{head}</tr>{body}</table></div>"


def marked_differences(base: str, other: str) -> tuple[str, str]:
    """(base, other) as HTML with the spans where they differ in ``<mark>`` (difflib's matching
    blocks of characters)."""
    import difflib

    a, b = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, base, other, autojunk=False).get_opcodes():
        x, y = html.escape(base[i1:i2]), html.escape(other[j1:j2])
        if op == "equal":
            a.append(x)
            b.append(y)
        else:
            a.append(f"<mark>{x}</mark>" if x else "")
            b.append(f"<mark>{y}</mark>" if y else "")
    return "".join(a), "".join(b)


def _example_cells(ex: dict[str, Any]) -> list[str]:
    """The items' texts as HTML; for a ``compare`` example, each one after the first with what
    differs from the first marked (and the first with what differs from the second)."""
    texts = [str(it.get("text", "")) for it in ex.get("items", [])]
    if not ex.get("compare") or len(texts) < 2:
        return [html.escape(t) for t in texts]
    cells = [marked_differences(texts[0], texts[1])[0]]
    cells += [marked_differences(texts[0], t)[1] for t in texts[1:]]
    return cells


def _examples(label: str, examples: list[dict[str, Any]]) -> str:
    """A stage's examples, each as one table row with its items side by side."""
    out = [f"<h2>Examples: {html.escape(label)}</h2>"]
    for ex in examples:
        items = ex.get("items", [])
        head = "".join(f"<th>{html.escape(str(it.get('label', '')))}</th>" for it in items)
        cells = "".join(f"<td>{cell}</td>" for cell in _example_cells(ex))
        out.append(
            f"<p><b>{html.escape(str(ex.get('title', '')))}</b></p>"
            f"<table class='examples'><tr>{head}</tr><tr>{cells}</tr></table>"
        )
    return "".join(out)


def _drop_table(stats: dict[str, Any], examples: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    """Drops by stage and reason, largest first: count, share of the documents read, where the
    first one came from; each row opens (``<details>``) on example documents: id, score, detail
    and the start of the text."""
    read = max(stats["totals"]["docs_in"], 1)
    rows = sorted(
        (
            (s["label"], r, n, s.get("first_drop", {}).get(r, ""))
            for s in stats["stages"]
            for r, n in s["drops"].items()
        ),
        key=lambda x: -x[2],
    )
    if not rows:
        return ""
    out = [
        "<table class='drops'><tr><th>stage / reason</th><th>documents</th><th>of read</th>"
        "<th>first</th></tr>"
    ]
    for label, reason, n, first in rows:
        found = examples.get((label, reason), [])
        cell = html.escape(f"{label} / {reason}")
        if found:
            items = "".join(
                "<div class='example'><div class='meta'>"
                + html.escape(
                    " · ".join(
                        str(x)
                        for x in (
                            rec.get("id", ""),
                            f"score {rec['score']:.4g}" if isinstance(rec.get("score"), int | float) else "",
                            rec.get("detail", ""),
                        )
                        if x
                    )
                )
                + f"</div><pre>{html.escape(str(rec.get('text', ''))[:600])}</pre></div>"
                for rec in found
            )
            cell = f"<details><summary>{cell}</summary>{items}</details>"
        out.append(
            f"<tr><td class='reason'>{cell}</td><td>{n:,}</td><td>{100 * n / read:.2f}%</td>"
            f"<td class='where'>{html.escape(first)}</td></tr>"
        )
    return "".join(out) + "</table>"


def _cards(stats: dict[str, Any], manifest: dict[str, Any]) -> str:
    """The summary: documents read, kept and dropped, the tokens written (manifest.json: the
    documents' tokens and their EOS, per split), the input and its tasks and, for a recipe with
    ``sources:``, the train split's tokens per source with the share achieved and the target."""
    totals = stats["totals"]
    read = totals["docs_in"]
    kept = totals["kept"]
    cards = [
        ("documents read", f"{read:,}", ""),
        ("kept", f"{kept:,}" + (f" ({100 * kept / read:.1f}%)" if read else ""), ""),
        ("dropped", f"{totals['dropped']:,}", ""),
    ]
    shards = manifest.get("shards") or {}
    tokens = (shards.get("totals") or {}).get("tokens")
    if isinstance(tokens, int):
        splits = " · ".join(
            f"{name} {entry['tokens']:,}"
            for name, entry in (shards.get("splits") or {}).items()
            if isinstance(entry.get("tokens"), int)
        )
        cards.append(("tokens written", f"{tokens:,}", splits))
    inputs = stats["input"]
    size = f"{inputs['files']:,} files, {inputs['bytes'] / 1e6:,.1f} MB"
    cards.append(("input", size, f"read in {inputs['tasks']:,} task{'s' * (inputs['tasks'] != 1)}"))
    out = _card_row(cards)
    sources = (manifest.get("mix") or {}).get("sources") or {}
    if sources:
        per_source = []
        for name, src in sources.items():
            shares = [
                f"{100 * src[key]:.1f}% {label}"
                for key, label in (("achieved_share", "of train"), ("target_share", "target"))
                if isinstance(src.get(key), int | float)
            ]
            per_source.append((name, f"{int(src.get('tokens_written') or 0):,}", ", ".join(shares)))
        out += "<p class='caption'>tokens written per source (train split)</p>" + _card_row(per_source)
    return out


def _card_row(cards: list[tuple[str, str, str]]) -> str:
    """(name, value, detail) triples as a row of cards (the detail in small print, when any)."""
    return (
        "<div class='cards'>"
        + "".join(
            f"<div class='card'><div class='value'>{html.escape(value)}</div>"
            f"<div class='name'>{html.escape(name)}</div>"
            + (f"<div class='detail'>{html.escape(detail)}</div>" if detail else "")
            + "</div>"
            for name, value, detail in cards
        )
        + "</div>"
    )


def render(
    stats: dict[str, Any],
    manifest: dict[str, Any],
    drawn: dict[str, str] | None = None,
    examples: dict[tuple[str, str], list[dict[str, Any]]] | None = None,
) -> str:
    """The page. ``drawn``: plots drawn ahead of time (:func:`render_plots`); a plot whose spec
    is not among them is drawn here. ``examples``: rejected records per (stage label, reason)
    (:func:`rejected_examples`)."""
    drawn = drawn or {}
    specs = plot_specs(stats)
    plots = [drawn.get(spec_key(spec)) or render_plot(spec) for spec in specs]
    funnel, drops, lengths = plots[:3]
    wide: dict[str, list[str]] = {}  # full-width plots of a stage (categories)
    per_stage: dict[str, list[str]] = {}  # histograms, side by side
    for spec, plot in zip(specs[3:], plots[3:], strict=True):
        (wide if spec["kind"] == "categories" else per_stage).setdefault(spec["stage"], []).append(plot)
    stages = stats["stages"]
    problems = input_problem_rows(stats["input"])
    parts = [
        f"<h1>dataprep report: {html.escape(stats['recipe']['name'])}</h1>",
        f"<p class='sub'>recipe hash <code>{stats['recipe']['hash'][:16]}</code></p>",
        _cards(stats, manifest),
        *(
            [f"<p class='outcome'><b>The run failed:</b> {html.escape(stats['outcome']['message'])}</p>"]
            if stats.get("outcome")
            else []
        ),
        "<nav>"
        + " · ".join(
            f"<a href='#{a}'>{t}</a>"
            for a, t in (
                ("funnel", "funnel"),
                ("drops", "drops"),
                *([("mix", "data mix")] if (stats.get("mix") or {}).get("sources") else []),
                ("lengths", "lengths"),
                ("stages", "stages"),
                *([("problems", "input problems")] if problems else []),
                ("manifest", "manifest"),
            )
        )
        + "</nav>",
        "<h2 id='funnel'>Funnel</h2>",
        funnel,
        _table(
            [
                [
                    s["label"],
                    s["kind"],
                    f"{s['docs_in']:,}",
                    f"{s['docs_out']:,}",
                    f"{sum(s['drops'].values()):,}",
                    f"{s['chars_in']:,}",
                    f"{s['chars_out']:,}",
                ]
                for s in stages
            ],
            ["stage", "kind", "docs in", "docs out", "dropped", "chars in", "chars out"],
        ),
        "<h2 id='drops'>Drops by reason</h2>",
        drops,
        _drop_table(stats, examples or {}),
        mix_section(stats.get("mix") or {}),
        "<h2 id='lengths'>Document length</h2>",
        lengths,
        "<h2 id='stages'>Stages</h2>",
    ]
    for s in stages:
        counters = [[k, f"{v:,}"] for k, v in s["counters"].items() if not k.startswith(CATEGORY_PREFIXES)]
        body = per_stage.get(s["label"], [])
        if not (counters or body or wide.get(s["label"]) or s.get("examples")):
            continue
        parts.append(f"<section><h3>{html.escape(s['label'])}</h3>")
        if counters:
            parts.append(_table(counters, ["counter", "value"]))
        parts += wide.get(s["label"], [])
        if body:
            parts.append(f"<div class='plots'>{''.join(body)}</div>")
        if s.get("examples"):
            parts.append(_examples(s["label"], s["examples"]))
        parts.append("</section>")
    if problems:
        parts.append("<h2 id='problems'>Input problems</h2>")
        parts.append(_table(problems, ["where", "kind", "message"], "problems"))
    shards = {k: v for k, v in manifest.items() if k not in ("inputs",)}
    parts += [
        "<h2 id='manifest'>Manifest</h2>",
        "<details><summary>manifest.json (without the inputs)</summary>"
        f"<pre>{html.escape(json.dumps(shards, ensure_ascii=False, indent=1)[:20000])}</pre></details>",
    ]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>dataprep report</title>"
        f"<style>{PAGE_CSS}</style></head><body>{''.join(parts)}</body></html>"
    )


def write_report(
    out: Path,
    stats: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
    drawn: dict[str, str] | None = None,
) -> Path:
    """Write out/report.html from the given (or the saved) stats and manifest (and plots drawn
    ahead of time, see :func:`render`)."""
    if stats is None:
        stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    if manifest is None:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    path = out / "report.html"
    write_text_atomic(path, render(stats, manifest, drawn, rejected_examples(out)))
    return path
