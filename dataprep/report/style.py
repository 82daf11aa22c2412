"""How report.html looks: the fonts of the page and of its figures, the figures' label size and
colours, and the page's CSS."""

from __future__ import annotations

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

PAGE_CSS = (
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
