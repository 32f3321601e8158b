"""Support's screen and the hand replay in headless Chromium, against the in-process platform
served by uvicorn (real PostgreSQL, real ledger, engine and matchmaking).

On a phone (390x844, touch) a support agent finds a player, opens one of his finished hands
and steps through it to the result with the buttons, then back to the deal and to the end
with the keyboard; he opens a dispute. On a desktop (1280x800) the player replays his own
hand from his history, and an admin finds the dispute in the staff audit log. Each screen:
no horizontal overflow, touch targets of 44 px, no serious or critical axe-core violation.
Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.migrate import upgrade
from tests.api.api_helpers import PASSWORD, make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform, play_turns
from tests.browser.browser_helpers import (
    assert_fits,
    axe_serious,
    desktop_context,
    need_chromium,
    phone_context,
    shot,
    small_targets,
    watched_page,
)
from tests.uvicorn_server import UvicornServer

pytestmark = [pytest.mark.browser]

PLAYER, AGENT, ADMIN, CASHIER = "bs_pla", "bs_help", "bs_boss", "bs_cash"
CASHIER2 = "bs_cash2"
MISTAKE_CENTS = 1200  # a deposit that finance corrects with four eyes
READY_TIMEOUT_S = 300


class Served:
    """The platform in its own thread and event loop, serving the gateway on a real port
    until `stop` is set; one CPU match already played to its end by the player, and a
    refund (of a withdrawal) proposed by support; a deposit for finance to correct."""

    def __init__(self, database_url: str, secret: bytes, key_dir: Path) -> None:
        self.args = (database_url, secret, key_dir)
        self.url = ""
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    async def _serve(self) -> None:
        database_url, secret, key_dir = self.args
        async with platform(database_url, secret, key_dir) as p:
            async with p.client() as pla:
                await sign_in(pla, PLAYER)
                r = await pla.post("/api/lobby/cpu", json={"kind": "apuesta-1v1"})
                if r.status_code != 200:
                    raise RuntimeError(r.text)
                await play_turns({PLAYER: pla}, r.json()["match_id"])
            async with p.client() as fin, p.client() as agent:
                await sign_in(fin, CASHIER)
                await sign_in(agent, AGENT)
                for path, cents in (("deposits", 2500), ("withdrawals", 500)):
                    r = await fin.post(
                        f"/api/finance/{path}",
                        json={"player": PLAYER, "amount": cents, "reference": "desk"},
                    )
                    if r.status_code != 200:
                        raise RuntimeError(r.text)
                r = await agent.post(
                    "/api/support/refunds",
                    json={"player": PLAYER, "entry_id": r.json()["entry_id"], "reason": "twice"},
                )
                if r.status_code != 201:
                    raise RuntimeError(r.text)
                r = await fin.post(
                    "/api/finance/deposits",
                    json={"player": PLAYER, "amount": MISTAKE_CENTS, "reference": "typo"},
                )
                if r.status_code != 200:
                    raise RuntimeError(r.text)
            async with UvicornServer(p.gateway, lifespan="off") as served:
                self.url = served.url
                self.ready.set()
                while not self.stop.is_set():
                    await asyncio.to_thread(self.stop.wait, 0.5)


@pytest.fixture(scope="module")
def site(database_url: str, internal_secret: bytes, tmp_path_factory: Any) -> Iterator[str]:
    need_chromium()
    upgrade(database_url, COMPONENTS)
    for name, role in (
        (PLAYER, "player"),
        (AGENT, "support"),
        (ADMIN, "admin"),
        (CASHIER, "finance"),
        (CASHIER2, "finance"),
    ):
        asyncio.run(make_user(database_url, name, role))
    served = Served(database_url, internal_secret, tmp_path_factory.mktemp("keys"))
    served.thread.start()
    try:
        if not served.ready.wait(READY_TIMEOUT_S):
            raise RuntimeError("the platform did not start")
        if served.error is not None:
            raise served.error
        yield served.url
    finally:
        served.stop.set()
        served.thread.join(60)


def _sign_in(page: Any, base: str, name: str) -> None:
    page.goto(base + "/")
    page.fill("#login-form input[name=username]", name)
    page.fill("#login-form input[name=password]", PASSWORD)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#nav button")


def _checks(page: Any, what: str, within: str) -> None:
    assert_fits(page, what)
    assert small_targets(page, within) == [], what
    assert axe_serious(page) == [], what


def _step_through(page: Any, press: Any) -> None:
    """From the deal, button by button to the result; then Home and End by keyboard."""
    viewer = page.locator("[data-test=replay]")
    viewer.wait_for()
    assert viewer.get_attribute("data-kind") == "deal"
    total = int(page.locator("[data-test=replay-counter]").inner_text().split("/")[1])
    assert total >= 3
    assert page.locator("[data-test=replay-prev]").is_disabled()
    for i in range(1, total):
        press("[data-test=replay-next]")
        assert viewer.get_attribute("data-step") == str(i)
    assert viewer.get_attribute("data-kind") == "result"
    assert page.locator("[data-test=replay-next]").is_disabled()
    assert page.locator("[data-test=replay-caption]").inner_text()
    assert page.locator("[data-test=replay-line] svg").count() >= 1
    viewer.focus()
    page.keyboard.press("Home")
    assert viewer.get_attribute("data-kind") == "deal"
    assert page.locator("[data-test=replay-line] svg").count() == 0
    page.keyboard.press("ArrowRight")
    assert viewer.get_attribute("data-kind") == "play"
    assert page.locator("[data-test=replay-line] svg").count() == 1
    page.keyboard.press("End")
    assert viewer.get_attribute("data-kind") == "result"


def test_support_replays_a_hand_on_a_phone_and_opens_a_dispute(site: str, browser: Any):
    with watched_page(phone_context(browser)) as page:
        _sign_in(page, site, AGENT)
        page.wait_for_selector("#screen-support:not([hidden])")
        page.fill("#support-root input[name=q]", "bs_p")
        page.locator("[data-test=sp-search] button").tap()
        page.locator("[data-test=sp-open]").first.tap()
        page.wait_for_selector("[data-test=sp-replay]")
        assert page.locator("[data-test=sp-name]").inner_text().endswith(f"({PLAYER})")
        page.locator("[data-test=sp-replay]").first.tap()
        _step_through(page, lambda sel: page.locator(sel).tap())
        shot(page, "support-replay")
        _checks(page, "support replay", "#screen-support")
        page.fill("[data-test=sp-open-dispute] input[name=reason]", "says the last hand was wrong")
        page.locator("[data-test=sp-open-dispute] button").tap()
        page.wait_for_selector("[data-test=sp-dispute-list] li[data-status=open]")
        page.fill("[data-test=sp-note] input[name=note]", "replayed it with him")
        page.locator("[data-test=sp-note] button").tap()
        page.wait_for_selector(".sp-notes li:nth-child(2)")
        shot(page, "support-player", full_page=True)
        _checks(page, "support player", "#screen-support")


def test_player_replays_his_own_hand_and_admin_reads_the_staff_log(site: str, browser: Any):
    with watched_page(desktop_context(browser)) as page:
        _sign_in(page, site, PLAYER)
        page.locator("[data-test=nav-history]").click()
        page.locator("[data-test=replay-hand]").first.click()
        _step_through(page, lambda sel: page.locator(sel).click())
        shot(page, "history-replay")
        _checks(page, "history replay", "#screen-history")
        page.locator("#logout").click()
        page.wait_for_selector("#screen-login:not([hidden])")
        _sign_in(page, site, ADMIN)
        page.locator("[data-test=nav-staff]").click()
        page.wait_for_selector("[data-test=staff-list] li[data-action]")
        page.fill("[data-test=staff-filter] input[name=actor]", AGENT)
        page.locator("[data-test=staff-filter] button").click()
        # the filtered page replaces the whole log (the cashier's deposits included)
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-test=staff-list] li')]
                .every(li => (li.dataset.action || '').startsWith('support.'))"""
        )
        actions = page.locator("[data-test=staff-list] li").evaluate_all(
            "items => items.map(i => i.dataset.action)"
        )
        assert actions == ["support.dispute_note", "support.dispute_open", "support.refund_propose"]
        shot(page, "staff-log")
        _checks(page, "staff log", "#screen-staff")


