"""Shared pieces of the browser tests: Debian Chromium, a static server for the page alone,
overflow and axe-core checks, screenshots."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STATIC = Path(__file__).resolve().parents[2] / "api" / "static"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
WIDTHS = (360, 390, 430, 768, 1280)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


def need_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.fail("/usr/bin/chromium is missing: install Debian's chromium (CI does)")


def phone_context(browser: Any) -> Any:
    return browser.new_context(
        viewport=PHONE, has_touch=True, is_mobile=True, device_scale_factor=1
    )


def desktop_context(browser: Any) -> Any:
    return browser.new_context(viewport=DESKTOP)


@contextmanager
def watched_page(context: Any) -> Iterator[Any]:
    """A new page of `context` whose script errors fail the test; the context closed after."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
        assert not errors, errors
    finally:
        context.close()


def shot(page: Any, name: str, full_page: bool = False) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    width = page.viewport_size["width"]
    page.screenshot(path=str(ARTIFACTS / f"{name}-{width}.png"), full_page=full_page)


def overflow_px(page: Any) -> int:
    """How far the page reaches past the viewport's width (0 when nothing sticks out)."""
    value: int = page.evaluate(
        "() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
        " - document.documentElement.clientWidth"
    )
    return value


def assert_fits(page: Any, what: str) -> None:
    """No horizontal overflow at any of the five widths; the viewport is put back after."""
    before = dict(page.viewport_size)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 800 if width > 500 else 844})
        page.wait_for_timeout(50)  # one frame for the layout to settle at the new width
        assert overflow_px(page) <= 0, f"{what} overflows at {width} px"
    page.set_viewport_size(before)
    page.wait_for_timeout(50)


def small_targets(page: Any, within: str = "body") -> list[str]:
    """Visible buttons, links and fields under 44 px in either dimension (a checkbox counts
    by its label, which is what a thumb presses)."""
    found: list[str] = page.evaluate(
        """(root) => {
            const out = [];
            for (const e of document.querySelector(root).querySelectorAll(
                    'button, a[href], input, select')) {
                if (e.type === 'hidden') continue;
                const target = e.type === 'checkbox' && e.closest('label') ? e.closest('label') : e;
                const r = target.getBoundingClientRect();
                if (!r.width || !r.height || !target.checkVisibility()) continue;
                if (r.width < 43.5 || r.height < 43.5)
                    out.push(`${e.tagName} ${e.id || e.dataset.test || e.textContent.trim().slice(0, 20)}`
                        + ` ${Math.round(r.width)}x${Math.round(r.height)}`);
            }
            return out;
        }""",
        within,
    )
    return found


def axe_serious(page: Any) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:5]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def static_server() -> Iterator[str]:
    """The page's files alone on a loopback port (API calls answer 404: the sign-in shows)."""
    handler = functools.partial(_Quiet, directory=str(STATIC))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
