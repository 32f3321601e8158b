"""The reconciliation screen in headless Chromium, on a phone (390x844, touch) and a desktop:
every check with its verdict, a planted discrepancy followed to its match with one tap, the
commission line opened to its pots, a malformed settlement file refused with its line
numbers, a good one matched. No overflow at any width, touch targets of 44 px, axe-core clean.

The gateway and the ledger run on uvicorn in a thread of their own (the engine is not started:
the match's hands show as unavailable, which the screen says)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from api.app import create_app as create_gateway
from ledger.ops import Ledger, Seat, Winner, plain_dsn
from services.common.migrate import upgrade
from services.common.serve import uvicorn_options
from services.ledger.app import create_app as create_ledger
from tests.api.api_helpers import PASSWORD, make_user
from tests.api.platform_stack import COMPONENTS
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
)
from tests.conftest import make_settings
from tests.uvicorn_server import UvicornServer

pytestmark = [pytest.mark.browser]

MATCH = "brw-rec-match-1"


async def _books(url: str) -> None:
    ledger = await Ledger.connect(url)
    try:
        for player, ref in (("brw_a", "PSP-100"), ("brw_b", "PSP-101")):
            await ledger.open_wallet(player)
            await ledger.deposit(f"brw-dep-{player}", player, 5000, "USD", ref)
        seats = []
        for seat, player in enumerate(("brw_a", "brw_b")):
            await ledger.hold(f"brw-h-{seat}", player, f"brw-r-{seat}", 1000, "USD", "t1")
            seats.append(Seat(seat, player, f"brw-r-{seat}"))
        await ledger.start_match("brw-start", MATCH, "10", "dominicana", seats)
        await ledger.settle_match("brw-settle", MATCH, [Winner("brw_a", 1)], 1000)
    finally:
        await ledger.close()
    conn = await asyncpg.connect(plain_dsn(url))
    try:  # the planted discrepancy: the pot's commission booked 5 cents high
        await conn.execute(
            "UPDATE ledger.pots SET commission = commission + 5 WHERE match_id = $1", MATCH
        )
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def served(database_url: str, internal_secret: bytes) -> Iterator[str]:
    upgrade(database_url, COMPONENTS)
    asyncio.run(make_user(database_url, "brw_caja", "finance"))
    asyncio.run(_books(database_url))
    ready = threading.Event()
    stop: asyncio.Event | None = None
    loop = asyncio.new_event_loop()
    urls: list[str] = []

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        ledger = create_ledger(
            make_settings(database_url, internal_secret), seal_in_background=False
        )
        async with UvicornServer(ledger, **uvicorn_options()) as led:
            settings = make_settings(database_url, internal_secret, ledger_url=led.url)
            async with UvicornServer(
                create_gateway(settings), lifespan="on", log_config=None
            ) as gw:
                urls.append(gw.url)
                ready.set()
                await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    if not ready.wait(60):
        raise RuntimeError("the gateway did not start")
    try:
        yield urls[0]
    finally:
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join(30)


def _sign_in(page: Any, base: str) -> None:
    page.goto(base + "/#reconcile")
    page.fill("#login-form input[name=username]", "brw_caja")
    page.fill("#login-form input[name=password]", PASSWORD)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#rec-checks li")


def _press(page: Any, selector: str, touch: bool) -> None:
    locator = page.locator(selector).first
    locator.scroll_into_view_if_needed()
    if touch:
        locator.tap()
    else:
        locator.click()


def test_reconcile_screen_drills_down_and_imports_a_settlement(served: str, tmp_path: Path):
    need_chromium()
    from playwright.sync_api import sync_playwright

    today = dt.datetime.now(dt.UTC).date().isoformat()
    bad = tmp_path / "bad.csv"
    bad.write_text(
        f"reference,amount,currency,date\nPSP-100,50.00,USD,{today}\nPSP-101,5O.00,USD,x\n"
    )
    good = tmp_path / "psp.csv"
    good.write_text(
        f"reference,amount,currency,date\nPSP-100,50.00,USD,{today}\nPSP-777,1.00,USD,{today}\n"
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for context, touch in (
                (phone_context(browser), True),
                (desktop_context(browser), False),
            ):
                page = context.new_page()
                _sign_in(page, served)
                assert page.get_attribute("#rec-verdict", "data-ok") == "false"
                check = page.locator("[data-test=check-commission_rate]")
                assert check.get_attribute("data-ok") == "false"
                assert (
                    page.locator("[data-test=check-trial_balance]").get_attribute("data-ok")
                    == "true"
                )
                page.wait_for_selector("[data-test=commission-pots]")
                width = page.viewport_size["width"]
                shot(page, "reconcile", full_page=True)
                assert_fits(page, "reconcile")
                assert small_targets(page, "#screen-reconcile") == []
                assert axe_serious(page) == [], "reconcile"

                # the discrepancy's match, one tap away: its pot, stakes and entries
                _press(page, "[data-test=check-commission_rate] [data-test=ref-match]", touch)
                page.wait_for_selector("[data-test=match-title]")
                assert MATCH in page.inner_text("[data-test=match-title]")
                assert page.locator("#rec-drill .rec-entry").count() == 2
                assert page.locator("[data-test=match-hands] li.empty").count() == 1
                shot(page, "reconcile-match", full_page=True)
                assert_fits(page, "reconcile match")
                assert axe_serious(page) == [], "reconcile match"
                # the commission line's pots
                _press(page, "[data-test=commission-pots]", touch)
                page.wait_for_selector("[data-test=pot-match]")
                _press(page, "[data-test=pot-match]", touch)
                page.wait_for_selector("[data-test=match-title]")

                page.set_input_files("#rec-settle-form input[name=file]", str(bad))
                page.fill("#rec-settle-form input[name=reason]", f"daily file {width}")
                _press(page, "[data-test=settle-import]", touch)
                page.wait_for_selector("[data-test=settlement-errors] li")
                assert "3" in page.inner_text("[data-test=settlement-errors] li")
                page.set_input_files("#rec-settle-form input[name=file]", str(good))
                _press(page, "[data-test=settle-import]", touch)
                page.wait_for_selector("[data-test=settlement-summary]")
                shot(page, "reconcile-settlement", full_page=True)
                assert_fits(page, "reconcile settlement")
                assert small_targets(page, "#screen-reconcile") == []
                assert axe_serious(page) == [], "reconcile settlement"
                context.close()
        finally:
            browser.close()
