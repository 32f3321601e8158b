"""Render api/static/icons/favicon.svg to the PNG icons the manifest lists (Debian Chromium).

Run after changing the SVG: `.venv/bin/python deploy/make_icons.py`. The PNGs are committed.
"""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import sync_playwright

ICONS = Path(__file__).resolve().parents[1] / "api" / "static" / "icons"
SIZES = (32, 180, 192, 512)


def main() -> None:
    svg = (ICONS / "favicon.svg").read_text()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
        )
        try:
            for size in SIZES:
                page = browser.new_page(viewport={"width": size, "height": size})
                html = svg.replace("<svg ", f'<svg width="{size}" height="{size}" ', 1)
                page.set_content(
                    f"<html><body style='margin:0;background:transparent'>{html}</body></html>"
                )
                page.screenshot(path=str(ICONS / f"icon-{size}.png"), omit_background=True)
                page.close()
        finally:
            browser.close()


if __name__ == "__main__":
    main()
