"""The lobby's list of invitations in Chromium, with "play again" among them: ben has a
partner invitation from cris, a "play again" of a four-player match proposed by ana, a partner
invitation he sent to dani and a "play again" he proposed to ana. Each reads in Spanish and in
English (who invites, who else is invited, who has not answered, the game and stake, "play
again" named as such), with Accept and Decline, or Cancel on his own; accepting the rematch
shows him waiting, and seats him once the last player accepts (or once he retries a seating
cut short by a failing service). At 390x844 and 1280x800: no overflow, 44 px targets, no
serious axe-core violation.

The page runs alone with the API answered by the test (page.route, as test_browser_rematch.py
does); every answer is built from the gateway's own response structs, so a renamed field
breaks this test rather than passing unseen.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from api.routes_auth import Me
from api.routes_invitations import InvitationList
from api.routes_lobby import InvitationOut, PlayerAnswer, SeatOut, TableOut
from services.matchmaking.contract import KindInfo, KindList, TierInfo
from services.matchmaking.kinds import CATALOGUE, TIERS
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

ME = "ben"
REMATCH, PARTNER, SENT, SENT_AGAIN = 7, 3, 4, 5


def _kinds() -> KindList:
    return KindList(
        kinds=[
            KindInfo(
                kind=k.kind,
                variant=k.variant,
                title=k.title,
                options=dict(k.options),
                seat_count=k.seat_count,
                pairs=k.pairs,
                tiers=[TierInfo(t, cents) for t, cents in TIERS.items()],
            )
            for k in CATALOGUE.values()
        ],
        currency="USD",
    )


def _invitation(
    invitation_id: int,
    inviter: str,
    answers: dict[str, str],
    *,
    kind: str,
    tier: str,
    op: str = "quick",
    match_id: str | None = None,
    status: str = "pending",
    table: TableOut | None = None,
) -> InvitationOut:
    """An invitation as ben sees it; `answers` are every player's, the inviter's first."""
    now = datetime.now(UTC)
    return InvitationOut(
        invitation_id=invitation_id,
        inviter=inviter,
        invitees=[p for p in answers if p != inviter],
        op=op,
        kind=kind,
        tier=tier,
        invite_code=None,
        match_id=match_id,
        status=status,
        failure=None,
        table_id=None if table is None else table.table_id,
        created_at=now,
        expires_at=now + timedelta(seconds=60),
        players=[PlayerAnswer(p, a) for p, a in answers.items()],
        waiting_for=sum(a == "pending" for a in answers.values()),
        my_answer=answers[ME],
        sent_by_me=inviter == ME,
        table=table,
    )


def _rematch(ben: str, dani: str, table: TableOut | None = None) -> InvitationOut:
    """ana's "play again" of m-1 (apuesta parejas, $20): cristobal_r accepted already."""
    status = "accepted" if ben == dani == "accepted" else "pending"
    return _invitation(
        REMATCH,
        "ana",
        {"ana": "accepted", ME: ben, "cristobal_r": "accepted", "dani": dani},
        kind="apuesta-parejas",
        tier="20",
        op="private",
        match_id="m-1",
        status=status,
        table=table,
    )


NEW_TABLE = TableOut(
    table_id="t-9",
    kind="apuesta-parejas",
    variant="apuesta",
    tier="20",
    stake_cents=2000,
    currency="USD",
    seat_count=4,
    pairs=True,
    private=True,
    vs_cpu=False,
    invite_code="K7Q2M",
    status="playing",
    seats=[
        SeatOut(n, p, False, "seated") for n, p in enumerate(["ana", ME, "cristobal_r", "dani"])
    ],
    match_id="m-2",
    my_seat=1,
)


