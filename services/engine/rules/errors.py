"""Errors raised by the rules core (never `assert`)."""

from __future__ import annotations


class RulesError(Exception):
    """Base class: `code` is a short machine-readable reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidOptions(RulesError):
    def __init__(self, message: str) -> None:
        super().__init__("invalid_options", message)


class InvalidDeal(RulesError):
    """The deal or the hand's starting inputs do not fit the variant."""


class IllegalAction(RulesError):
    """The action is not legal in this state."""
