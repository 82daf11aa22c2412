"""report.html: one self-contained page (SVG plots inline) built from stats.json, manifest.json
and the first records of OUT/rejected.

The page: a summary, the funnel of documents and characters through the stages, drops by stage
and reason (a plot, then a table whose rows open on example documents, where the first one came
from, their score and detail), document length before and after, documents per language and
script (counters ``lang.*`` and ``script.*`` of lang_id), then one section per stage with its
counters, one plot per histogram it recorded (filter scores, cluster sizes) and the examples it
recorded (e.g. duplicate clusters, members side by side with what differs marked), input
problems and the manifest. Plots are SVG with their text as text (a browser lays it out:
tests/test_report_browser.py checks in Chromium that no two labels overlap), drawn here without a
plotting library (a page of 30 figures takes milliseconds). ``dataprep report OUT`` rebuilds it
from the files alone.

Each plot is described by a *spec* (:func:`plot_specs`: plain JSON data, everything the plot
shows) and drawn by :func:`render_plot`, a pure function of its spec. So plots can be drawn ahead
of time, elsewhere (:func:`render_plots`, e.g. in a worker while the last global stage decides),
and handed to :func:`render`, which uses a drawing only when its spec equals the one it needs:
the page is the same whichever process drew it.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataprep.io import write_text_atomic

EXAMPLES_PER_REASON = 3
REJECTED_SCAN = 20_000  # records read per rejected/ file at most, looking for examples
LOG_SCALE_RATIO = 50  # largest bin / smallest non-empty bin from which a histogram has a log scale
FONT_PX = 11  # label size in the figures (CSS px)
COLOURS = ("#4878a8", "#e08a3c", "#6a9a58", "#c05050")
# Fonts with the CJK characters, in order of preference (Linux, Linux, macOS, Windows): named
# before the generic family so that Chinese text in the page and in the figures is drawn in a
# Simplified Chinese face where one is installed, never as empty boxes; the rest falls back.
CJK_FONTS = ("Noto Sans CJK SC", "WenQuanYi Zen Hei", "PingFang SC", "Microsoft YaHei")
PAGE_FONTS = ("system-ui", *CJK_FONTS, "sans-serif")
FIGURE_FONTS = ("DejaVu Sans", *CJK_FONTS, "sans-serif")  # _text_px's widths are DejaVu Sans'
MONO_FONTS = ("DejaVu Sans Mono", "Menlo", "Consolas", *CJK_FONTS, "monospace")  # texts in <pre>


def _font_list(names: tuple[str, ...], quote: str) -> str:
    """A CSS font-family value: names with a space quoted with ``quote``, generic ones bare."""
    return ", ".join(f"{quote}{n}{quote}" if " " in n else n for n in names)


FIGURE_FONT_FAMILY = _font_list(FIGURE_FONTS, "'")
PAGE_FONT_FAMILY = _font_list(PAGE_FONTS, "'")
MONO_FONT_FAMILY = _font_list(MONO_FONTS, "'")


def _text_px(text: str, size: float = FONT_PX) -> float:
    """An upper bound of the width of ``text`` at ``size`` px in DejaVu Sans (the figures' font):
    0.65 em per narrow character, 1 em per wide (CJK) one."""
    return sum(size * (1.0 if ord(c) >= 0x2E80 else 0.65) for c in text)


def _t(x: float, y: float, text: str, anchor: str = "start", size: float = FONT_PX, extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>'
        f"{html.escape(text)}</text>"
    )


def _figure(title: str, width: float, height: float, body: list[str]) -> str:
    """A figure: an inline SVG whose text is text (laid out by the browser, selectable), with
    the title at the top."""
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FIGURE_FONT_FAMILY}">'
        + _t(width / 2, 16, title, "middle", FONT_PX + 1, ' font-weight="bold"')
        + "".join(body)
        + "</svg>"
    )
    return f'<figure role="img" aria-label="{html.escape(title)}">{svg}</figure>'


def _short_number(x: float) -> str:
    """An axis tick as 1.2M / 340k / 12."""
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:g}"


def _ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if m * step >= raw)
    return [i * step for i in range(math.ceil(top / step) + 1)]


def _x_grid(
    ticks: list[float], left: float, scale: float, top: float, bottom: float, label: Callable[[float], str]
) -> list[str]:
    """Vertical grid lines from ``top`` to ``bottom`` at each tick (x = left + tick * scale), each
    labelled below; drawn first, so that bars go over them."""
    out = []
    for tick in ticks:
        x = left + tick * scale
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#e4e4e4"/>')
        out.append(_t(x, bottom + FONT_PX + 4, label(tick), "middle", FONT_PX - 1))
    return out


def _bar_figure(title: str, labels: list[str], values: list[int], colour: str, width: float = 860) -> str:
    """Horizontal bars, the first at the top, each labelled on the left and followed by its value;
    the label column and the room for the values are as wide as their longest text."""
    row = FONT_PX + 7
    left = max((_text_px(x) for x in labels), default=0) + 12
    room = max((_text_px(f"{v:,}", FONT_PX - 1) for v in values), default=0) + 10
    plot_w = max(width - left - room - 8, 120)
    top, n = 28, len(values)
    ticks = _ticks(max(values, default=0))
    scale = plot_w / ticks[-1]
    body = _x_grid(ticks, left, scale, top, top + n * row, _short_number)
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = top + i * row
        w = value * scale
        body.append(f'<rect x="{left:.1f}" y="{y + 2}" width="{w:.1f}" height="{row - 4}" fill="{colour}"/>')
        body.append(_t(left - 6, y + row - 5, label, "end"))
        body.append(_t(left + w + 4, y + row - 5, f"{value:,}", size=FONT_PX - 1))
    body.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + n * row}" stroke="#444"/>')
    return _figure(title, left + plot_w + room + 8, top + n * row + FONT_PX + 10, body)


def _mix_figure(sources: dict[str, dict[str, Any]]) -> str:
    """Target against achieved share of the training tokens per source: two bars per source."""
    names = list(sources)
    row, top = FONT_PX + 7, 46
    left = max(_text_px(n) for n in names) + 12
    plot_w, room = 560.0, _text_px("achieved 100.0%", FONT_PX - 1) + 10
    peak = max(
        max(float(v.get("target_share") or 0), float(v.get("achieved_share") or 0)) for v in sources.values()
    )
    ticks = [t / 100 for t in _ticks(max(peak, 0.01) * 100)]
    scale = plot_w / ticks[-1]
    bottom = top + len(names) * (2 * row + 6)
    body = _x_grid(ticks, left, scale, top, bottom, lambda tick: f"{100 * tick:g}%")
    for k, (key, colour) in enumerate((("target_share", COLOURS[0]), ("achieved_share", COLOURS[1]))):
        x = left + k * 120
        body.append(f'<rect x="{x:.1f}" y="26" width="10" height="10" fill="{colour}"/>')
        body.append(_t(x + 14, 35, key.split("_")[0]))
    y = top
    for name in names:
        body.append(_t(left - 6, y + row, name, "end"))
        for key, colour in (("target_share", COLOURS[0]), ("achieved_share", COLOURS[1])):
            value = float(sources[name].get(key) or 0)
            w = value * scale
            body.append(
                f'<rect x="{left:.1f}" y="{y + 2}" width="{w:.1f}" height="{row - 4}" fill="{colour}"/>'
            )
            body.append(_t(left + w + 4, y + row - 5, f"{100 * value:.2f}%", size=FONT_PX - 1))
            y += row
        y += 6
    body.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y}" stroke="#444"/>')
    return _figure("share of the training tokens per source", left + plot_w + room, y + FONT_PX + 10, body)


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
        + _mix_figure(sources)
        + _table(rows, ["source", *(label for _, label, _ in fields)])
    )


def _bin_labels(edges: list[float]) -> list[str]:
    def short(x: float) -> str:
        for unit, size in (("M", 1 << 20), ("k", 1 << 10)):
            if x >= size and x % size == 0:
                return f"{int(x // size)}{unit}"
        return f"{x:g}"

    return [f"<{short(edges[0])}"] + [f"{short(a)}-" for a in edges[:-1]] + [f"≥{short(edges[-1])}"]


def _hist_plot(title: str, series: dict[str, dict[str, Any]], xlabel: str, ylabel: str) -> str:
    """Vertical bars per bin (one colour per series), the bins from the first to the last non-empty
    one, each bin labelled below; a log scale when one bin dwarfs the rest."""
    first = next(iter(series.values()))
    counts = {k: [int(c) for c in v["counts"]] for k, v in series.items()}
    nonzero = [i for i in range(len(first["counts"])) if any(c[i] for c in counts.values())]
    if not nonzero:
        return f"<p>{html.escape(title)}: no data</p>"
    lo, hi = nonzero[0], nonzero[-1] + 1
    labels = _bin_labels(first["edges"])[lo:hi]
    positive = [c for cs in counts.values() for c in cs[lo:hi] if c > 0]
    log = max(positive) >= LOG_SCALE_RATIO * min(positive)
    if log:
        ticks = [10.0**k for k in range(math.ceil(math.log10(max(positive))) + 1)]
        ylabel += " (log scale)"
    else:
        ticks = _ticks(max(positive))
    tick_w = max(_text_px(_short_number(t), FONT_PX - 1) for t in ticks)
    left, top, width = FONT_PX + 12 + tick_w + 8, 28, 500.0
    bottom = max(_text_px(x, FONT_PX - 1) for x in labels) + FONT_PX + 18
    plot_w, plot_h = width - left - 10, 180.0

    def y_of(v: float) -> float:
        frac = math.log10(max(v, 0.5) / 0.5) / math.log10(ticks[-1] / 0.5) if log else v / ticks[-1]
        return top + plot_h * (1 - frac)

    body = []
    for tick in ticks:
        y = y_of(tick)
        body.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
        )
        body.append(_t(left - 4, y + 4, _short_number(tick), "end", FONT_PX - 1))
    slot = plot_w / (hi - lo)
    bar = slot * 0.8 / len(counts)
    for k, cs in enumerate(counts.values()):
        colour = COLOURS[k % len(COLOURS)]
        for i, c in enumerate(cs[lo:hi]):
            if c > 0:
                x, y = left + i * slot + slot * 0.1 + k * bar, y_of(c)
                body.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{top + plot_h - y:.1f}" '
                    f'fill="{colour}"><title>{html.escape(labels[i])}: {c:,}</title></rect>'
                )
    base = top + plot_h
    for i, label in enumerate(labels):
        x = left + (i + 0.5) * slot + (FONT_PX - 1) / 3
        body.append(
            _t(x, base + 5, label, "end", FONT_PX - 1, f' transform="rotate(-90 {x:.1f} {base + 5:.1f})"')
        )
    body.append(f'<line x1="{left}" y1="{base}" x2="{left + plot_w:.1f}" y2="{base}" stroke="#444"/>')
    body.append(_t(left + plot_w / 2, base + bottom - 4, xlabel, "middle"))
    mid = top + plot_h / 2
    body.append(_t(FONT_PX, mid, ylabel, "middle", extra=f' transform="rotate(-90 {FONT_PX} {mid})"'))
    if len(counts) > 1:  # legend, top right inside the plot
        for k, name in enumerate(counts):
            y = top + 4 + k * (FONT_PX + 4)
            x = left + plot_w - _text_px(name) - 20
            body.append(
                f'<rect x="{x:.1f}" y="{y}" width="10" height="10" fill="{COLOURS[k % len(COLOURS)]}"/>'
            )
            body.append(_t(x + 14, y + 9, name))
    return _figure(title, width, top + plot_h + bottom, body)


def _funnel(stages: list[dict[str, Any]]) -> str:
    """Documents and characters after each stage: one figure each (the stage names on both)."""
    labels = [s["label"] for s in stages]
    docs = _bar_figure("documents after each stage", labels, [s["docs_out"] for s in stages], COLOURS[0])
    chars = [s["chars_out"] for s in stages]
    return docs + _bar_figure("characters after each stage", labels, chars, COLOURS[2])


def _drops(items: list[list[Any]]) -> str:
    if not items:
        return "<p>No document was dropped.</p>"
    items = items[::-1]  # largest first, at the top
    title = "documents dropped, by stage and reason"
    return _bar_figure(title, [k for k, _ in items], [n for _, n in items], COLOURS[3])


def _categories(title: str, groups: dict[str, list[list[Any]]]) -> str:
    """One bar figure per group of (name, count) pairs (e.g. documents per language and per
    script), side by side under one caption."""
    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        return f"<p>{html.escape(title)}: no data</p>"
    figures = "".join(
        _bar_figure(name, [str(k) for k, _ in items], [n for _, n in items], COLOURS[0], width=420)
        for name, items in groups.items()
    )
    return f"<p class='caption'>{html.escape(title)}</p><div class='plots'>{figures}</div>"


CATEGORY_TOP = 14  # categories drawn per group; the rest are summed as "other"
CATEGORY_PREFIXES = ("lang.", "script.")


def _category_items(counters: dict[str, int], prefix: str) -> list[list[Any]]:
    """(name, count) of the counters named ``prefix`` + name, largest first, the ones beyond
    CATEGORY_TOP summed as "other (N)"."""
    items = sorted(
        ([k[len(prefix) :], v] for k, v in counters.items() if k.startswith(prefix)),
        key=lambda kv: (-kv[1], kv[0]),
    )
    if len(items) > CATEGORY_TOP:
        rest = items[CATEGORY_TOP - 1 :]
        items = [*items[: CATEGORY_TOP - 1], [f"other ({len(rest)})", sum(v for _, v in rest)]]
    return items


def _table(rows: list[list[Any]], header: list[str], css_class: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    attr = f" class='{css_class}'" if css_class else ""
    # in a box that scrolls sideways: a table wider than the window does not widen the page
    return f"<div class='scroll'><table{attr}><tr>{head}</tr>{body}</table></div>"


def _where_key(where: str) -> tuple[str, int]:
    """Sort key of a ``file`` or ``file:line`` location: by file, then by line as a number."""
    file, _, line = where.rpartition(":")
    return (file, int(line)) if file and line.isdigit() else (where, 0)


def input_problem_rows(inputs: dict[str, Any]) -> list[list[str]]:
    """[where, kind, message] of each input problem once, by file and line: the files that
    produced no task (``file_notes``) and the sampled problems (``problem_samples``), which name
    the same file-level problems again (both come from one report)."""
    seen: dict[tuple[str, str], list[str]] = {}
    for n in inputs.get("file_notes", []):
        seen.setdefault((n["file"], n["kind"]), [n["file"], n["kind"], n["message"]])
    for kind, items in inputs.get("problem_samples", {}).items():
        for it in items:
            seen.setdefault((it["where"], kind), [it["where"], kind, it["message"]])
    return sorted(seen.values(), key=lambda row: (_where_key(row[0]), row[1]))


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


def plot_specs(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The plots of the page, in order, as JSON-serialisable specs (what each plot shows); needs
    only ``stats["stages"]`` and ``stats["length_chars"]``."""
    stages = stats["stages"]
    drops = [[f"{s['label']}/{r}", n] for s in stages for r, n in s["drops"].items()]
    drops.sort(key=lambda x: x[1])
    specs: list[dict[str, Any]] = [
        {
            "kind": "funnel",
            "stages": [{k: s[k] for k in ("label", "docs_out", "chars_out")} for s in stages],
        },
        {"kind": "drops", "items": drops},
        {
            "kind": "hist",
            "title": "characters per document",
            "series": {"read": stats["length_chars"]["read"], "kept": stats["length_chars"]["kept"]},
            "xlabel": "characters",
            "ylabel": "documents",
        },
    ]
    for s in stages:
        if any(k.startswith("lang.") for k in s["counters"]):  # lang_id: documents per language
            specs.append(
                {
                    "kind": "categories",
                    "stage": s["label"],
                    "title": f"{s['label']}: documents per language and script (before its drops)",
                    "groups": {
                        "language": _category_items(s["counters"], "lang."),
                        "script": _category_items(s["counters"], "script."),
                    },
                }
            )
        for name, h in s["histograms"].items():
            if s["label"] == "read" and name == "length_chars":
                continue
            title = f"{s['label']}: {name}"
            specs.append(
                {
                    "kind": "hist",
                    "stage": s["label"],
                    "title": title,
                    "series": {name: h},
                    "xlabel": name,
                    "ylabel": "count",
                }
            )
    return specs


def spec_key(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, ensure_ascii=False)


def render_plot(spec: dict[str, Any]) -> str:
    """The HTML of one plot (inline SVG, or a line of text when there is nothing to draw)."""
    if spec["kind"] == "funnel":
        return _funnel(spec["stages"])
    if spec["kind"] == "drops":
        return _drops(spec["items"])
    if spec["kind"] == "categories":
        return _categories(spec["title"], spec["groups"])
    return _hist_plot(spec["title"], spec["series"], spec["xlabel"], spec["ylabel"])


def render_plots(specs: list[dict[str, Any]]) -> dict[str, str]:
    """{spec_key(spec): render_plot(spec)} for every spec (to draw plots ahead of time)."""
    return {spec_key(spec): render_plot(spec) for spec in specs}


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
    style = (
        f"body{{font-family:{PAGE_FONT_FAMILY};"
        "max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        # long URLs, paths and ids break anywhere rather than widen the page (not numbers and
        # headers of the other tables: they keep their words whole)
        "h1,p,pre,code,.card,td.where,td.reason,table.examples td,table.problems td{overflow-wrap:anywhere}"
        "h1{margin-bottom:0}.sub{color:#666;margin-top:.2em}nav{margin:1em 0;font-size:14px}"
        "h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}"
        "section{border-left:3px solid #e4e8ee;padding-left:1em;margin:1.2em 0}"
        ".cards{display:flex;flex-wrap:wrap;gap:.8em;margin:1em 0}"
        ".card{background:#f4f6f9;border-radius:6px;padding:.6em 1em;min-width:8em}"
        ".card .value{font-size:20px;font-weight:bold}.card .name{color:#666;font-size:12px}"
        ".card .detail{color:#888;font-size:11px}.caption{margin:.4em 0 0;color:#444}"
        "table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px;text-align:right;vertical-align:top}"
        "td:first-child,th:first-child{text-align:left}td.where{text-align:left;font-size:12px;color:#555}"
        "table.drops th:last-child,table.problems td,table.problems th{text-align:left}"
        f"pre,code{{font-family:{MONO_FONT_FAMILY}}}"
        "pre{background:#f6f6f6;padding:.6em;font-size:12px;white-space:pre-wrap}"
        "summary{cursor:pointer}.example{margin:.4em 0 .8em}.example .meta{font-size:12px;color:#555}"
        "figure{margin:.6em 0}figure svg{max-width:100%;height:auto}"
        ".plots{display:flex;flex-wrap:wrap;gap:0 1em}.plots figure{flex:1 1 460px;max-width:520px}"
        "table.examples{table-layout:fixed;width:100%}"
        "table.examples td,table.examples th{text-align:left;white-space:pre-wrap;font-size:12px}"
        ".scroll{overflow-x:auto}mark{background:#ffd966}"
        ".outcome{background:#fbe3e3;border:1px solid #c05050;padding:.6em}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>dataprep report</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"
    )


def rejected_examples(
    out: Path, per_reason: int = EXAMPLES_PER_REASON
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The first ``per_reason`` rejected records of every (stage label, reason) in
    ``out/rejected`` (at most REJECTED_SCAN records read per file); empty when there is none."""
    from dataprep.docstore import read_rejected

    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    folder = out / "rejected"
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.jsonl.zst")):
        for k, rec in enumerate(read_rejected(path)):
            key = (str(rec.get("stage", "")), str(rec.get("reason", "")))
            bucket = found.setdefault(key, [])
            if len(bucket) < per_reason:
                bucket.append(rec)
            if k >= REJECTED_SCAN:
                break
    return found


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
