"""The real platform (`mesa up`) driven through headless Debian Chromium with Playwright.

Four players sign in, two on phones (390x844, touch) and two on desktops (1280x800), sit at
a $10 apuesta parejas table and play a whole match by tapping and clicking their tiles. On
every pass of the loop no page reaches past the viewport and the hand's box never moves (no
layout shift while events arrive). The winners' balances rise by the pot less 10% and each
player's summary says so; the wallet names the match on every line; an auditor verifies a
hand in the browser (WebCrypto), and the finance screen shows its verdict first. axe-core
finds no serious or critical violation on the lobby, table, wallet, history, audit and
finance screens. A CPU match is played by tapping on a phone, and another by keyboard alone.
Screenshots of every screen go to tests/artifacts/ (git-ignored).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from launcher.demo import DEMO_PASSWORD, DEMO_PLAYERS, create_demo_players
from services.common.config import load_settings
from tests.browser.browser_helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    assert_fits,
    axe_serious,
    desktop_context,
    need_chromium,
    overflow_px,
    phone_context,
    shot,
    small_targets,
)
from tests.conftest import platform_port_env

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

READY_TIMEOUT_S = 180
MATCH_TIMEOUT_S = 600
STAKE = 1000
START = 10_000
HAND_BOX_JS = """() => { const r = document.getElementById('hand').getBoundingClientRect();
  return [r.top, r.left, r.width, r.height].map(v => Math.round(v * 10) / 10); }"""


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
    page.wait_for_selector("#nav button")


def _balance(page: Any) -> int:
    response = page.request.get(page.url.split("#")[0] + "api/me/wallet")
    if response.status != 200:
        raise RuntimeError(f"wallet: {response.status}")
    balance: int = response.json()["balance"]
    return balance


class Player:
    """One browser page and how it presses things: a tap on a phone, a click elsewhere."""

    def __init__(self, name: str, page: Any, touch: bool):
        self.name, self.page, self.touch = name, page, touch
        self.hand_box: list[float] | None = None
        self.shots: set[str] = set()

    def press(self, selector: str) -> None:
        locator = self.page.locator(selector).first
        if self.touch:
            locator.tap(timeout=2000)
        else:
            locator.click(timeout=2000)

    def shot_once(self, name: str) -> None:
        if name not in self.shots:
            self.shots.add(name)
            shot(self.page, name)


def _choose(player: Player, kind: str, tier: str) -> None:
    page = player.page
    page.wait_for_selector(f"[data-kind={kind}]")
    player.press(f"[data-kind={kind}]")
    page.select_option("#tier-select", tier)


def _step(player: Player, checks: bool = True) -> bool:
    """One look at a player's table: act if the page offers something. True when over."""
    page = player.page
    if checks:
        assert overflow_px(page) <= 0, f"{player.name}: the table overflows"
        box = page.evaluate(HAND_BOX_JS)
        if player.hand_box is None:
            player.hand_box = box
        assert box == player.hand_box, f"{player.name}: the hand moved {player.hand_box} -> {box}"
    if page.is_visible("[data-test=match-over]"):
        return True
    try:
        if page.is_visible("[data-test=hand-continue]"):
            player.shot_once("table-hand-summary")
            player.press("[data-test=hand-continue]")
        elif page.is_visible("#end-choice:not([hidden]) #end-left"):
            player.shot_once("table-end-choice")
            player.press("#end-left")
        elif page.query_selector("#hand .tile.legal") is not None:
            if len(page.query_selector_all("#board .chain-tile")) >= 8:
                player.shot_once("table")
            player.press("#hand .tile.legal")
    except Exception:  # the view changed under the press: look again
        pass
    return False


