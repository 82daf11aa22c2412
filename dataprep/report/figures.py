"""The report's figures: inline SVG whose text is text (a browser lays it out), drawn without a
plotting library. Each plot is drawn from its spec (``data.plot_specs``) by :func:`render_plot`, a
pure function of the spec, so plots can be drawn ahead of time in another process
(:func:`render_plots`) and the page is the same whichever process drew them."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from typing import Any

from dataprep.report.style import COLOURS, FIGURE_FONT_FAMILY, FONT_PX

LOG_SCALE_RATIO = 50  # largest bin / smallest non-empty bin from which a histogram has a log scale


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


def mix_figure(sources: dict[str, dict[str, Any]]) -> str:
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
