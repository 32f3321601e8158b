"""The wallet's verification line and the match-over "play again" panel in Chromium, on the
page alone with the API answered by the test (page.route): the states a player sees (propose,
waiting for N, asked to accept, declined, expired, seated, withdrawn, seating cut short), at phone and desktop sizes, with
touch targets of 44 px, no overflow and no serious axe-core violation."""

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


def _rematch(status: str, my_answer: str, waiting: int, mine: bool = False) -> dict[str, Any]:
    """The "play again" invitation of m-1 as ben sees it (as ana, its proposer, when `mine`);
    status "seated" is an accepted invitation with its table, "cut short" one without (its
    seating stopped by a failing service after everyone accepted)."""
    return {
        "invitation_id": 7,
        "inviter": "ana",
        "invitees": ["ben"],
        "op": "private",
        "kind": "casa-duelo",
        "tier": "10",
        "invite_code": None,
        "match_id": "m-1",
        "status": "accepted" if status in ("seated", "cut short") else status,
        "failure": None,
        "table_id": "t-9" if status == "seated" else None,
        "created_at": "2026-12-02T01:59:00Z",
        "expires_at": "2026-12-02T02:00:00Z",
        "players": [
            {"player": "ana", "answer": "accepted"},
            {"player": "ben", "answer": my_answer},
        ],
        "waiting_for": waiting,
        "my_answer": "accepted" if mine else my_answer,
        "sent_by_me": mine,
        "table": None,
    }


class FakeApi:
    """What the page's calls get: the rematch of match m-1 as the test sets it."""

    def __init__(self) -> None:
        self.rematch: dict[str, Any] | None = None
        self.posts: list[str] = []

    def handle(self, route: Any) -> None:
        url, method = route.request.url, route.request.method
        if url.endswith("/api/me/verification"):
            body = {"may_play_paid": False, "reason": "vpn_detected", "detail": "vpn"}
            return self.json(route, 200, body)
        if "/api/invitations" in url and method == "POST":
            self.posts.append(url.split("/api/", 1)[1])
            if url.endswith("/api/invitations/rematch"):
                self.rematch = _rematch("pending", "pending", 1, mine=True)
            elif url.endswith("/accept"):
                self.rematch = _rematch("seated", "accepted", 0)
            elif url.endswith("/decline"):
                self.rematch = _rematch("declined", "declined", 0)
            elif url.endswith("/cancel"):
                self.rematch = _rematch("cancelled", "pending", 1, mine=True)
            return self.json(route, 200, self.rematch)
        if "/api/invitations/by-match/" in url:
            if self.rematch is None:
                return self.json(route, 404, {"error": "invitation_not_found", "detail": "none"})
            return self.json(route, 200, self.rematch)
        return self.json(route, 404, {"error": "not_found", "detail": "not here"})

    @staticmethod
    def json(route: Any, status: int, body: Any) -> None:
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body))


MOUNT = """async () => {
    const { RematchPanel } = await import("/js/rematch.js");
    for (const s of document.querySelectorAll(".screen")) s.hidden = s.id !== "screen-table";
    const box = document.getElementById("match-over");
    window.panel?.stop();
    window.seated = null;
    window.panel = new RematchPanel("m-1", { onSeated: (r) => { window.seated = r.table_id; } });
    box.replaceChildren(window.panel.element());
    box.hidden = false;
    await window.panel.start();
}"""

WALLET = """async () => {
    const { loadVerification } = await import("/js/identity.js");
    for (const s of document.querySelectorAll(".screen")) s.hidden = s.id !== "screen-wallet";
    await loadVerification(document.getElementById("wallet-verification"));
}"""


