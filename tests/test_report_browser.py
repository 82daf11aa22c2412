"""report.html in a real browser (headless Chromium): the page loads without an error and without
fetching anything, every figure is drawn with its text as text, no two labels of a figure overlap
and none sticks out of its figure, and the screenshot is a page, not a blank.

Without a browser the test skips and says so; with DATAPREP_REQUIRE_BROWSER=1 (set by .ci/run,
which installs Debian's ``chromium``) a missing browser fails it.
"""

from __future__ import annotations

import json
import os
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
  const out = {errors: window.__errors, figures: 0, texts: 0, overlaps: [], outside: [], wide: [],
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
  // text wider than its box (a long URL or path that does not wrap), and a page wider than the window
  document.querySelectorAll('td, th, pre, p, h1, h2, h3, div.card').forEach(e => {
    if (e.scrollWidth > e.clientWidth + 1) out.wide.push([e.tagName, e.textContent.slice(0, 80)]);
  });
  out.page_width = document.documentElement.scrollWidth;
  out.window_width = document.documentElement.clientWidth;
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


def _run(browser: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"]
    return subprocess.run(
        [browser, *flags, "--virtual-time-budget=10000", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def browser_findings(
    browser: str, report: Path, work: Path, script: str = CHECK_SCRIPT, env: dict[str, str] | None = None
) -> dict:
    """What ``script`` (CHECK_SCRIPT unless given) found on a copy of ``report`` loaded in
    ``browser`` (with the environment ``env``, e.g. another font configuration)."""
    page = work / "report_checked.html"
    text = report.read_text(encoding="utf-8")
    assert "</body>" in text
    page.write_text(text.replace("</body>", script + "</body>"), encoding="utf-8")
    r = _run(browser, "--dump-dom", page.as_uri(), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    found = re.search(r'<pre id="browser-check">(.*?)</pre>', r.stdout, re.S)
    assert found, f"the check script did not run: {r.stderr[-2000:]}"
    import html

    return json.loads(html.unescape(found.group(1)))


def _drawn_colours(shot: Path) -> int:
    """How many colours a screenshot has (scaled down): a drawn page has many, a blank one few."""
    from PIL import Image

    with Image.open(shot) as im:
        colours = im.convert("RGB").resize((120, 240)).getcolors(maxcolors=1 << 16)
    return len(colours or [])


def test_report_in_a_browser(default_sample_out: Path, tmp_path: Path) -> None:
    browser = find_browser()
    findings = browser_findings(browser, default_sample_out / "report.html", tmp_path)
    assert findings["errors"] == []
    assert findings["fetched"] == []  # self-contained: nothing loaded from anywhere
    assert findings["figures"] >= 6  # funnel (2), drops, lengths, languages, a histogram at least
    assert findings["texts"] > 10 * findings["figures"]  # labels are text, laid out by the browser
    assert findings["overlaps"] == [], findings["overlaps"][:10]
    assert findings["outside"] == [], findings["outside"][:10]
    assert findings["wide"] == [], findings["wide"][:10]  # long URLs and paths wrap in their box
    assert findings["page_width"] <= findings["window_width"]

    shot = tmp_path / "report.png"
    r = _run(
        browser,
        "--window-size=1200,2400",
        f"--screenshot={shot}",
        (default_sample_out / "report.html").as_uri(),
    )
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    assert _drawn_colours(shot) > 50  # a drawn page, not a blank or an error screen


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


# Runs in the page after load: for the first example text with Han characters (the page's font),
# the first <pre> with some (a dropped document's text) and a figure's label (the figures' font),
# the font-family the browser computed and how up to four distinct Han characters of the example
# are drawn in that family on a canvas (24 px): a hash of each bitmap, its inked pixels and
# advance, and the same for a private-use character that no font has, which is drawn as the
# missing-glyph box ("tofu").
CJK_SCRIPT = """
<script>
window.addEventListener('load', () => {
  const han = /[\\u4e00-\\u9fff]/;
  const first = sel => [...document.querySelectorAll(sel)].find(e => han.test(e.textContent));
  const cell = first('table.examples td'), raw = first('pre');
  const label = document.querySelector('figure svg text');
  const chars = [...new Set([...(cell ? cell.textContent : '')].filter(c => han.test(c)))].slice(0, 4);
  function drawn(ch, family) {
    const c = document.createElement('canvas');
    c.width = 48; c.height = 48;
    const g = c.getContext('2d');
    g.font = '24px ' + family;
    g.fillStyle = '#000';
    g.fillText(ch, 4, 36);
    const d = g.getImageData(0, 0, 48, 48).data;
    let hash = 0, ink = 0;
    for (let i = 3; i < d.length; i += 4) { hash = (Math.imul(hash, 31) + d[i]) >>> 0; if (d[i] > 0) ink++; }
    return {hash: hash, ink: ink, advance: g.measureText(ch).width};
  }
  function face(el) {
    const family = getComputedStyle(el).fontFamily;
    return {family: family, chars: chars.map(ch => drawn(ch, family)), missing: drawn('\\ue000', family)};
  }
  const out = {chars: chars.join(''), page: cell ? face(cell) : null, pre: raw ? face(raw) : null,
               figure: label ? face(label) : null};
  const pre = document.createElement('pre');
  pre.id = 'browser-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def _require(found: bool, why: str) -> None:
    """Skips (or fails under DATAPREP_REQUIRE_BROWSER=1) when ``found`` is false."""
    if not found:
        skip_or_fail(why, "DATAPREP_REQUIRE_BROWSER")


def _font_files(pattern: str) -> list[str]:
    """Files of the fonts fontconfig lists for ``pattern`` (e.g. ':lang=zh'); [] without fc-list."""
    if shutil.which("fc-list") is None:
        return []
    r = subprocess.run(["fc-list", pattern, "file"], capture_output=True, text=True, timeout=60)
    return sorted({line.split(":")[0].strip() for line in r.stdout.splitlines() if line.strip()})


def _families(computed: str) -> list[str]:
    """A computed font-family value as a list of names, quotes removed."""
    return [name.strip().strip("'\"") for name in computed.split(",")]


def _is_tofu(face: dict) -> bool:
    """Every character drawn alike, as the missing-glyph box."""
    return all(c["hash"] == face["missing"]["hash"] for c in face["chars"])


def _drawn_as_han(face: dict) -> bool:
    """Each character drawn as a glyph of its own, inked, a full em (24 px) wide, and none as the
    missing-glyph box."""
    hashes = {c["hash"] for c in face["chars"]}
    return (
        len(hashes) == len(face["chars"])
        and face["missing"]["hash"] not in hashes
        and all(c["ink"] > 0 and c["advance"] >= 0.9 * 24 for c in face["chars"])
    )


def test_chinese_text_is_drawn_in_a_cjk_font_not_as_tofu(default_sample_out: Path, tmp_path: Path) -> None:
    """Where a CJK system font is installed, the page's Chinese text and the figures' labels are
    drawn in it. Their computed font families name the report's CJK fonts before the generic
    family (which is what a browser without its own fallback to a CJK font, or with one that
    prefers a Japanese face, needs); each Han character is drawn as a glyph of its own, not as
    the missing-glyph box."""
    browser = find_browser()
    _require(
        bool(_font_files(":lang=zh")), "no CJK font installed (Debian: apt-get install fonts-wqy-zenhei)"
    )
    from dataprep.report import CJK_FONTS

    found = browser_findings(browser, default_sample_out / "report.html", tmp_path, CJK_SCRIPT)
    assert len(found["chars"]) == 4, found
    for where in ("page", "pre", "figure"):
        families = _families(found[where]["family"])
        assert all(f in families for f in CJK_FONTS), (where, families)
        generic = families.index("monospace" if where == "pre" else "sans-serif")
        assert max(families.index(f) for f in CJK_FONTS) < generic, (where, families)
        assert _drawn_as_han(found[where]), (where, found[where])
        assert not _is_tofu(found[where])

    shot = tmp_path / "report.png"
    r = _run(
        browser,
        "--window-size=1200,2400",
        f"--screenshot={shot}",
        (default_sample_out / "report.html").as_uri(),
    )
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    assert _drawn_colours(shot) > 50


def test_without_cjk_fonts_the_page_still_renders(default_sample_out: Path, tmp_path: Path) -> None:
    """With only DejaVu Sans visible to the browser (a font configuration of its own), the page
    loads without an error, its figures are laid out as before, and the Chinese text is drawn as
    tofu: which also shows that the check above tells tofu from text."""
    browser = find_browser()
    dejavu = [f for f in _font_files("DejaVu Sans") if Path(f).name.startswith("DejaVuSans")]
    _require(bool(dejavu), "DejaVu Sans not installed (Debian: apt-get install fonts-dejavu-core)")
    fonts = tmp_path / "fonts"
    fonts.mkdir()
    for f in dejavu:
        (fonts / Path(f).name).symlink_to(f)
    conf = tmp_path / "fonts.conf"
    conf.write_text(
        '<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>'
        f"<dir>{fonts}</dir><cachedir>{tmp_path / 'fc-cache'}</cachedir></fontconfig>",
        encoding="utf-8",
    )
    env = {**os.environ, "FONTCONFIG_FILE": str(conf)}
    report = default_sample_out / "report.html"

    found = browser_findings(browser, report, tmp_path, CJK_SCRIPT, env=env)
    assert len(found["chars"]) == 4 and _is_tofu(found["page"]) and not _drawn_as_han(found["page"])
    findings = browser_findings(browser, report, tmp_path, env=env)
    assert findings["errors"] == [] and findings["fetched"] == []
    assert findings["figures"] >= 6 and findings["texts"] > 10 * findings["figures"]
    assert findings["overlaps"] == [] and findings["outside"] == [] and findings["wide"] == []
    shot = tmp_path / "report.png"
    r = _run(browser, "--window-size=1200,2400", f"--screenshot={shot}", report.as_uri(), env=env)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    assert _drawn_colours(shot) > 50