class FakeApi:
    """The gateway as ben's page sees it; the test moves the rematch along."""

    def __init__(self) -> None:
        self.incoming: dict[int, InvitationOut] = {
            PARTNER: _invitation(
                PARTNER, "cris", {"cris": "accepted", ME: "pending"}, kind="casa-parejas", tier="10"
            ),
            REMATCH: _rematch("pending", "pending"),
        }
        self.outgoing: dict[int, InvitationOut] = {
            SENT: _invitation(
                SENT, ME, {ME: "accepted", "dani": "pending"}, kind="casa-duelo", tier="free"
            ),
            SENT_AGAIN: _invitation(
                SENT_AGAIN,
                ME,
                {ME: "accepted", "ana": "pending"},
                kind="casa-duelo",
                tier="80",
                op="private",
                match_id="m-0",
            ),
        }
        self.mine: list[TableOut] = []
        self.posts: list[str] = []

    def handle(self, route: Any) -> None:
        url, method = route.request.url.split("?")[0], route.request.method
        path = url.split("/api/", 1)[1]
        if method == "POST":
            self.posts.append(path)
            found = re.fullmatch(r"invitations/(\d+)/(accept|decline|cancel)", path)
            if found is None:
                return self.json(route, 404, {"error": "not_found", "detail": path})
            number, action = int(found[1]), found[2]
            if action == "accept" and number == REMATCH:
                if self.incoming[REMATCH].status == "accepted":  # a retry: seated now
                    self.incoming[REMATCH] = _rematch("accepted", "accepted", NEW_TABLE)
                    self.mine = [NEW_TABLE]
                else:
                    self.incoming[REMATCH] = _rematch("accepted", "pending")
                return self.json(route, 200, self.incoming[REMATCH])
            box = self.outgoing if action == "cancel" else self.incoming
            gone = box.pop(number)
            return self.json(route, 200, gone)
        answers: dict[str, Any] = {
            "me": Me(ME, ME, "player", "active", None, True),
            "me/wallet": {"player": ME, "currency": "USD", "balance": 12_500},
            "lobby/kinds": _kinds(),
            "lobby/mine": self.mine,
            "lobby/tables": {"tables": []},
            "invitations": InvitationList(
                incoming=[i for i in self.incoming.values() if i.table_id is None],
                outgoing=list(self.outgoing.values()),
            ),
        }
        if path in answers:
            return self.json(route, 200, answers[path])
        return self.json(route, 404, {"error": "not_found", "detail": path})

    @staticmethod
    def json(route: Any, status: int, body: Any) -> None:
        route.fulfill(
            status=status, content_type="application/json", body=msgspec.json.encode(body)
        )


def _item(page: Any, box: str, invitation_id: int) -> Any:
    return page.locator(f"#{box} li[data-invitation='{invitation_id}']")


def _lines(page: Any, box: str, invitation_id: int) -> list[str]:
    """The item's lines of text, the countdown's figure replaced by N."""
    text: str = _item(page, box, invitation_id).locator(".grow").inner_text()
    return [re.sub(r"\d+ s\b", "N s", line) for line in text.splitlines() if line.strip()]


def _buttons(page: Any, box: str, invitation_id: int) -> list[str]:
    found: list[str] = (
        _item(page, box, invitation_id)
        .locator("button")
        .evaluate_all("bs => bs.map(b => b.dataset.test)")
    )
    return found


def _check_layout(page: Any, what: str) -> None:
    assert small_targets(page, "#screen-lobby") == [], what
    assert axe_serious(page) == [], what
    assert_fits(page, what)
    # Every item's text is whole: nothing clipped or cut with an ellipsis.
    clipped = page.eval_on_selector_all(
        "#invitations li, #invitations li *",
        "els => els.filter(e => e.scrollWidth > e.clientWidth + 1"
        " && getComputedStyle(e).overflowX !== 'visible').map(e => e.textContent)",
    )
    assert clipped == [], (what, clipped)
    # Buttons keep their label on one line (no "Acep-tar" on a narrow phone).
    wrapped = page.eval_on_selector_all(
        "#invitations button",
        "bs => bs.filter(b => b.getBoundingClientRect().height > 60).map(b => b.textContent)",
    )
    assert wrapped == [], (what, wrapped)


SPANISH = {
    ("invites-in", REMATCH): [
        "Jugar otra vez · Apuesta parejas 2v2 a 200 · $20.00",
        "ana te invita a jugar otra vez",
        "También invitados: cristobal_r, dani",
        "Sin responder: tú, dani · caduca en N s",
    ],
    ("invites-in", PARTNER): [
        "Casa parejas (4) · $10.00",
        "cris te invita como pareja",
        "Caduca en N s",
    ],
    ("invites-out", SENT): [
        "Casa duelo (2) · Gratis",
        "Invitaste a dani como pareja",
        "Sin responder: dani · caduca en N s",
    ],
    ("invites-out", SENT_AGAIN): [
        "Jugar otra vez · Casa duelo (2) · $80.00",
        "Invitaste a jugar otra vez a: ana",
        "Sin responder: ana · caduca en N s",
    ],
}
ENGLISH = {
    ("invites-in", REMATCH): [
        "Play again · Apuesta parejas 2v2 a 200 · $20.00",
        "ana invites you to play again",
        "Also invited: cristobal_r, dani",
        "Not answered yet: you, dani · expires in N s",
    ],
    ("invites-in", PARTNER): [
        "Casa parejas (4) · $10.00",
        "cris invites you as partner",
        "Expires in N s",
    ],
    ("invites-out", SENT): [
        "Casa duelo (2) · Free",
        "You invited dani as partner",
        "Not answered yet: dani · expires in N s",
    ],
    ("invites-out", SENT_AGAIN): [
        "Play again · Casa duelo (2) · $80.00",
        "You invited to play again: ana",
        "Not answered yet: ana · expires in N s",
    ],
}


