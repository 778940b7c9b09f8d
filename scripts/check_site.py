"""Open every page of the built book in headless Chromium and check what a reader would see.

    python scripts/check_site.py [--build _build/html]

Per page: math was typeset (MathJax output present, no raw TeX left), every image file exists
and is an image, no cell shows an error or a traceback, chapters (notebooks) carry the Colab
launch link, and every internal link resolves (file and anchor). A screenshot of each page goes
to _build/screenshots/. Without Chromium it says so and exits 0, except under CI, where it fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]
RAW_TEX = re.compile(r"\\\(|\\\[|\$\$|\\begin\{|\\frac|\\mathrm")
IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"<svg", b"<?xml")


class Page(HTMLParser):
    """The parts of a rendered page the checks need."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []
        self.ids: set[str] = set()
        self.classes: list[str] = []
        self.text_outside_code: list[str] = []
        self._skip = 0  # depth inside <pre>, <code>, <script>, <style>, <mjx-container>, <textarea>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if a.get("class"):
            self.classes.append(a["class"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])
        if tag in {"pre", "code", "script", "style", "mjx-container", "textarea"}:
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in {"pre", "code", "script", "style", "mjx-container", "textarea"} and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.text_outside_code.append(data)


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def render(browser: str, page: Path, screenshot: Path, profile: str) -> str:
    url = page.resolve().as_uri()
    common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=15000"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    subprocess.run(
        [*common, f"--screenshot={screenshot}", "--window-size=1280,2400", url], capture_output=True, timeout=120
    )
    return dom


def parse(html: str) -> Page:
    p = Page()
    p.feed(html)
    return p


def check_page(build: Path, page: Path, dom: str, is_chapter: bool, anchors: dict[Path, set[str]]) -> list[str]:
    problems = []
    source = page.read_text()
    p = parse(dom)
    has_math = 'class="math' in source or "\\(" in source
    if has_math and "mjx-container" not in dom:
        problems.append("math present but MathJax did not typeset it")
    raw = [t.strip()[:60] for t in p.text_outside_code if RAW_TEX.search(t)]
    if raw:
        problems.append(f"raw TeX left in the page: {raw[:3]}")
    for src in p.images:
        if urlparse(src).scheme in {"http", "https", "data"}:
            if urlparse(src).scheme != "data":
                problems.append(f"image from the network: {src}")
            continue
        target = (page.parent / unquote(urlparse(src).path)).resolve()
        if not target.is_file() or not target.read_bytes()[:5].startswith(IMAGE_MAGIC):
            problems.append(f"image missing or not an image: {src}")
    if any("traceback" in c.split() or "error" in c.split() for c in p.classes if "output" in c):
        problems.append("a cell shows an error output")
    if "Traceback (most recent call last)" in dom:
        problems.append("a traceback is shown")
    if is_chapter and f"/blob/main/colab/book/{page.stem}.ipynb" not in dom:
        problems.append("no Colab launch link to the chapter's Colab edition (colab/book/)")
    for href in p.links:
        parts = urlparse(href)
        if parts.scheme or href.startswith(("mailto:", "javascript:")):
            continue
        target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
        if not target.exists():
            problems.append(f"broken link: {href}")
            continue
        if parts.fragment and target.suffix == ".html":
            ids = anchors.setdefault(target, parse(target.read_text()).ids if target != page else p.ids)
            if parts.fragment not in ids:
                problems.append(f"missing anchor: {href}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "_build" / "html"))
    args = ap.parse_args()
    build = Path(args.build)
    browser = chromium()
    if browser is None:
        message = "check_site: Chromium not found (apt-get install chromium); the browser checks did not run"
        print(message, file=sys.stderr)
        return 1 if os.environ.get("CI") else 0
    toc = (ROOT / "_toc.yml").read_text()
    docs = re.findall(r"(?:root|file):\s*(\S+)", toc)
    shots = build.parent / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    anchors: dict[Path, set[str]] = {}
    failures = 0
    with tempfile.TemporaryDirectory() as profile:
        for doc in docs:
            page = build / f"{doc}.html"
            if not page.exists():
                print(f"FAIL {doc}: page was not built")
                failures += 1
                continue
            dom = render(browser, page, shots / f"{Path(doc).name}.png", profile)
            problems = check_page(build, page, dom, (ROOT / f"{doc}.ipynb").exists(), anchors)
            failures += bool(problems)
            print(f"{'FAIL' if problems else 'ok  '} {doc}" + "".join(f"\n     - {x}" for x in problems))
    print(f"check_site: {len(docs) - failures} passed, {failures} failed; screenshots in {shots}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
