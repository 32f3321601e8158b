"""The ledger service's ASGI app."""

from __future__ import annotations

from litestar import Litestar

from services.common.app import create_service_app
from services.common.config import Settings


def create_app(settings: Settings) -> Litestar:
    return create_service_app("ledger", settings, route_handlers=[])