@pytest.mark.parametrize("size", ["phone", "desktop"])
def test_lobby_lists_partner_and_play_again_invitations(size: str) -> None:
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
            page.goto(base + "/#lobby")
            page.wait_for_selector(f"#invites-in li[data-invitation='{REMATCH}']")
            shot(page, "lobby-invitations-es")

            # Spanish (the default): each reads whole, with its own buttons.
            for (box, number), lines in SPANISH.items():
                assert _lines(page, box, number) == lines, (box, number)
            for number in (REMATCH, PARTNER):
                assert _buttons(page, "invites-in", number) == ["invite-accept", "invite-decline"]
            for number in (SENT, SENT_AGAIN):
                assert _buttons(page, "invites-out", number) == ["invite-cancel"]
            accept = _item(page, "invites-in", REMATCH).locator("[data-test=invite-accept]")
            assert accept.get_attribute("aria-label") == (
                "Aceptar: Jugar otra vez · Apuesta parejas 2v2 a 200 · $20.00 · ana"
            )
            _check_layout(page, f"lobby invitations (es, {size})")
            # The lobby's poll (every 2 s) leaves an unchanged list alone: a focused button
            # keeps the focus, and the live region is not announced again.
            decline = _item(page, "invites-in", PARTNER).locator("[data-test=invite-decline]")
            decline.focus()
            for _ in range(2):  # a whole poll: its list, then the open tables after it
                with page.expect_request("**/api/lobby/tables"):
                    pass
            assert decline.evaluate("b => b === document.activeElement")

            # English: the same list in the other dictionary.
            page.click("#lang")
            page.wait_for_function(
                f"() => document.querySelector(\"#invites-in li[data-invitation='{REMATCH}']\")"
                "?.textContent.includes('Play again')"
            )
            shot(page, "lobby-invitations-en")
            for (box, number), lines in ENGLISH.items():
                assert _lines(page, box, number) == lines, (box, number)
            # The join panel below follows the language too (its stake list and summary).
            assert page.inner_text("#join-summary").endswith(" · Free")
            assert page.inner_text("#tier-select option[value=free]") == "Free"
            _check_layout(page, f"lobby invitations (en, {size})")

            # Accepting the rematch: he waits for dani, and may still decline.
            _item(page, "invites-in", REMATCH).locator("[data-test=invite-accept]").click()
            page.wait_for_function(
                f"() => document.querySelector(\"#invites-in li[data-invitation='{REMATCH}']\")"
                "?.dataset.answer === 'accepted'"
            )
            assert api.posts == [f"invitations/{REMATCH}/accept"]
            assert _lines(page, "invites-in", REMATCH)[-1] == (
                "You accepted · not answered yet: dani · expires in N s"
            )
            assert _buttons(page, "invites-in", REMATCH) == ["invite-decline"]
            shot(page, "lobby-invitations-accepted")
            _check_layout(page, f"lobby rematch accepted ({size})")

            if size == "desktop":
                # dani accepts last: everyone is seated; the lobby opens ben's new table.
                api.incoming[REMATCH] = _rematch("accepted", "accepted", NEW_TABLE)
                api.mine = [NEW_TABLE]
            else:
                # dani's acceptance was cut short while seating (a service failed): all
                # accepted, no table. ben may retry, which seats everyone.
                api.incoming[REMATCH] = _rematch("accepted", "accepted")
                item = f"#invites-in li[data-invitation='{REMATCH}'][data-status=accepted]"
                page.wait_for_selector(item)
                assert _lines(page, "invites-in", REMATCH)[-1] == (
                    "Everyone accepted: seating you… If the table does not open, retry."
                )
                assert _buttons(page, "invites-in", REMATCH) == ["invite-accept"]
                assert page.inner_text(f"{item} button") == "Retry"
                shot(page, "lobby-invitations-retry")
                _check_layout(page, "lobby rematch cut short")
                page.click(f"{item} button")
            page.wait_for_selector("#screen-table:not([hidden])")
            assert page.evaluate("() => location.hash") == "#table/m-2"
            assert not errors, errors
        finally:
            browser.close()


