"""report.html: one self-contained page (SVG plots inline) built from stats.json, manifest.json
and the first records of OUT/rejected.

The page: a summary, the funnel of documents and characters through the stages, drops by stage
and reason (a plot, then a table whose rows open on example documents, where the first one came
from, their score and detail), document length before and after, documents per language and
script (counters ``lang.*`` and ``script.*`` of lang_id), then one section per stage with its
counters, one plot per histogram it recorded (filter scores, cluster sizes) and the examples it
recorded (e.g. duplicate clusters, members side by side with what differs marked), input
problems and the manifest. Plots are SVG with their text as text (a browser lays it out:
tests/test_report_browser.py checks in Chromium that no two labels overlap), drawn without a
plotting library (a page of 30 figures takes milliseconds). ``dataprep report OUT`` rebuilds it
from the files alone.

Each plot is described by a *spec* (:func:`plot_specs`: plain JSON data, everything the plot
shows) and drawn by :func:`render_plot`, a pure function of its spec. So plots can be drawn ahead
of time, elsewhere (:func:`render_plots`, e.g. in a worker while the last global stage decides),
and handed to :func:`render`, which uses a drawing only when its spec equals the one it needs:
the page is the same whichever process drew it.

Modules: ``data`` (what the page shows, gathered from stats.json and OUT/rejected), ``figures``
(the SVG plots), ``style`` (fonts, colours, CSS) and ``page`` (the HTML, written by
``write_report``); the names below are the package's interface.
"""

from __future__ import annotations

from dataprep.report.data import input_problem_rows, plot_specs, rejected_examples
from dataprep.report.figures import render_plot, render_plots, spec_key
from dataprep.report.page import marked_differences, mix_section, render, write_report
from dataprep.report.style import CJK_FONTS

__all__ = [
    "CJK_FONTS",
    "input_problem_rows",
    "marked_differences",
    "mix_section",
    "plot_specs",
    "rejected_examples",
    "render",
    "render_plot",
    "render_plots",
    "spec_key",
    "write_report",
]
