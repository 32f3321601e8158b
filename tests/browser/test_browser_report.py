"""The players' fair-play controls in Chromium, with the API answered by the test: the report
dialog from a history item, the table bar's report button, and the "random opponents only"
switch on the wallet screen. Phone and desktop: no overflow, touch targets, axe-core."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.browser_helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    assert_fits,
    axe_serious,
    desktop_context,
    need_chromium,
    phone_context,
    shot,
    small_targets,
    static_server,
)

pytestmark = [pytest.mark.browser]

MATCH = "m-0123456789abcdef"
ME = {"id": "ana", "display_name": "Ana", "role": "player", "status": "active"}


class FakeApi:
    """Answers the page's API calls; remembers the reports and preference writes."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []
        self.random_only = False

    def answer(self, route: Any) -> None:
        req = route.request
        path = req.url.split("://", 1)[1].split("/", 1)[1].split("?", 1)[0]
        body: Any = {}
        if path == "api/me":
            body = ME
        elif path == "api/history":
            body = {
                "transcripts": [
                    {
                        "deal_id": f"{MATCH}/3",
                        "match_id": MATCH,
                        "table_id": "t-1",
                        "variant": "dominicana",
                        "players": [],
                        "leaf_index": 7,
                        "closed": True,
                    }
                ],
                "next": None,
            }
        elif path == f"api/matches/{MATCH}":
            body = {
                "seat": 0,
                "state": {
                    "seats": [
                        {"seat": 0, "player_id": "ana", "bot": False, "left": False},
                        {"seat": 1, "player_id": "beto", "bot": False, "left": False},
                    ]
                },
            }
        elif path == "api/reports":
            self.reports.append(json.loads(req.post_data or "{}"))
            body = {"report_id": 1, "received_at": "2026-12-02T01:00:00Z"}
        elif path == "api/preferences":
            if req.method == "PUT":
                self.random_only = bool(json.loads(req.post_data)["random_opponents_only"])
            body = {"random_opponents_only": self.random_only}
        elif path == "api/me/wallet":
            body = {"balance": 5000, "currency": "USD"}
        elif path == "api/me/statement":
            body = {"lines": [], "next": None}
        elif path in ("api/lobby/kinds",):
            body = {"kinds": [], "currency": "USD"}
        elif path == "api/lobby/tables":
            body = {"tables": []}
        elif path in ("api/lobby/mine",):
            body = []
        elif path == "api/invitations":
            body = {"incoming": [], "outgoing": []}
        else:
            route.fulfill(status=404, json={"error": "not_found", "detail": path})
            return
        route.fulfill(status=200, json=body)


@pytest.mark.parametrize("where", ["phone", "desktop"])
def test_report_dialog_and_random_only_switch(where: str) -> None:
    need_chromium()
    from playwright.sync_api import sync_playwright

    fake = FakeApi()
    with static_server() as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            ctx = phone_context(browser) if where == "phone" else desktop_context(browser)
            page = ctx.new_page()
            page.route("**/api/**", fake.answer)
            page.goto(f"{base}/#history")
            page.locator("[data-test=report-hand]").first.click()
            dialog = page.locator("[data-test=report-dialog]")
            dialog.wait_for(state="visible")
            assert page.locator("[data-test=report-player] option").all_inner_texts() == ["beto"]
            page.select_option("[data-test=report-category]", "collusion")
            page.fill("[data-test=report-text]", "se dejó ganar")
            assert_fits(page, "report dialog")
            assert small_targets(page, "#report-dialog") == []
            assert axe_serious(page) == []
            shot(page, f"report-dialog-{where}")
            page.click("[data-test=report-send]")
            page.locator("[data-test=report-status]").filter(
                has_text="Denuncia recibida"
            ).wait_for()
            assert fake.reports == [
                {
                    "match_id": MATCH,
                    "player": "beto",
                    "category": "collusion",
                    "text": "se dejó ganar",
                }
            ]
            page.keyboard.press("Escape")

            page.click("[data-test=nav-wallet]")
            box = page.locator("[data-test=random-only]")
            box.wait_for(state="visible")
            page.wait_for_function("() => !document.getElementById('random-only').disabled")
            assert not box.is_checked()
            with page.expect_response(
                lambda r: r.url.endswith("/api/preferences") and r.request.method == "PUT"
            ):
                box.check()
            page.wait_for_function("() => !document.getElementById('random-only').disabled")
            assert fake.random_only
            assert_fits(page, "wallet")
            assert small_targets(page, "#screen-wallet") == []
            assert axe_serious(page) == []
            shot(page, f"wallet-random-only-{where}", full_page=True)

            # The table bar with its report button still fits a phone.
            page.evaluate(
                "() => { for (const s of document.querySelectorAll('.screen'))"
                " s.hidden = s.id !== 'screen-table'; }"
            )
            assert page.locator("[data-test=report-btn]").is_visible()
            assert_fits(page, "table bar")
            assert small_targets(page, ".table-bar") == []
            shot(page, f"table-bar-{where}")
        finally:
            browser.close()
