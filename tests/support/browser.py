"""A real browser for the HTML report: headless Chromium, measured from inside the page.

The page is measured by a script the test appends to a copy of it (the report itself ships no
script): on load it records the viewport, what sticks out of it or scrolls sideways, and where
the verdict and each section's table and plot are, into a ``<pre>`` that ``--dump-dom`` prints.

Chromium is a Debian package (``apt-get install chromium``), not a PyPI one; ``make test``
installs it when it is missing.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

WIDTH, HEIGHT = 1280, 900

_PROBE = """
<script>
addEventListener("load", () => {
  const doc = document.documentElement, width = doc.clientWidth;
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (el.className ? "." + String(el.className).replace(/ /g, ".") : "");
  const box = (el) => {
    if (!el) return null;
    const r = el.getBoundingClientRect(), style = getComputedStyle(el);
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
            shown: r.width > 0 && r.height > 0 && style.visibility === "visible",
            text: el.innerText};
  };
  const outside = [], sideways = [];
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && (r.right > width + 0.5 || r.left < -0.5)) outside.push(name(el));
    if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== "visible")
      sideways.push(name(el));
  }
  const sections = [...document.querySelectorAll("section")].map((s) => ({
    title: s.querySelector("h2") ? s.querySelector("h2").innerText : null,
    table: box(s.querySelector("table")), plot: box(s.querySelector("img")),
  }));
  const out = document.createElement("pre");
  out.id = "layout-probe";
  out.textContent = JSON.stringify({
    innerWidth, innerHeight, scrollWidth: doc.scrollWidth, clientWidth: width,
    outside, sideways, verdict: box(document.getElementById("verdict")), sections,
  });
  document.body.append(out);
});
</script>
"""


def chromium() -> str:
    """The Chromium executable; fails (never skips) the test when there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "chromium not found on PATH: the HTML report is checked in a real browser. Install it "
        "with `apt-get install -y chromium` (Debian; `make test` does this when apt-get is there)."
    )


def _run(page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start. A profile of the
    # test's own, so runs side by side do not share one.
    args = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", *flags, page.as_uri(),
    ]  # fmt: skip
    return subprocess.run(args, check=False, capture_output=True, text=True, timeout=60)


def layout(report_html: Path, work: Path) -> dict[str, Any]:
    """The report's layout at 1280 x 900, as the probe measured it."""
    page = work / "probed.html"
    text = report_html.read_text()
    page.write_text(text.replace("</body>", _PROBE + "</body>", 1))
    result = _run(page, work / "profile", "--dump-dom")
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', result.stdout, re.S)
    assert found, f"the probe did not run (exit {result.returncode}): {result.stderr[-2000:]}"
    data: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return data


def screenshot(report_html: Path, png: Path, work: Path) -> None:
    """What a 1280 x 900 window shows of the report, as PNG."""
    result = _run(report_html, work / "profile", "--hide-scrollbars", f"--screenshot={png}")
    assert png.exists(), f"no screenshot (exit {result.returncode}): {result.stderr[-2000:]}"
