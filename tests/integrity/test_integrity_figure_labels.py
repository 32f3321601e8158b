"""Every figure an alert can carry has a label in both dictionaries of the page (i18n.js): the
compliance screen shows "Neto" / "Net", never the raw field name `net_cents`."""

from __future__ import annotations

from api.routes_reports import REPORT_ALERT_SCORE
from integrity.config import IntegrityConfig
from integrity.detectors import detect
from integrity.losing import scan_losing
from integrity.scan import losing_alerts
from tests.browser.test_i18n import _dictionaries
from tests.integrity import histories as h
from tests.integrity.test_losing import history


def _figure_keys() -> set[str]:
    planted = h.merged(
        h.dumping_ring("fl"),
        h.laundering_chain("fm"),
        h.structured_deposits("fs"),
        h.bot_player("fb"),
        h.night_and_day("fo"),
        h.one_device("fd-1"),
    )
    alerts = detect(planted, IntegrityConfig())
    hands, _ = history(seed=7, honest=30, hands_each=100, rings=1)
    alerts += losing_alerts(scan_losing(hands), "2026-12")
    kinds = {a.kind for a in alerts}
    # every detector and the deliberate-losing score took part
    assert {"pair_flow", "chain", "structuring", "steady_timing", "deliberate_losing"} <= kinds
    assert REPORT_ALERT_SCORE > 0  # player_report's figures: reports, reporters
    return {k for a in alerts for k in a.figures} | {"reports", "reporters"}


def test_every_alert_figure_has_a_label_in_both_languages() -> None:
    dictionaries = _dictionaries()
    keys = _figure_keys()
    for lang, words in dictionaries.items():
        missing = sorted(k for k in keys if f"fig_{k}" not in words)
        assert missing == [], (lang, missing)
    for kind in ("deliberate_losing", "player_report"):
        assert all(f"kind_{kind}" in words for words in dictionaries.values())
