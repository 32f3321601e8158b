"""The real platform (`mesa up`) driven through headless Debian Chromium with Playwright.

Four players sign in, sit at a $10 apuesta parejas table, play a whole match by clicking
their tiles, the winners' balances rise by the pot less 10%, an auditor verifies one of the
match's hands in the browser (WebCrypto), and the finance screen shows the commission.
Screenshots go to tests/artifacts/ (git-ignored). A missing /usr/bin/chromium is a failure.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.config import load_settings
from services.common.demo import DEMO_PASSWORD, DEMO_PLAYERS, create_demo_players
from tests.conftest import platform_port_env

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

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
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
READY_TIMEOUT_S = 180
MATCH_TIMEOUT_S = 600
STAKE = 1000
START = 10_000


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    var_dir = tmp_path_factory.mktemp("var")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESA_")}
    env.update(platform_port_env())
    env.update(
        MESA_VAR_DIR=str(var_dir),
        MESA_LOG_LEVEL="warning",
    )
    log = open(var_dir / "up.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        lines: list[str] = []
        deadline = time.monotonic() + READY_TIMEOUT_S
        if proc.stdout is None:
            raise RuntimeError("no stdout")
        for line in proc.stdout:
            lines.append(line.rstrip())
            if "ready; Ctrl-C stops everything" in line:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("mesa up is not ready in time")
        else:
            raise RuntimeError(f"mesa up exited before ready: {lines}")
        settings = load_settings({k: v for k, v in env.items() if k.startswith("MESA_")})
        asyncio.run(create_demo_players(settings, out=None))
        yield f"http://127.0.0.1:{env['MESA_GATEWAY_PORT']}", env
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _sign_in(page: Any, base: str, name: str) -> None:
    page.goto(base + "/")
    page.fill("#login-form input[name=username]", name)
    page.fill("#login-form input[name=password]", DEMO_PASSWORD)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("[data-test=who]")


def _balance(page: Any) -> int:
    response = page.request.get(page.url.split("#")[0] + "api/me/wallet")
    if response.status != 200:
        raise RuntimeError(f"wallet: {response.status}")
    balance: int = response.json()["balance"]
    return balance


def test_browser_four_players_paid_match_audit_and_finance(platform: tuple[str, dict[str, str]]):
    if not CHROMIUM.exists():
        pytest.fail("/usr/bin/chromium is missing: install Debian's chromium (CI does)")
    from playwright.sync_api import sync_playwright

    base, _ = platform
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            pages: dict[str, Any] = {}
            errors: list[str] = []
            for name in DEMO_PLAYERS:
                context = browser.new_context(viewport={"width": 1200, "height": 900})
                page = context.new_page()
                page.on("pageerror", lambda exc, n=name: errors.append(f"{n}: {exc}"))
                _sign_in(page, base, name)
                page.wait_for_selector(
                    "#kind-select option[value=apuesta-parejas]", state="attached"
                )
                pages[name] = page
            before = {name: _balance(p) for name, p in pages.items()}
            assert before == dict.fromkeys(DEMO_PLAYERS, START)
            for page in pages.values():
                page.select_option("#kind-select", "apuesta-parejas")
                page.select_option("#tier-select", "10")
                page.click("[data-test=quick-join]")
            for page in pages.values():
                page.wait_for_selector("#screen-table:not([hidden])", timeout=30_000)

            # Play: click a highlighted (legal) tile whenever one is offered; pick an end
            # when the page asks; seeds are committed and revealed by the page itself.
            deadline = time.monotonic() + MATCH_TIMEOUT_S
            shot = False
            while time.monotonic() < deadline:
                over = 0
                for page in pages.values():
                    if page.is_visible("[data-test=match-over]"):
                        over += 1
                        continue
                    if page.is_visible("#end-choice:not([hidden]) #end-left"):
                        page.click("#end-left")
                        continue
                    legal = page.query_selector("#hand .tile.legal")
                    if legal is not None:
                        if not shot and len(page.query_selector_all("#board .chain-tile")) >= 8:
                            page.screenshot(path=str(ARTIFACTS / "table.png"), full_page=True)
                            shot = True
                        try:
                            legal.click(timeout=2000)
                        except Exception:  # the view changed under the click: try again
                            continue
                if over == len(pages):
                    break
                time.sleep(0.15)
            else:
                raise AssertionError("the match did not end in time")
            any_page = next(iter(pages.values()))
            any_page.screenshot(path=str(ARTIFACTS / "table-over.png"), full_page=True)
            if not shot:
                any_page.screenshot(path=str(ARTIFACTS / "table.png"), full_page=True)
            assert not errors, errors

            # Money: the pot (4 x $10) less 10% goes to the winning pair, $18 each.
            after: dict[str, int] = {}
            for _ in range(100):
                after = {name: _balance(p) for name, p in pages.items()}
                if sum(after.values()) == 4 * START - 4 * STAKE // 10:
                    break
                time.sleep(0.2)
            winners = [n for n in DEMO_PLAYERS if after[n] > START - STAKE]
            assert len(winners) == 2, after
            pot = 4 * STAKE
            share = (pot - pot // 10) // 2
            for name in DEMO_PLAYERS:
                expected = START - STAKE + (share if name in winners else 0)
                assert after[name] == expected, (name, after)

            # The auditor verifies one of the match's hands in the browser.
            auditor = browser.new_context().new_page()
            _sign_in(auditor, base, "auditor")
            auditor.wait_for_selector("[data-test=audit-verify-hand]", timeout=30_000)
            auditor.click("[data-test=audit-verify-hand]")
            result = auditor.wait_for_selector("[data-test=verify-result]", timeout=60_000)
            checks = auditor.eval_on_selector_all(
                "#audit-verify-panel .checks li",
                "els => els.map(e => e.className + ' ' + e.textContent)",
            )
            assert result.get_attribute("data-ok") == "true", checks
            assert len(checks) == 7
            auditor.screenshot(path=str(ARTIFACTS / "audit.png"), full_page=True)

            # Finance: commission by day and tier (inline SVG), trial balance, chain check.
            finance = browser.new_context(viewport={"width": 1200, "height": 1400}).new_page()
            _sign_in(finance, base, "finance")
            finance.wait_for_selector("#fin-chart-tier svg .bar", timeout=30_000)
            assert "balanced: true" in finance.inner_text("[data-test=tb-balanced]")
            finance.click("#fin-chain")
            finance.wait_for_selector("#fin-chain-result[data-ok]")
            finance.screenshot(path=str(ARTIFACTS / "finance.png"), full_page=True)
        finally:
            browser.close()


def test_browser_partner_invitation_declined_then_accepted(platform: tuple[str, dict[str, str]]):
    """ana names cris as her partner: cris's lobby shows the invitation with Accept and
    Decline (ana's with Cancel); nothing is held from cris until he clicks Accept."""
    if not CHROMIUM.exists():
        pytest.fail("/usr/bin/chromium is missing: install Debian's chromium (CI does)")
    from playwright.sync_api import sync_playwright

    base, _ = platform
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            errors: list[str] = []
            pages: dict[str, Any] = {}
            for name in ("ana", "cris"):
                page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
                page.on("pageerror", lambda exc, n=name: errors.append(f"{n}: {exc}"))
                _sign_in(page, base, name)
                page.wait_for_selector("#kind-select option[value=casa-parejas]", state="attached")
                pages[name] = page
            ana, cris = pages["ana"], pages["cris"]
            before = {name: _balance(p) for name, p in pages.items()}

            def invite() -> None:
                ana.select_option("#kind-select", "casa-parejas")
                ana.select_option("#tier-select", "10")
                ana.fill("#join-form input[name=partner]", "cris")
                ana.click("[data-test=quick-join]")
                ana.wait_for_selector("#invites-out [data-test=invite-cancel]", timeout=15_000)
                cris.wait_for_selector("#invites-in [data-test=invite-accept]", timeout=15_000)

            invite()
            assert "ana" in cris.inner_text("#invites-in")
            assert _balance(cris) == before["cris"]
            cris.click("#invites-in [data-test=invite-decline]")
            cris.wait_for_selector("#invites-in [data-test=invite-accept]", state="detached")
            ana.wait_for_selector("#invites-out [data-test=invite-cancel]", state="detached")
            assert {name: _balance(p) for name, p in pages.items()} == before

            invite()
            cris.click("#invites-in [data-test=invite-accept]")
            for page in (cris, ana):
                page.wait_for_selector("#my-tables li:has-text('casa-parejas')", timeout=15_000)
            after = {name: _balance(p) for name, p in pages.items()}
            assert after == {name: b - STAKE for name, b in before.items()}, (before, after)
            assert not errors, errors
        finally:
            browser.close()
