"""What a test needs from the machine: on a developer's machine a missing capability skips the test
with the reason; in CI (``CI`` set) it fails it, so CI never passes by testing less."""

from __future__ import annotations

import os

import pytest


def require(available: bool, what: str) -> None:
    """Skip (or, in CI, fail) the calling test unless ``available``; ``what`` says what is missing."""
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must be able to run this test: {what}")
    pytest.skip(what)