# Everything of the lobby's outside the game picker that a player reads or presses, and (for
# a screen where the join panel does not stick) the picker's cards too.
OUTSIDE_PICKER = (
    "#lobby-balance, #invitations li, #invitations button, #my-tables li, #code-form input,"
    " #code-form button, #open-tables li"
)

UNDER_PANEL = """(sel) => {
    const panel = document.getElementById("join-form").getBoundingClientRect();
    const out = [];
    for (const e of document.querySelectorAll(sel)) {
        const r = e.getBoundingClientRect();
        const top = Math.max(r.top, panel.top, 0);
        const bottom = Math.min(r.bottom, panel.bottom, innerHeight);
        const left = Math.max(r.left, panel.left), right = Math.min(r.right, panel.right);
        if (r.height && bottom - top > 0.5 && right - left > 0.5)
            out.push(`${scrollY}: ${e.tagName} ${e.textContent.trim().slice(0, 30)}`);
    }
    return out;
}"""


def _covered_while_scrolling(page: Any, selector: str) -> list[str]:
    """What the join panel lies over, the page scrolled top to bottom 80 px at a time."""
    found: list[str] = []
    height: int = page.evaluate("() => document.documentElement.scrollHeight")
    for y in [*range(0, height, 80), height]:
        page.evaluate(f"() => window.scrollTo(0, {y})")
        found += page.evaluate(UNDER_PANEL, selector)
    page.evaluate("() => window.scrollTo(0, 0)")
    return found


@pytest.mark.parametrize("size", ["phone", "desktop"])
def test_join_panel_never_covers_invitations_or_balance(size: str) -> None:
    """With four invitations the join panel, sticky beside the game cards, lies over nothing
    outside them at any scroll position (it used to hide the last invitations on a phone);
    accepting shows the answer on the item, not in a toast over the balance; on a phone
    held sideways the panel does not stick at all, so it covers no card either."""
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
            page.goto(base + "/#lobby")
            page.wait_for_selector(f"#invites-out li[data-invitation='{SENT_AGAIN}']")
            page.wait_for_selector("#kind-cards .kind-card")
            assert _covered_while_scrolling(page, OUTSIDE_PICKER) == []
            shot(page, "lobby-four-invitations")
            # It still sticks over the cards it acts on, at the bottom of the screen.
            page.evaluate(
                "() => window.scrollTo(0, document.querySelector('.picker')"
                ".getBoundingClientRect().top + scrollY - innerHeight * 0.4)"
            )
            panel = page.locator("#join-form").bounding_box()
            assert panel is not None
            assert abs(panel["y"] + panel["height"] - page.viewport_size["height"]) <= 1
            if size == "phone":  # kept short: under a fifth of the screen
                assert panel["height"] < 0.2 * page.viewport_size["height"], panel
                assert small_targets(page, "#join-form") == []
            page.evaluate("() => window.scrollTo(0, 0)")

            # Accepting: the item says so; nothing lies over the balance.
            _item(page, "invites-in", REMATCH).locator("[data-test=invite-accept]").click()
            page.wait_for_function(
                f"() => document.querySelector(\"#invites-in li[data-invitation='{REMATCH}']\")"
                "?.dataset.answer === 'accepted'"
            )
            over_balance = page.evaluate(
                """() => {
                    const f = document.getElementById("flash");
                    const a = f.getBoundingClientRect();
                    const b = document.querySelector(".wallet-line").getBoundingClientRect();
                    return f.textContent !== "" && a.left < b.right && b.left < a.right
                        && a.top < b.bottom && b.top < a.bottom;
                }"""
            )
            assert not over_balance, page.inner_text("#flash")

            if size == "phone":
                page.set_viewport_size({"width": 844, "height": 390})
                selector = f"{OUTSIDE_PICKER}, #kind-cards .kind-card"
                assert _covered_while_scrolling(page, selector) == []
                assert_fits(page, "lobby sideways")
            assert not errors, errors
        finally:
            browser.close()
