"""The finance screen's "Close the day" section in headless Chromium: one finance user sees
the draft and proposes on a phone, a second one approves on a desktop, and the closed day
offers its downloads. No horizontal overflow, touch targets of 44 px, axe-core clean;
screenshots in tests/artifacts/ (closing-*.png).

The platform runs in-process (tests/api/platform_stack.py) behind uvicorn, the ledger with a
clock one day ahead so that today is over and can be closed (tests/ledger/test_ledger_closing.py
says why); the deposit is real and really dated today.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integrity import store
from integrity.models import NewAlert
from services.common.db import create_engine
from services.common.migrate import upgrade
from tests.api.api_helpers import PASSWORD, make_user
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
    small_targets,
)
from tests.uvicorn_server import UvicornServer

pytestmark = [pytest.mark.browser]
READY_TIMEOUT_S = 60


def tomorrow() -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(days=1)


@pytest.fixture(scope="module")
def served(database_url: str, internal_secret: bytes, tmp_path_factory: Any) -> Iterator[str]:
    upgrade(database_url, COMPONENTS)
    for name, role in (("cl_fa", "finance"), ("cl_fb", "finance"), ("cl_pl", "player")):
        asyncio.run(make_user(database_url, name, role))
    asyncio.run(_plant_alerts(database_url))
    key_dir: Path = tmp_path_factory.mktemp("keys")
    ready = threading.Event()
    stop: dict[str, Any] = {}
    url: dict[str, str] = {}

    async def serve() -> None:
        stop["event"] = asyncio.Event()
        async with platform(database_url, internal_secret, key_dir, ledger_clock=tomorrow) as p:
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


async def _plant_alerts(database_url: str) -> None:
    """Two integrity alerts raised today: the draft and the report list them."""
    engine = create_engine(database_url)
    try:
        await store.raise_alerts(
            engine,
            [
                NewAlert(
                    kind="pair_flow",
                    player=player,
                    dedup_key=f"cl:{player}",
                    score=2.5,
                    figures={},
                    counterpart="cl_pl",
                )
                for player in ("cl_alert_a", "cl_alert_b")
            ],
        )
    finally:
        await engine.dispose()


def _sign_in(page: Any, base: str, name: str) -> None:
    page.goto(base + "/#finance")
    page.fill("#login-form input[name=username]", name)
    page.fill("#login-form input[name=password]", PASSWORD)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#fin-close [data-test=close-show]", timeout=30_000)


def _check(page: Any, what: str) -> None:
    assert_fits(page, what)
    assert small_targets(page, "#fin-close") == [], what
    assert axe_serious(page) == [], what


def test_close_the_day_on_a_phone_and_approve_on_a_desktop(served: str) -> None:
    need_chromium()
    from playwright.sync_api import sync_playwright

    today = dt.datetime.now(dt.UTC).date().isoformat()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            phone = phone_context(browser).new_page()
            _sign_in(phone, served, "cl_fa")
            made = phone.evaluate(
                """async () => {
                    const csrf = decodeURIComponent(document.cookie.match(/mesa_csrf=([^;]+)/)[1]);
                    const r = await fetch('/api/finance/deposits', {method: 'POST',
                      headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf},
                      body: JSON.stringify({player: 'cl_pl', amount: 25050, reference: 'desk'})});
                    return r.status; }"""
            )
            assert made == 200
            phone.reload()
            phone.wait_for_selector("#fin-close [data-test=close-show]")
            assert phone.input_value("#close-day") == today
            phone.tap("[data-test=close-show]")
            try:
                phone.wait_for_selector("#close-draft [data-test=close-report]", timeout=10_000)
            except Exception:
                raise AssertionError(phone.inner_text("#fin-close")) from None
            assert phone.get_attribute("[data-test=close-recon]", "data-ok") == "true"
            assert "250.50" in phone.inner_text("#close-draft")
            alerts = phone.inner_text("#close-draft [data-test=close-alerts]")
            assert "cl_alert_a" in alerts and "cl_alert_b" in alerts and "2.5000" in alerts
            phone.locator("[data-test=close-alerts]").scroll_into_view_if_needed()
            _check(phone, "close (phone, draft with alerts)")
            shot(phone, "closing-draft", full_page=True)
            phone.fill("#close-reason", "end of day")
            phone.tap("[data-test=close-propose]")
            phone.wait_for_selector("[data-test=close-pending]")
            # the proposer's own approve button is disabled: four eyes
            assert phone.is_disabled("[data-test=close-approve]")
            phone.locator("#fin-close").scroll_into_view_if_needed()
            _check(phone, "close (phone, proposed)")
            shot(phone, "closing-proposed", full_page=True)

            desk = desktop_context(browser).new_page()
            _sign_in(desk, served, "cl_fb")
            desk.wait_for_selector("[data-test=close-pending]")
            assert desk.is_enabled("[data-test=close-approve]")
            desk.fill("#close-reason", "cash counted")
            desk.click("[data-test=close-approve]")
            desk.wait_for_selector(f"a[href='/api/finance/closes/{today}/report?format=xlsx']")
            assert desk.query_selector("[data-test=close-pending]") is None
            # the next day is not over yet; the closed day's report is still there to see
            assert desk.input_value("#close-day") != today
            desk.fill("#close-day", today)
            desk.click("[data-test=close-show]")
            desk.wait_for_selector("#close-draft [data-test=close-report]")
            _check(desk, "close (desktop, closed)")
            desk.locator("#fin-close").scroll_into_view_if_needed()
            shot(desk, "closing-closed", full_page=True)
            phone.reload()
            phone.wait_for_selector(f"a[href='/api/finance/closes/{today}/report?format=csv']")
            _check(phone, "close (phone, closed)")
            shot(phone, "closing-closed", full_page=True)
            printable = desk.request.get(f"{served}/api/finance/closes/{today}/report?format=html")
            assert printable.status == 200 and "250.50" in printable.text()
        finally:
            browser.close()
