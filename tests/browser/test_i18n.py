"""Every string of the page exists in Spanish and in English.

Reads api/static/js/i18n.js (the two dictionaries), index.html (`data-i18n`,
`data-i18n-label`) and the page's modules (`t("key")`), and the game kinds' one-line rule
descriptions (`desc_<variant>`). No browser needed: a missing key is a plain set difference.
"""

from __future__ import annotations

import re
from pathlib import Path

from services.matchmaking.kinds import CATALOGUE

STATIC = Path(__file__).resolve().parents[2] / "api" / "static"
KEY = r"[a-z][a-z0-9_]*"


def _dictionaries() -> dict[str, dict[str, str]]:
    src = (STATIC / "js" / "i18n.js").read_text()
    body = src[src.index("const T = {") : src.index("\n};\n")]
    out: dict[str, dict[str, str]] = {}
    for lang in ("es", "en"):
        start = body.index(f"\n  {lang}: {{")
        end = body.index("\n  },", start)
        block = body[start:end]
        pairs = re.findall(rf'\b({KEY}):\s*"((?:[^"\\]|\\.)*)"', block)
        out[lang] = dict(pairs)
    return out


def _used_keys() -> set[str]:
    used: set[str] = set()
    html = (STATIC / "index.html").read_text()
    used |= set(re.findall(rf'data-i18n(?:-label)?="({KEY})"', html))
    for js in (STATIC / "js").glob("*.js"):
        text = js.read_text()
        used |= set(re.findall(rf'\bt\("({KEY})"\)', text))
        used |= set(re.findall(rf'"data-i18n(?:-label)?":\s*"({KEY})"', text))
    used |= {f"desc_{kind.variant}" for kind in CATALOGUE.values()}
    used |= {f"role_{role}" for role in ("player", "auditor", "finance", "admin")}
    # Keys the page builds: the verifier's check names, how a hand ends.
    verify = (STATIC / "js" / "verify.js").read_text()
    used |= {f"chk_{name}" for name in re.findall(rf'await run\("({KEY})"', verify)}
    used |= {f"end_{how}" for how in ("domino", "tranque", "target", "claim")}
    return used


def test_both_dictionaries_have_the_same_keys_and_no_empty_string():
    d = _dictionaries()
    assert len(d["es"]) > 100, "the dictionaries were not parsed"
    assert sorted(set(d["es"]) - set(d["en"])) == [], "missing in English"
    assert sorted(set(d["en"]) - set(d["es"])) == [], "missing in Spanish"
    assert [k for lang in d.values() for k, v in lang.items() if not v.strip()] == []


def test_every_string_the_page_uses_is_in_both_dictionaries():
    d = _dictionaries()
    used = _used_keys()
    assert len(used) > 80, "the page's keys were not found"
    for lang in ("es", "en"):
        assert sorted(used - set(d[lang])) == [], f"used but missing in {lang}"


def test_english_mode_has_no_spanish_table_words():
    en = _dictionaries()["en"]
    # The issue: English mode said "Nosotros/Ellos"; Spanish said "waiting".
    assert en["us"] == "Us" and en["them"] == "Them"
    assert "waiting" not in _dictionaries()["es"]["waiting"].lower()