def axe_panel(page: Any) -> list[str]:
    """axe-core on the match-over panel alone: the table around it is not drawn here (no
    match), so its board has no label yet; the table's own tests check it."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page, context="#match-over")
    return [
        f"{v['id']} ({v['impact']})"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def _state(page: Any) -> str:
    text: str = page.inner_text("[data-test=rematch-state]")
    return text


@pytest.mark.parametrize("size", ["phone", "desktop"])
def test_verification_line_and_play_again_states(size: str) -> None:
    need_chromium()
    from playwright.sync_api import sync_playwright

    api = FakeApi()
    with static_server() as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = (phone_context if size == "phone" else desktop_context)(browser)
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.route("**/api/**", api.handle)
            page.goto(base + "/")
            page.wait_for_selector("#screen-login:not([hidden])")

            # The wallet says why paid play is refused and what to do (Spanish by default).
            page.evaluate(WALLET)
            line = page.locator("[data-test=verification]")
            assert line.inner_text() == "Desactiva tu VPN o proxy para jugar por dinero."
            assert line.get_attribute("data-reason") == "vpn_detected"
            shot(page, "wallet-verification")
            assert axe_serious(page) == [], "wallet"
            assert_fits(page, "wallet")

            # Nobody proposed yet: the button; proposing shows who is still to answer.
            page.evaluate(MOUNT)
            page.wait_for_selector("[data-test=play-again]")
            page.click("[data-test=play-again]")
            page.wait_for_function(
                "() => document.querySelector('[data-test=rematch-state]').textContent"
                ".startsWith('Esperando respuestas')"
            )
            assert _state(page) == "Esperando respuestas: 1"
            shot(page, "rematch-waiting")
            assert small_targets(page, "#match-over") == []
            assert axe_panel(page) == [], "rematch waiting"
            assert_fits(page, "rematch waiting")
            # The proposer may withdraw it (cancel), not decline his own proposal.
            page.wait_for_selector("[data-test=rematch-cancel]")
            assert page.query_selector("[data-test=rematch-decline]") is None
            # Someone declines: the next poll says so, and the panel stops.
            api.rematch = _rematch("declined", "accepted", 0, mine=True)
            page.wait_for_function(
                "() => document.querySelector('.rematch').dataset.status === 'declined'"
            )
            assert _state(page) == "Alguien rechazó jugar otra vez."

            # Asked by another player: accept or decline; accepting last seats everyone.
            api.rematch = _rematch("pending", "pending", 1)
            page.evaluate(MOUNT)
            page.wait_for_selector("[data-test=rematch-accept]")
            assert _state(page) == "Te proponen jugar otra vez: ana"
            shot(page, "rematch-asked")
            assert small_targets(page, "#match-over") == []
            assert axe_panel(page) == [], "rematch asked"
            page.click("[data-test=rematch-accept]")
            page.wait_for_function("() => window.seated === 't-9'")
            assert api.posts[-1] == "invitations/7/accept"

            # Expired while waiting.
            api.rematch = _rematch("expired", "pending", 1)
            page.evaluate(MOUNT)
            page.wait_for_function(
                "() => document.querySelector('.rematch').dataset.status === 'expired'"
            )
            assert _state(page) == "La propuesta caducó."

            # The proposer withdraws it: over for everyone.
            api.rematch = _rematch("pending", "pending", 1, mine=True)
            page.evaluate(MOUNT)
            page.click("[data-test=rematch-cancel]")
            page.wait_for_function(
                "() => document.querySelector('.rematch').dataset.status === 'cancelled'"
            )
            assert api.posts[-1] == "invitations/7/cancel"
            assert _state(page) == "Retiraste la propuesta."
            assert not errors, errors
        finally:
            browser.close()


CUT_SHORT = "Todos aceptaron: sentándolos… Si la mesa no se abre, reintenta."


@pytest.mark.parametrize("size", ["phone", "desktop"])
def test_seating_cut_short_offers_retry_to_every_player(size: str) -> None:
    """Everyone accepted but a failing service cut the seating short: the panel says so in the
    lobby's words, to the proposer and to the others alike, with Retry (an acceptance again,
    which replays the seating); the retry that seats everyone opens the new table."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    api = FakeApi()
    with static_server() as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = (phone_context if size == "phone" else desktop_context)(browser)
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.route("**/api/**", api.handle)
            page.goto(base + "/")
            page.wait_for_selector("#screen-login:not([hidden])")

            for mine in (False, True):  # ben, who accepted; ana, who proposed it
                api.rematch = _rematch("cut short", "accepted", 0, mine=mine)
                page.evaluate(MOUNT)
                page.wait_for_selector("[data-test=rematch-retry]")
                assert page.locator(".rematch").get_attribute("data-status") == "seating"
                assert _state(page) == CUT_SHORT, mine
                buttons = page.eval_on_selector_all(
                    "#match-over button", "bs => bs.map(b => b.textContent)"
                )
                assert buttons == ["Reintentar"], (mine, buttons)
                if not mine:
                    shot(page, "rematch-cut-short")
                    assert small_targets(page, "#match-over") == []
                    assert axe_panel(page) == [], "rematch cut short"
                    assert_fits(page, "rematch cut short")
                    # A poll that changes nothing keeps the focused button (not rebuilt);
                    # the next poll is asked only once the one before it was applied.
                    retry = page.locator("[data-test=rematch-retry]")
                    retry.focus()
                    for _ in range(2):
                        with page.expect_request("**/api/invitations/by-match/m-1"):
                            pass
                    assert retry.evaluate("b => b === document.activeElement")
                # Retry: the seating replayed, everyone seated, the new table opens.
                page.click("[data-test=rematch-retry]")
                page.wait_for_function("() => window.seated === 't-9'")
                assert api.posts[-1] == "invitations/7/accept"

            # English: the same words as the lobby's list.
            page.click("#lang")
            api.rematch = _rematch("cut short", "accepted", 0)
            page.evaluate(MOUNT)
            page.wait_for_selector("[data-test=rematch-retry]")
            assert _state(page) == (
                "Everyone accepted: seating you… If the table does not open, retry."
            )
            assert page.inner_text("[data-test=rematch-retry]") == "Retry"
            assert not errors, errors
        finally:
            browser.close()
