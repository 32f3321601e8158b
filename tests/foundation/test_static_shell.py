"""The service worker's shell names every module and stylesheet the page loads, so the
installed app opens offline with all of its screens (not only those written before it)."""

from __future__ import annotations

import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "api" / "static"


def test_the_shell_lists_every_module_and_stylesheet() -> None:
    source = (STATIC / "sw.js").read_text(encoding="utf-8")
    shell = set(re.findall(r'"(/[^"]*)"', source.split("const SHELL = [", 1)[1].split("];")[0]))
    files = {f"/js/{p.name}" for p in (STATIC / "js").glob("*.js")}
    files |= {f"/{p.name}" for p in STATIC.glob("*.css")}
    assert files - shell == set()
    missing = [path for path in shell if path != "/" and not (STATIC / path.lstrip("/")).exists()]
    assert missing == []
