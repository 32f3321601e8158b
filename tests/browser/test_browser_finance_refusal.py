"""The finance screen's cashier, refused at a player's deposit limit, in headless Chromium on
a phone (390x844) and a desktop: the refusal is the page's own sentence in Spanish and in
English with the allowance left written by `money()` (from the answer's `refs`), never the
server's English detail. No horizontal overflow, axe-core clean; screenshots in
tests/artifacts/ (finance-deposit-limit-*.png).

The platform runs in-process (tests/api/platform_stack.py) behind uvicorn: the limit, the
deposit that uses part of it and the refusal are real.
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
from tests.api.platform_stack import COMPONENTS, platform
from tests.browser.browser_helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    assert_fits,
    axe_serious,
    desktop_context,
    need_chromium,
    phone_context,
    shot,
)
from tests.uvicorn_server import UvicornServer

pytestmark = [pytest.mark.browser]
READY_TIMEOUT_S = 60
PLAYER, CASHIER = "fr_ana", "fr_caja"
# a daily limit of $50.00, $12.34 of it deposited: $37.66 may still be deposited
LIMIT_CENTS, DEPOSITED_CENTS = 5000, 1234


@pytest.fixture(scope="module")
def served(database_url: str, internal_secret: bytes, tmp_path_factory: Any) -> Iterator[str]:
    upgrade(database_url, COMPONENTS)
    asyncio.run(make_user(database_url, PLAYER))
    asyncio.run(make_user(database_url, CASHIER, "finance"))
    key_dir: Path = tmp_path_factory.mktemp("keys")
    ready = threading.Event()
    stop: dict[str, Any] = {}
    url: dict[str, str] = {}

    async def serve() -> None:
        stop["event"] = asyncio.Event()
        async with platform(database_url, internal_secret, key_dir) as p:
            async with p.client() as me, p.client() as fin:
                await sign_in(me, PLAYER)
                r = await me.post("/api/me/limits", json={"limits": {"deposit_day": LIMIT_CENTS}})
                assert r.status_code == 200, r.text
                await sign_in(fin, CASHIER)
                r = await fin.post(
                    "/api/finance/deposits",
                    json={"player": PLAYER, "amount": DEPOSITED_CENTS, "reference": "desk"},
                )
                assert r.status_code == 200, r.text
            async with UvicornServer(p.gateway, lifespan="off", log_level="warning") as server:
                url["base"] = server.url
                ready.set()
                await stop["event"].wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    if not ready.wait(READY_TIMEOUT_S):
        raise RuntimeError("the platform did not start")
    try:
        yield url["base"]
    finally:
        loop.call_soon_threadsafe(stop["event"].set)
        thread.join(30)


def _money(page: Any, cents: int) -> str:
    """The amount as the page's `money()` writes it in the page's language now."""
    text: str = page.evaluate("async (cents) => (await import('/js/i18n.js')).money(cents)", cents)
    return text


def _refused(page: Any) -> str:
    page.fill("#cashier-form input[name=player]", PLAYER)
    page.fill("#cashier-form input[name=amount]", "40")
    page.fill("#cashier-form input[name=reference]", "ventanilla 2")
    page.evaluate("() => { document.getElementById('cashier-result').textContent = ''; }")
    page.click("#cashier-form button[value=deposit]")
    page.wait_for_function("() => document.getElementById('cashier-result').textContent !== ''")
    text: str = page.inner_text("#cashier-result")
    return text


@pytest.mark.parametrize("device", ["phone", "desktop"])
def test_a_deposit_past_the_limit_is_refused_in_the_readers_words(served: str, device: str) -> None:
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = phone_context(browser) if device == "phone" else desktop_context(browser)
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(served + "/#finance")
            page.fill("#login-form input[name=username]", CASHIER)
            page.fill("#login-form input[name=password]", PASSWORD)
            page.click("#login-form button[type=submit]")
            page.wait_for_selector("#cashier-form", state="visible", timeout=30_000)

            left = LIMIT_CENTS - DEPOSITED_CENTS
            spanish = _refused(page)
            assert spanish == (
                "✘ El depósito supera el límite diario de depósitos del jugador: "
                f"aún puede depositar {_money(page, left)}."
            ), spanish
            assert "37" in spanish and "cents" not in spanish
            assert page.get_attribute("#cashier-result", "class") == "error-text"
            page.locator("#cashier-result").scroll_into_view_if_needed()
            assert_fits(page, "cashier refusal")
            assert axe_serious(page) == []
            shot(page, "finance-deposit-limit-es")

            page.click("[data-test=lang]")
            english = _refused(page)
            assert english == (
                "✘ The deposit is beyond the player's daily deposit limit: "
                f"{_money(page, left)} may still be deposited."
            ), english
            assert "$37.66" in english
            assert_fits(page, "cashier refusal (English)")
            assert axe_serious(page) == []
            shot(page, "finance-deposit-limit-en")
            context.close()
            assert not errors, errors
        finally:
            browser.close()
