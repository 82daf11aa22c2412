"""report.html in a real browser (headless Chromium): the page loads without an error and without
fetching anything, every figure is drawn with its text as text, no two labels of a figure overlap
and none sticks out of its figure, and the screenshot is a page, not a blank.

Without a browser the test skips and says so; with DATAPREP_REQUIRE_BROWSER=1 (set by .ci/run,
which installs Debian's ``chromium``) a missing browser fails it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import skip_or_fail

pytestmark = pytest.mark.e2e

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")

# Runs in the page after load: opens every <details> (the examples are laid out too), then
# measures every non-empty <text> of every figure's SVG and writes the findings as JSON into
# <pre id="browser-check">.
CHECK_SCRIPT = """
<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message)));
window.addEventListener('load', () => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const out = {errors: window.__errors, figures: 0, texts: 0, overlaps: [], outside: [],
               fetched: performance.getEntriesByType('resource').map(r => r.name)};
  document.querySelectorAll('figure svg').forEach((svg, i) => {
    out.figures++;
    const frame = svg.getBoundingClientRect();
    const boxes = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim()).map(t => {
      const r = t.getBoundingClientRect();
      return {text: t.textContent, l: r.left, r: r.right, t: r.top, b: r.bottom};
    });
    out.texts += boxes.length;
    for (const a of boxes) {
      if (a.l < frame.left - 1 || a.r > frame.right + 1 || a.t < frame.top - 1 || a.b > frame.bottom + 1)
        out.outside.push([i, a.text]);
    }
    for (let x = 0; x < boxes.length; x++) for (let y = x + 1; y < boxes.length; y++) {
      const a = boxes[x], b = boxes[y];
      const w = Math.min(a.r, b.r) - Math.max(a.l, b.l), h = Math.min(a.b, b.b) - Math.max(a.t, b.t);
      if (w > 1 && h > 1) out.overlaps.push([i, a.text, b.text]);
    }
  });
  const pre = document.createElement('pre');
  pre.id = 'browser-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def find_browser() -> str:
    """The browser's path; skips (or fails under DATAPREP_REQUIRE_BROWSER=1) without one."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    skip_or_fail(
        "no Chromium on this machine (Debian: apt-get install chromium): report not checked in a browser",
        "DATAPREP_REQUIRE_BROWSER",
    )


def _run(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"]
    return subprocess.run(
        [browser, *flags, "--virtual-time-budget=10000", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def browser_findings(browser: str, report: Path, work: Path) -> dict:
    """What CHECK_SCRIPT found on a copy of ``report`` loaded in ``browser``."""
    page = work / "report_checked.html"
    text = report.read_text(encoding="utf-8")
    assert "</body>" in text
    page.write_text(text.replace("</body>", CHECK_SCRIPT + "</body>"), encoding="utf-8")
    r = _run(browser, "--dump-dom", page.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    found = re.search(r'<pre id="browser-check">(.*?)</pre>', r.stdout, re.S)
    assert found, f"the check script did not run: {r.stderr[-2000:]}"
    import html

    return json.loads(html.unescape(found.group(1)))


def test_report_in_a_browser(default_sample_out: Path, tmp_path: Path) -> None:
    browser = find_browser()
    findings = browser_findings(browser, default_sample_out / "report.html", tmp_path)
    assert findings["errors"] == []
    assert findings["fetched"] == []  # self-contained: nothing loaded from anywhere
    assert findings["figures"] >= 6  # funnel (2), drops, lengths, languages, a histogram at least
    assert findings["texts"] > 10 * findings["figures"]  # labels are text, laid out by the browser
    assert findings["overlaps"] == [], findings["overlaps"][:10]
    assert findings["outside"] == [], findings["outside"][:10]

    shot = tmp_path / "report.png"
    r = _run(
        browser,
        "--window-size=1200,2400",
        f"--screenshot={shot}",
        (default_sample_out / "report.html").as_uri(),
    )
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as im:
        colours = im.convert("RGB").resize((120, 240)).getcolors(maxcolors=1 << 16)
    assert colours is not None and len(colours) > 50  # a drawn page, not a blank or an error screen


def test_overlap_check_catches_overprinted_labels(tmp_path: Path) -> None:
    """The check itself: a figure with two labels drawn on top of each other is reported."""
    browser = find_browser()
    page = tmp_path / "bad.html"
    page.write_text(
        "<!doctype html><html><body><figure><svg width='200' height='100' xmlns='http://www.w3.org/2000/svg'>"
        "<text x='10' y='50' font-size='14'>stage names</text><text x='30' y='52' font-size='14'>1,234</text>"
        "<text x='190' y='90' font-size='14'>cut off</text>"
        "</svg></figure></body></html>",
        encoding="utf-8",
    )
    findings = browser_findings(browser, page, tmp_path)
    assert findings["overlaps"] == [[0, "stage names", "1,234"]]
    assert findings["outside"] == [[0, "cut off"]]
