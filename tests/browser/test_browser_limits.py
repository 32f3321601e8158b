"""The wallet's responsible-play section and the session reminder banner, in Chromium.

The page alone (static server) with the gateway's answers given by the test: the section's
fields, its Spanish and English strings, no overflow at any width, axe-core clean; and the
reminder banner appearing at the interval the server names, the clock moved by Playwright
(never waited for). The routes themselves are tested against the real platform in
tests/api/test_api_limits.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.browser_helpers import (
    assert_fits,
    axe_serious,
    desktop_context,
    phone_context,
    shot,
    small_targets,
    static_server,
    watched_page,
)

pytestmark = [pytest.mark.browser]

START = "2026-12-02T01:00:00Z"
NONE = {"cents": None, "pending_cents": None, "pending_at": None}
LIMITS = {
    "player": "ana",
    "currency": "USD",
    "windows": "rolling",
    "deposit_day": {"cents": 5000, "pending_cents": 8000, "pending_at": "2026-12-03T01:00:00Z"},
    "deposit_week": NONE,
    "deposit_month": NONE,
    "loss_day": {"cents": 2500, "pending_cents": None, "pending_at": None},
    "loss_week": NONE,
    "loss_month": NONE,
    "reminder_min": 30,
    "cooling_off_until": None,
}


def _answers(page: Any, sent: list[dict[str, Any]]) -> None:
    def handle(route: Any) -> None:
        request = route.request
        path = request.url.split("://", 1)[1].split("/", 1)[1].split("?")[0]
        body: Any = {"error": "not_found", "detail": path}
        status = 200
        if path == "api/me":
            body = {
                "id": "ana",
                "display_name": "Ana",
                "role": "player",
                "status": "active",
                "excluded_until": None,
                "may_play_paid": True,
            }
        elif path == "api/me/limits" and request.method == "POST":
            sent.append(json.loads(request.post_data or "{}"))
            body = LIMITS
        elif path == "api/me/limits":
            body = LIMITS
        elif path == "api/me/session":
            # The server's own clock: a reminder due half an hour after sign-in.
            body = {
                "started_at": START,
                "now": "2026-12-02T01:29:00Z",
                "played_s": 1740 + 60 * len(sent),
                "currency": "USD",
                "net_cents": -1250,
                "reminder_min": 30,
                "next_reminder_at": "2026-12-02T01:30:00Z",
            }
        elif path == "api/me/wallet":
            body = {"player": "ana", "currency": "USD", "balance": 12345}
        elif path == "api/me/statement":
            body = {
                "player": "ana",
                "account": "wallet:ana",
                "currency": "USD",
                "opening_balance": 0,
                "closing_balance": 12345,
                "lines": [],
                "next": None,
            }
        elif path == "api/history":
            body = {"transcripts": []}
        else:
            status = 404
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body))

    page.route("**/api/**", handle)


def _whole_on_screen(page: Any) -> None:
    """The banner and its button inside the viewport at every width (a fixed banner cut off
    at the edge is no overflow to the page)."""
    before = dict(page.viewport_size)
    for width in (360, 390, 430, 768, 1280):
        page.set_viewport_size({"width": width, "height": 800})
        page.wait_for_timeout(50)
        box = page.locator("[data-test=reminder]").bounding_box()
        ok = page.locator("[data-test=reminder-ok]").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (width, box)
        assert ok["x"] + ok["width"] <= box["x"] + box["width"], (width, ok, box)
        # and the button's word is not squeezed out of it
        spill = page.eval_on_selector(
            "[data-test=reminder-ok]", "b => b.scrollWidth - b.clientWidth"
        )
        assert spill <= 0, (width, spill)
    page.set_viewport_size(before)
    page.wait_for_timeout(50)


@pytest.mark.parametrize("device", ["phone", "desktop"])
def test_wallet_section_and_reminder_banner(browser: Any, device: str) -> None:
    context = phone_context(browser) if device == "phone" else desktop_context(browser)
    sent: list[dict[str, Any]] = []
    with watched_page(context) as page, static_server() as base:
        _answers(page, sent)
        page.clock.install()
        page.goto(base + "/#wallet")
        page.wait_for_selector("[data-test=lim-save]")
        # Current limits, a pending rise with its time, the windows said in words.
        assert page.input_value("[data-test=lim-deposit_day]") == "50.00"
        assert page.input_value("[data-test=lim-loss_day]") == "25.00"
        assert page.input_value("[data-test=lim-deposit_week]") == ""
        panel = page.inner_text("[data-test=limits-panel]")
        assert "Cambia a" in panel and "24 horas" in panel and "Las mesas gratis" in panel
        assert page.input_value("[data-test=lim-reminder]") == "30"
        assert_fits(page, "responsible play")
        assert small_targets(page, "#limits-panel") == []
        assert axe_serious(page) == []
        shot(page, "limits", full_page=True)
        # Saving sends only what changed: a lower loss limit and a removed deposit limit.
        page.fill("[data-test=lim-loss_day]", "20")
        page.fill("[data-test=lim-deposit_day]", "")
        page.click("[data-test=lim-save]")
        page.wait_for_function("() => document.getElementById('lim-result').textContent !== ''")
        assert sent == [{"limits": {"deposit_day": None, "loss_day": 2000}, "reminder_min": 30}]
        assert page.is_hidden("[data-test=reminder]")
        # The reminder's time comes (the server said 1 minute from now): the banner shows.
        page.clock.run_for(61_000)
        page.wait_for_selector("[data-test=reminder]:not([hidden])")
        text = page.inner_text("[data-test=reminder-text]")
        assert "Llevas jugando" in text and "30 min" in text, text
        assert "-" in text and "12,50" in text.replace(".", ","), text
        assert_fits(page, "reminder banner")
        _whole_on_screen(page)
        assert axe_serious(page) == []
        shot(page, "reminder")
        page.click("[data-test=reminder-ok]")
        assert page.is_hidden("[data-test=reminder]")
        # In English too.
        page.click("[data-test=lang]")
        page.click("[data-test=nav-wallet]")
        page.wait_for_function(
            "() => document.getElementById('limits-panel').textContent.includes('Responsible play')"
        )