def test_browser_four_players_paid_match_audit_and_finance(platform: tuple[str, dict[str, str]]):
    need_chromium()
    from playwright.sync_api import sync_playwright

    base, _ = platform
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            players: dict[str, Player] = {}
            errors: list[str] = []
            for i, name in enumerate(DEMO_PLAYERS):
                phone = i < 2
                context = phone_context(browser) if phone else desktop_context(browser)
                page = context.new_page()
                page.on("pageerror", lambda exc, n=name: errors.append(f"{n}: {exc}"))
                _sign_in(page, base, name)
                page.wait_for_selector("[data-kind=apuesta-parejas]")
                players[name] = Player(name, page, touch=phone)
            ana, cris = players["ana"], players["cris"]
            ana.shot_once("lobby")
            cris.shot_once("lobby")
            assert small_targets(ana.page, "#screen-lobby") == []
            assert small_targets(ana.page, "header") == []
            assert axe_serious(ana.page) == [], "lobby"
            before = {name: _balance(p.page) for name, p in players.items()}
            assert before == dict.fromkeys(DEMO_PLAYERS, START)
            for player in players.values():
                _choose(player, "apuesta-parejas", "10")
                player.press("[data-test=quick-join]")
            for player in players.values():
                player.page.wait_for_selector("#screen-table:not([hidden])", timeout=30_000)
                player.page.wait_for_selector("#hand .tile", timeout=30_000)
            # The page commits and reveals the seed by itself; the shield shows it.
            ana.press("[data-test=shield]")
            ana.page.wait_for_selector("#fairness:not([hidden])")
            ana.page.wait_for_function(
                "() => document.getElementById('deal-commitment').textContent !== '—'"
            )
            ana.shot_once("table-shield")
            assert small_targets(ana.page, "#screen-table") == []
            ana.press("#fairness [data-close=fairness]")

            deadline = time.monotonic() + MATCH_TIMEOUT_S
            axed: set[str] = set()
            while time.monotonic() < deadline:
                over = 0
                for player in players.values():
                    over += _step(player)
                    board = len(player.page.query_selector_all("#board .chain-tile"))
                    if board >= 6 and player.touch not in axed:
                        axed.add(player.touch)
                        assert axe_serious(player.page) == [], f"table ({player.name})"
                    if player.page.is_visible("[data-test=seat] .s-timer:not(:empty)"):
                        player.shot_once("table-timer")
                if over == len(players):
                    break
                time.sleep(0.1)
            else:
                raise AssertionError("the match did not end in time")
            assert not errors, errors

            # Every player's page checked each hand by itself: its own seed and receipt
            # against the public transcript (api/static/js/guard.js), never an alarm.
            for name, player in players.items():
                page = player.page
                mark = page.wait_for_selector("#fair-mark[data-test]", state="attached")
                assert mark.get_attribute("data-test") == "fair-ok", (name, mark.text_content())
                # the last hand's check may still be running (it fetches the transcript)
                try:
                    page.wait_for_function(
                        "() => Object.keys(localStorage).filter(k => k.startsWith('mesa-own-'))"
                        ".every(k => JSON.parse(localStorage.getItem(k)).checked)",
                        timeout=30_000,
                    )
                except Exception:
                    pass  # reported below with what each hand holds
                checked = page.evaluate(
                    "() => Object.keys(localStorage).filter(k => k.startsWith('mesa-own-'))"
                    ".map(k => JSON.parse(localStorage.getItem(k)))"
                    ".map(o => o.checked + ' ' + (o.problems || []).join('; ') + ' | ' + o.deal_id"
                    " + ' ' + (o.receipt ? 'receipt' : 'no-receipt ' + (o.receipt_error || '')))"
                )
                toasts = page.locator("#toasts .toast").all_inner_texts()
                assert all(c.startswith("ok") for c in checked) and checked, (name, checked, toasts)

            # Money: the pot (4 x $10) less 10% goes to the winning pair, $18 each.
            after: dict[str, int] = {}
            for _ in range(100):
                after = {name: _balance(p.page) for name, p in players.items()}
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
            # Each player's summary: the result once, the pot and his own win or loss.
            for name, player in players.items():
                page = player.page
                page.wait_for_selector("[data-test=my-net]", timeout=20_000)
                assert page.locator("[data-test=match-result]").count() == 1
                assert page.get_attribute("[data-test=pot]", "data-cents") == str(pot)
                net = int(page.get_attribute("[data-test=my-net]", "data-cents") or "0")
                assert net == after[name] - START, (name, net)
                # the loser sees the commission too (the ledger's figure, not a guess)
                page.wait_for_selector("[data-test=commission]", timeout=20_000)
                commission = page.get_attribute("[data-test=commission]", "data-cents")
                assert commission == str(pot // 10), name
                player.shot_once("table-over")
            assert axe_serious(ana.page) == [], "match over"
            assert_fits(ana.page, "table (match over)")

            # Wallet and history, as a bank statement: every match line names its match.
            for player in (ana, cris):
                page = player.page
                page.set_viewport_size(
                    {"width": 390, "height": 844}
                    if player.touch
                    else {"width": 1280, "height": 800}
                )
                player.press("[data-test=over-lobby]")
                page.wait_for_selector("#screen-lobby:not([hidden])")
                player.press("[data-test=nav-wallet]")
                page.wait_for_selector("#statement tr[data-kind]")
                rows = page.eval_on_selector_all(
                    "#statement tr[data-kind]",
                    "rs => rs.map(r => [r.dataset.kind, r.cells[1].innerText])",
                )
                for kind, text in rows:
                    if kind not in ("deposit", "withdrawal"):
                        assert "Partida" in text, rows
                # each line of the match names its game, the loser's stake line too
                stake_lines = [text for kind, text in rows if kind == "hold"]
                assert stake_lines and all("Apuesta parejas" in x for x in stake_lines), rows
                player.shot_once("wallet")
                assert axe_serious(page) == [], "wallet"
                assert_fits(page, "wallet")
                player.press("[data-test=nav-history]")
                page.wait_for_selector("[data-test=verify-hand]")
                player.shot_once("history")
                assert axe_serious(page) == [], "history"
                assert_fits(page, "history")
                player.press("[data-test=nav-lobby]")
                page.wait_for_selector("[data-kind=apuesta-parejas]")
                assert_fits(page, "lobby")

            # The auditor verifies one of the match's hands in the browser.
            auditor = desktop_context(browser).new_page()
            _sign_in(auditor, base, "auditor")
            auditor.wait_for_selector("[data-test=audit-verify-hand]", timeout=30_000)
            auditor.click("[data-test=audit-verify-hand]")
            result = auditor.wait_for_selector("[data-test=verify-result]", timeout=60_000)
            checks = auditor.eval_on_selector_all(
                "#audit-verify-panel .checks li",
                "els => els.map(e => e.className + ' ' + e.textContent)",
            )
            assert result.get_attribute("data-ok") == "true", checks
            assert len(checks) == 9
            # The log only grew: its latest checkpoint note against those this browser saw
            # (the page's pinned witness quorum is 0 here: this platform has no witnesses),
            # then the proof between two signed sizes given in the two inputs.
            assert auditor.request.get(base + "/log/witnesses").json() == {"witnesses": []}
            auditor.click("#cons-check")
            auditor.wait_for_selector("#cons-result[data-ok=true]", timeout=30_000)
            history = auditor.request.get(base + "/log/checkpoints").json()["checkpoints"]
            sizes = [c["tree_size"] for c in history if c["tree_size"] > 0]
            assert sizes, history
            auditor.fill("#cons-first", str(sizes[0]))
            auditor.fill("#cons-second", str(sizes[-1]))
            auditor.click("#cons-check")
            auditor.wait_for_function(
                "() => document.getElementById('cons-result').textContent.includes('→')",
                timeout=30_000,
            )
            verdict = auditor.text_content("#cons-result")
            assert auditor.get_attribute("#cons-result", "data-ok") == "true", verdict
            shot(auditor, "audit", full_page=True)
            auditor.set_viewport_size({"width": 390, "height": 844})
            shot(auditor, "audit", full_page=True)
            assert axe_serious(auditor) == [], "audit"
            assert_fits(auditor, "audit")

            # Finance: the verdict first, commission by day and tier (inline SVG), the chain.
            finance = phone_context(browser).new_page()
            _sign_in(finance, base, "finance")
            finance.wait_for_selector("#fin-chart-tier svg .bar", timeout=30_000)
            assert finance.get_attribute("[data-test=tb-balanced]", "data-ok") == "true"
            finance.tap("#fin-chain")
            finance.wait_for_selector("#fin-chain-result[data-ok=true]")
            shot(finance, "finance", full_page=True)
            finance.set_viewport_size({"width": 1280, "height": 800})
            shot(finance, "finance", full_page=True)
            finance.set_viewport_size({"width": 390, "height": 844})
            assert axe_serious(finance) == [], "finance"
            assert_fits(finance, "finance")
        finally:
            browser.close()


def test_browser_partner_invitation_declined_then_accepted(platform: tuple[str, dict[str, str]]):
    """ana names cris as her partner: cris's lobby shows the invitation with Accept and
    Decline (ana's with Cancel); nothing is held from cris until he clicks Accept."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    base, _ = platform
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            errors: list[str] = []
            pages: dict[str, Any] = {}
            for name in ("ana", "cris"):
                page = desktop_context(browser).new_page()
                page.on("pageerror", lambda exc, n=name: errors.append(f"{n}: {exc}"))
                _sign_in(page, base, name)
                page.wait_for_selector("[data-kind=casa-parejas]")
                pages[name] = page
            ana, cris = pages["ana"], pages["cris"]
            before = {name: _balance(p) for name, p in pages.items()}

            def invite() -> None:
                ana.click("[data-kind=casa-parejas]")
                ana.select_option("#tier-select", "10")
                ana.fill("#join-form input[name=partner]", "cris")
                ana.click("[data-test=quick-join]")
                ana.wait_for_selector("#invites-out [data-test=invite-cancel]", timeout=15_000)
                cris.wait_for_selector("#invites-in [data-test=invite-accept]", timeout=15_000)

            invite()
            assert "ana" in cris.inner_text("#invites-in")
            shot(cris, "lobby-invitation")
            assert _balance(cris) == before["cris"]
            cris.click("#invites-in [data-test=invite-decline]")
            cris.wait_for_selector("#invites-in [data-test=invite-accept]", state="detached")
            ana.wait_for_selector("#invites-out [data-test=invite-cancel]", state="detached")
            assert {name: _balance(p) for name, p in pages.items()} == before

            invite()
            cris.click("#invites-in [data-test=invite-accept]")
            for page in (cris, ana):
                page.wait_for_selector("#my-tables li[data-kind=casa-parejas]", timeout=15_000)
            after = {name: _balance(p) for name, p in pages.items()}
            assert after == {name: b - STAKE for name, b in before.items()}, (before, after)
            # The last game and stake are remembered on the next visit.
            ana.goto(base + "/#lobby")
            ana.wait_for_selector("[data-kind=casa-parejas][aria-pressed=true]")
            assert ana.input_value("#tier-select") == "10"
            assert not errors, errors
        finally:
            browser.close()


def _keyboard_step(page: Any) -> bool:
    """Play by keyboard only: Tab into the hand, arrows to a legal tile, Enter."""
    if page.is_visible("[data-test=match-over]"):
        return True
    if page.is_visible("[data-test=hand-continue]"):
        if page.evaluate("() => document.activeElement?.dataset?.test") == "hand-continue":
            page.keyboard.press("Enter")
        else:
            page.keyboard.press("Tab")
        return False
    if page.is_visible("#end-choice:not([hidden]) #end-left"):
        page.keyboard.press("Enter")  # the first end has the focus when the choice opens
        return False
    if page.query_selector("#hand .tile.legal") is None:
        return False
    for _ in range(40):
        where = page.evaluate(
            "() => { const a = document.activeElement;"
            " return a && a.closest('#hand') ? (a.classList.contains('legal') ? 'legal' : 'tile') : 'out'; }"
        )
        if where == "legal":
            page.keyboard.press("Enter")
            return False
        page.keyboard.press("ArrowRight" if where == "tile" else "Tab")
    return False


@pytest.mark.parametrize("how", ["phone-tap", "desktop-keyboard"])
def test_browser_cpu_match_played_to_the_end(platform: tuple[str, dict[str, str]], how: str):
    """A free apuesta parejas match against three CPUs, played to its end by tapping on a
    phone, or with the keyboard alone on a desktop."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    base, _ = platform
    name = "beto" if how == "phone-tap" else "dani"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            errors: list[str] = []
            phone = how == "phone-tap"
            page = (phone_context(browser) if phone else desktop_context(browser)).new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            _sign_in(page, base, name)
            player = Player(name, page, touch=phone)
            if not phone:
                # In English: every string switches, none is left in Spanish.
                page.wait_for_selector("[data-kind=apuesta-parejas]")
                page.click("[data-test=lang]")
                page.wait_for_selector("html[lang=en]")
                assert "Choose a game" in page.inner_text("#screen-lobby")
            _choose(player, "apuesta-parejas", "free")
            player.press("[data-test=cpu]")
            page.wait_for_selector("#hand .tile", timeout=30_000)
            # A dropped connection shows a banner and resyncs without losing the turn.
            page.context.set_offline(True)
            page.evaluate("() => window.dispatchEvent(new Event('offline'))")
            page.wait_for_selector("#reconnect:not([hidden])", timeout=15_000)
            shot(page, "table-reconnecting")
            page.context.set_offline(False)
            page.wait_for_selector("#reconnect", state="hidden", timeout=30_000)
            if phone:
                # Landscape too: nothing past the edge, the hand still there and large.
                page.set_viewport_size({"width": 844, "height": 390})
                page.wait_for_timeout(100)
                assert overflow_px(page) <= 0, "the table overflows in landscape"
                box = page.locator("#hand").bounding_box()
                assert box["y"] + box["height"] <= 390 and box["height"] >= 80, box
                shot(page, "table-landscape")
                page.set_viewport_size({"width": 390, "height": 844})
                page.wait_for_timeout(100)
            deadline = time.monotonic() + MATCH_TIMEOUT_S
            while time.monotonic() < deadline:
                done = _step(player) if phone else _keyboard_step(page)
                if done:
                    break
                time.sleep(0.1)
            else:
                raise AssertionError("the CPU match did not end in time")
            shot(page, f"cpu-over-{how}")
            assert page.locator("[data-test=match-result]").count() == 1
            if not phone:
                text = page.inner_text("#screen-table")
                assert "Match over" in text and "Nosotros" not in text, text
            # Opened again (a reload), the table shows where the match stands, once: no
            # summaries or announcements of hands long over.
            page.reload()
            page.wait_for_selector("[data-test=match-over]", timeout=30_000)
            assert page.locator("[data-test=match-result]").count() == 1
            assert page.is_hidden("[data-test=hand-summary]")
            assert page.locator("#toasts .toast").count() == 0
            # "Play again": a new CPU table of the same game at once.
            first = page.evaluate("() => location.hash")
            player.press("[data-test=play-again]")
            page.wait_for_function(
                "(h) => location.hash !== h && location.hash.startsWith('#table/')", arg=first
            )
            page.wait_for_selector("#hand .tile", timeout=30_000)
            assert not errors, errors
        finally:
            browser.close()


def test_browser_drag_a_tile_to_the_board_on_a_phone(platform: tuple[str, dict[str, str]]):
    """On a 390x844 touch screen a legal tile dragged onto the board is played (pointer
    events, the same path a finger takes)."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    base, _ = platform
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            errors: list[str] = []
            page = phone_context(browser).new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            _sign_in(page, base, "cris")
            player = Player("cris", page, touch=True)
            _choose(player, "apuesta-parejas", "free")
            player.press("[data-test=cpu]")
            page.wait_for_selector("#hand .tile.legal", timeout=120_000)  # the player's turn
            tile = page.locator("#hand .tile.legal").first
            name = tile.get_attribute("data-tile")
            in_hand = page.locator("#hand .tile").count()
            on_board = page.locator("#board .chain-tile").count()
            t, b = tile.bounding_box(), page.locator("#board").bounding_box()
            assert t is not None and b is not None
            page.mouse.move(t["x"] + t["width"] / 2, t["y"] + t["height"] / 2)
            page.mouse.down()
            page.mouse.move(b["x"] + b["width"] / 2, b["y"] + b["height"] / 2, steps=12)
            page.mouse.up()
            page.wait_for_function(
                "([t, n]) => !document.querySelector(`#hand [data-tile='${t}']`)"
                " && document.querySelectorAll('#hand .tile').length === n - 1",
                arg=[name, in_hand],
                timeout=15_000,
            )
            assert page.locator("#board .chain-tile").count() > on_board
            assert overflow_px(page) <= 0
            shot(page, "table-dragged")
            assert not errors, errors
        finally:
            browser.close()
