"""Deterministic, provider-shaped ids (msg_01…, toolu_01…, chatcmpl-…, resp_…, call_…).

Replies must be reproducible, so ids come from a per-simulator counter hashed into the alphabet
and length each provider uses, never from a random source.
"""

from __future__ import annotations

import hashlib
import itertools
import threading

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

# prefix -> (alphabet, length of the random-looking tail)
_SHAPES = {
    "msg_01": (_B62, 22),  # Anthropic message
    "toolu_01": (_B62, 22),  # Anthropic tool_use
    "req_01": (_B62, 22),  # Anthropic request-id header
    "chatcmpl-": (_B62, 29),  # Chat Completions
    "call_": (_B62, 24),  # OpenAI tool call / Responses call_id
    "resp_": ("0123456789abcdef", 48),  # Responses response
    "msg_": ("0123456789abcdef", 48),  # Responses message item
    "fc_": ("0123456789abcdef", 48),  # Responses function_call item
    "ctc_": ("0123456789abcdef", 48),  # Responses custom_tool_call item
    "rs_": ("0123456789abcdef", 48),  # Responses reasoning item
    "cmp_": ("0123456789abcdef", 48),  # Responses compaction item
    "req_": ("0123456789abcdef", 32),  # OpenAI x-request-id
    "": (_B62, 22),  # Gemini responseId and request id (no prefix)
    "gcall_": (_B62, 16),  # Gemini call ids (only for the simulator's own bookkeeping)
}


class IdMaker:
    """Hands out ids from a counter; `reset()` restarts the sequence."""

    def __init__(self, seed: str = "ctxscope-sim") -> None:
        self._seed = seed
        self._lock = threading.Lock()
        self._counter = itertools.count(1)

    def reset(self) -> None:
        with self._lock:
            self._counter = itertools.count(1)

    def make(self, prefix: str) -> str:
        alphabet, length = _SHAPES[prefix]
        with self._lock:
            n = next(self._counter)
        digest = hashlib.sha256(f"{self._seed}:{prefix}:{n}".encode()).digest()
        value = int.from_bytes(digest, "big")
        chars = []
        for _ in range(length):
            value, rem = divmod(value, len(alphabet))
            chars.append(alphabet[rem])
        return prefix + "".join(chars)
