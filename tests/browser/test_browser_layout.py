"""The page's pure pieces in Chromium, without a platform: the snake layout of the line of
play (js/snake.js), the sign-in screen at the five widths, and the service worker's cache.

The snake is checked on whole lines of play: all 28 tiles of a double-six set (a dominicana
hand) and 40 tiles of a double-nine set, in boxes the size of a phone's and a desktop's felt.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.browser.browser_helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    assert_fits,
    axe_serious,
    need_chromium,
    phone_context,
    shot,
    static_server,
)

pytestmark = [pytest.mark.browser]

# Felt sizes the table gives the board: phones in portrait and landscape, tablet, desktop.
BOXES = [(250, 420), (300, 250), (560, 170), (620, 560), (1000, 420)]


def line_of_play(top: int, length: int, seed: int) -> list[list[int]]:
    """`length` tiles of a double-`top` set laid end to end (an Euler walk). In a double-six
    set every value shows 8 times, so the whole set makes one line; a double-nine set shows
    each 11 times, so 5 tiles pairing the values up are left out first (50 in the line)."""
    rng = random.Random(seed)
    left_out = {(v, v + 1) for v in range(0, top, 2)} if top % 2 else set()
    edges: dict[int, list[int]] = {v: [] for v in range(top + 1)}
    for a in range(top + 1):
        for b in range(a, top + 1):
            if (a, b) in left_out:
                continue
            edges[a].append(b)
            if a != b:
                edges[b].append(a)
    for v in edges:
        rng.shuffle(edges[v])
    stack, walk = [rng.randrange(top + 1)], []
    while stack:
        v = stack[-1]
        if edges[v]:
            w = edges[v].pop()
            if w != v:
                edges[w].remove(v)
            stack.append(w)
        else:
            walk.append(stack.pop())
    chain = [[walk[i], walk[i + 1]] for i in range(len(walk) - 1)]
    assert len(chain) == (top + 1) * (top + 2) // 2 - len(left_out)
    return chain[:length]


def _touch(p: dict[str, Any], q: dict[str, Any]) -> bool:
    """Two rectangles share a stretch of edge (they meet, without overlapping)."""
    eps = 1e-6
    h_meet = abs(p["x"] + p["w"] - q["x"]) < eps or abs(q["x"] + q["w"] - p["x"]) < eps
    v_meet = abs(p["y"] + p["h"] - q["y"]) < eps or abs(q["y"] + q["h"] - p["y"]) < eps
    h_span = min(p["x"] + p["w"], q["x"] + q["w"]) - max(p["x"], q["x"]) > eps
    v_span = min(p["y"] + p["h"], q["y"] + q["h"]) - max(p["y"], q["y"]) > eps
    return (h_meet and v_span) or (v_meet and h_span)


@pytest.fixture(scope="module")
def page() -> Any:
    need_chromium()
    from playwright.sync_api import sync_playwright

    with static_server() as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = phone_context(browser)
            pg = context.new_page()
            errors: list[str] = []
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            pg.goto(base + "/")
            pg.wait_for_selector("#screen-login:not([hidden])")
            pg.base = base
            yield pg
            assert not errors, errors
        finally:
            browser.close()


@pytest.mark.parametrize(("top", "length"), [(6, 28), (9, 40), (6, 5), (9, 50)])
def test_snake_fits_turns_and_marks_both_ends(page: Any, top: int, length: int):
    for seed in range(3):
        chain = line_of_play(top, length, seed)
        for width, height in BOXES:
            layout = page.evaluate(
                """async ([chain, box]) => {
                    const m = await import('/js/snake.js');
                    const l = m.layoutSnake(chain, box);
                    return {...l, overlap: m.overlaps(l.tiles)};
                }""",
                [chain, {"width": width, "height": height}],
            )
            tiles = layout["tiles"]
            where = f"{length} tiles of double-{top} (seed {seed}) in {width}x{height}"
            assert len(tiles) == length, where
            assert layout["overlap"] is None, where
            for t in tiles:
                assert t["x"] >= -1e-6 and t["y"] >= -1e-6, where
                assert t["x"] + t["w"] <= width + 1e-6 and t["y"] + t["h"] <= height + 1e-6, where
            # Each tile meets the next one: one connected line.
            for i in range(length - 1):
                assert _touch(tiles[i], tiles[i + 1]), (where, i)
            # Doubles lie crosswise to the row they sit in.
            for i, t in enumerate(tiles):
                if t["a"] == t["b"]:
                    assert t["dir"] == "v" and t["h"] > t["w"], (where, i)
                    row = [tiles[j] for j in (i - 1, i + 1) if 0 <= j < length]
                    assert all(n["w"] > n["h"] for n in row if n["dir"] in "lr"), (where, i)
            # Both open ends marked, inside the box, with the right numbers.
            left, right = layout["ends"]
            assert (left["side"], left["value"]) == ("left", chain[0][0]), where
            assert (right["side"], right["value"]) == ("right", chain[-1][1]), where
            for end in (left, right):
                assert 0 <= end["cx"] <= width and 0 <= end["cy"] <= height, where
            # Legible: a tile's short side at least 14 px even for 40 tiles on a phone.
            if length <= 40:
                assert layout["unit"] >= 14, (where, layout["unit"])


def test_sign_in_fits_every_width_and_passes_axe(page: Any):
    assert_fits(page, "sign-in")
    page.set_viewport_size({"width": 390, "height": 844})
    shot(page, "signin")
    assert axe_serious(page) == []
    for selector in ("#login-form input[name=username]", "#login-form button[type=submit]"):
        box = page.locator(selector).bounding_box()
        assert box["height"] >= 44, (selector, box)


def test_installable_and_service_worker_caches_only_the_shell(page: Any):
    manifest = page.evaluate("() => fetch('/manifest.json').then(r => r.json())")
    assert manifest["display"] == "standalone" and manifest["start_url"] == "/"
    sizes = {icon["sizes"] for icon in manifest["icons"]}
    assert {"192x192", "512x512"} <= sizes
    for icon in manifest["icons"]:
        status = page.evaluate("(u) => fetch(u).then(r => r.status)", icon["src"])
        assert status == 200, icon
    assert page.evaluate("() => document.querySelector('link[rel=icon]').href").endswith(".svg")
    cached = page.evaluate(
        """async () => {
            await navigator.serviceWorker.ready;
            const urls = [];
            for (const name of await caches.keys()) {
                const c = await caches.open(name);
                for (const r of await c.keys()) urls.push(new URL(r.url).pathname);
            }
            return urls;
        }"""
    )
    assert "/js/table.js" in cached and "/style.css" in cached, cached
    assert not [u for u in cached if u.startswith("/api/")], cached
    # An API answer fetched under the worker is not cached either.
    page.evaluate("() => fetch('/api/me').catch(() => null)")
    again = page.evaluate(
        """async () => {
            const out = [];
            for (const name of await caches.keys())
                for (const r of await (await caches.open(name)).keys()) out.push(new URL(r.url).pathname);
            return out;
        }"""
    )
    assert not [u for u in again if u.startswith("/api/")], again
