"""The SDK clients tests make, closed after each test (an autouse fixture in conftest.py), so no
connection of theirs outlives the test that opened it."""

from __future__ import annotations

from typing import Any

import anthropic
import openai

_open: list[anthropic.Anthropic | openai.OpenAI] = []


def Anthropic(**options: Any) -> anthropic.Anthropic:
    client = anthropic.Anthropic(**options)
    _open.append(client)
    return client


def OpenAI(**options: Any) -> openai.OpenAI:
    client = openai.OpenAI(**options)
    _open.append(client)
    return client


def close_all() -> None:
    while _open:
        _open.pop().close()
