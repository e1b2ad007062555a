"""Screenshot every page of the HTML preview in a headless browser, for a maintainer to look at.

Usage (after ``python -m tools.build``, which writes the preview to ``_build/html``)::

    python scripts/screenshot_preview.py [PREVIEW_DIR] [--out DIR] [--width 1280]

Uses playwright's Chromium where the ``playwright`` package and its browser are installed, else a
Chromium or Chrome on the PATH (``--headless --screenshot``).  Where there is neither, it says so
and writes nothing: nothing here can fetch a browser.  One PNG per page, named after the page's
path (``chapters-kv-cache.png``), full length with playwright, one window tall with a bare browser.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome", "google-chrome-stable")


def preview_pages(preview: Path) -> list[Path]:
    return sorted(preview.rglob("*.html"))


def shot_name(preview: Path, page: Path) -> str:
    return page.relative_to(preview).with_suffix("").as_posix().replace("/", "-") + ".png"


def with_playwright(pages: list[Path], preview: Path, out: Path, width: int) -> bool:
    """Screenshots with playwright; False where playwright or its browser is missing."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        return False
    try:
        with sync_playwright() as driver:
            browser = driver.chromium.launch()
            tab = browser.new_page(viewport={"width": width, "height": 900})
            for page in pages:
                tab.goto(page.resolve().as_uri())
                tab.screenshot(path=str(out / shot_name(preview, page)), full_page=True)
            browser.close()
    except Error as error:  # no browser installed for playwright
        print(f"playwright: {error}".splitlines()[0], file=sys.stderr)
        return False
    return True


def with_browser(pages: list[Path], preview: Path, out: Path, width: int) -> bool:
    """Screenshots with a headless Chromium on the PATH; False where there is none."""
    binary = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    if binary is None:
        return False
    # Chromium will not start its sandbox as root (a container, CI): there it runs without one.
    sandbox = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    for page in pages:
        done = subprocess.run([binary, "--headless", *sandbox, "--disable-gpu", "--hide-scrollbars",
                               f"--window-size={width},2400", f"--screenshot={out / shot_name(preview, page)}",
                               page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{binary} could not screenshot {page}: {done.stderr.strip()[-500:]}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("preview", nargs="?", type=Path, default=Path("_build/html"))
    parser.add_argument("--out", type=Path, default=Path("_build/screenshots"))
    parser.add_argument("--width", type=int, default=1280)
    args = parser.parse_args(argv)
    pages = preview_pages(args.preview)
    if not pages:
        print(f"no preview pages under {args.preview}: run python -m tools.build first", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for shoot in (with_playwright, with_browser):
        if shoot(pages, args.preview, args.out, args.width):
            print(f"{len(pages)} screenshots in {args.out} ({shoot.__name__.replace('with_', '')})")
            return 0
    print("SKIPPED: no headless browser here (install playwright and run 'playwright install "
          "chromium', or put Chromium on the PATH); no screenshots written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