def test_finance_approves_support_refund_on_a_phone(site: str, browser: Any):
    with watched_page(phone_context(browser)) as page:
        _sign_in(page, site, CASHIER)
        page.wait_for_selector("[data-test=fin-refund-list] li[data-refund]")
        shot(page, "finance-refunds")
        _checks(page, "finance refunds", "#fin-refunds")
        item = page.locator("[data-test=fin-refund-list] li[data-refund]").first
        item.locator("input[name=reason]").fill("bank shows one payout")
        item.locator("[data-test=rf-approve]").tap()
        page.wait_for_selector("[data-test=fin-refund-list] li.empty")
        balance = page.request.get(f"{site}/api/finance/statements/{PLAYER}").json()
        assert balance["closing_balance"] == 2500 + MISTAKE_CENTS
        assert [x["kind"] for x in balance["lines"]][-1] == "reversal"


def _statement(page: Any, site: str) -> dict[str, Any]:
    answer: dict[str, Any] = page.request.get(f"{site}/api/finance/statements/{PLAYER}").json()
    return answer


def test_finance_proposes_a_correction_and_another_finance_user_approves_it(
    site: str, browser: Any
):
    with watched_page(phone_context(browser)) as page:
        _sign_in(page, site, CASHIER)
        page.wait_for_selector("[data-test=fin-refund-list]")
        before = _statement(page, site)
        mistake = next(
            x["entry_id"]
            for x in before["lines"]
            if x["kind"] == "deposit" and x["amount"] == MISTAKE_CENTS
        )
        page.fill("#fin-statement-form input[name=player]", PLAYER)
        page.locator("#fin-statement-form button[type=submit]").tap()
        form = page.locator("[data-test=co-form]")
        form.wait_for()
        form.locator("select[name=entry_id]").select_option(str(mistake))
        form.locator("input[name=reason]").fill("typed 12.00 for 1.20")
        form.locator("button[type=submit]").tap()
        own = page.locator("[data-test=fin-refund-list] li[data-own=true]")
        own.wait_for()
        proposal = int(own.get_attribute("data-refund") or "0")
        assert page.locator("#fin-correct [role=status]").inner_text().startswith(f"✔ #{proposal}")
        # the proposer sees no buttons on his own, and the API refuses him anyway
        assert own.locator("[data-test=rf-approve]").count() == 0
        answer = page.evaluate(
            """async (id) => {
                const token = decodeURIComponent(document.cookie.match(/mesa_csrf=([^;]+)/)[1]);
                const r = await fetch(`/api/finance/refunds/${id}/approve`, {method: "POST",
                    headers: {"Content-Type": "application/json", "X-CSRF-Token": token},
                    body: JSON.stringify({reason: "mine"})});
                return [r.status, (await r.json()).error];
            }""",
            proposal,
        )
        assert answer == [403, "proposer_cannot_decide"]
        assert _statement(page, site)["closing_balance"] == before["closing_balance"]
        page.locator("#fin-correct").scroll_into_view_if_needed()
        shot(page, "finance-correction")
        own.scroll_into_view_if_needed()
        shot(page, "finance-own-proposal")
        _checks(page, "finance correction", "#fin-correct")
        _checks(page, "finance own proposal", "#fin-refunds")

    with watched_page(desktop_context(browser)) as page:
        _sign_in(page, site, CASHIER2)
        item = page.locator(f"[data-test=fin-refund-list] li[data-refund='{proposal}']")
        item.locator("[data-test=rf-approve]").wait_for()
        shot(page, "finance-correction-approve")
        _checks(page, "finance correction to approve", "#fin-refunds")
        item.locator("input[name=reason]").fill("the bank shows 1.20")
        item.locator("[data-test=rf-approve]").click()
        item.wait_for(state="detached")
        after = _statement(page, site)
        assert after["closing_balance"] == before["closing_balance"] - MISTAKE_CENTS
        assert after["lines"][-1]["kind"] == "reversal"
        reversals = [[x["kind"] for x in st["lines"]].count("reversal") for st in (before, after)]
        assert reversals[1] == reversals[0] + 1
