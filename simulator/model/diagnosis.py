"""The providers' own cache diagnosis, played by the simulator (docs/architecture.md, "The simulator
is a second implementation").

A client that asks names an earlier answer's id; the simulator compares this request with the one
that earlier answer was given to, as each provider describes its comparison:

- Anthropic (beta header ``cache-diagnosis-2026-04-07`` and ``diagnostics.previous_message_id``):
  ``model_changed``, ``tools_changed``, ``system_changed``, ``messages_changed`` (each with
  ``cache_missed_input_tokens``: the earlier prompt's tokens after the first difference), else no
  divergence (``diagnostics: null``); ``previous_message_not_found`` for an unknown id;
  ``unavailable`` when only other prompt-affecting parameters (``thinking``, ``tool_choice``) differ.
  A pending comparison is ``{"cache_miss_reason": null}``: no later stream event completes it.
- OpenAI Responses (``prompt_cache_options.comparison_response_id``): ``cache_hit``, or
  ``cache_miss`` with the first differing ``reason`` in the provider's order, ``cache_missed_tokens``
  (this prompt's tokens after the divergence) and ``comparison_reusable_tokens`` (the shared
  prefix); ``comparison_response_not_found`` for an unknown id.

What is remembered per answer (``Fingerprint``) is hashes and token counts, never the prompt text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ctxscope.simulator.model.prompt import Prompt

BETA = "cache-diagnosis-2026-04-07"


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k not in ("cache_control",)}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


@dataclass(frozen=True)
class Fingerprint:
    """What a later comparison needs of one answered request: parameter hashes and the prompt's
    blocks as (key, tokens), never their text."""

    model: str
    params: tuple[tuple[str, str], ...]  # (reason, hash) in the provider's order of comparison
    blocks: tuple[tuple[bytes, int], ...]


def anthropic_fingerprint(body: dict[str, Any], prompt: Prompt) -> Fingerprint:
    params = (
        ("tools_changed", _hash(_without_cache_control(body.get("tools")))),
        # the system as its blocks' keys: markers out, and a metadata block the provider ignores too
        ("system_changed", _hash([b.key.hex() for b in prompt.blocks if b.meta.startswith("system")])),
        ("unavailable", _hash([body.get("thinking"), body.get("tool_choice")])),
    )
    return Fingerprint(
        str(body.get("model")),
        params,
        tuple((b.key, b.tokens) for b in prompt.blocks),
    )


def responses_fingerprint(body: dict[str, Any], prompt: Prompt) -> Fingerprint:
    text: dict[str, Any] = body["text"] if isinstance(body.get("text"), dict) else {}
    reasoning: dict[str, Any] = body["reasoning"] if isinstance(body.get("reasoning"), dict) else {}
    params = (
        ("prompt_cache_key_changed", _hash(body.get("prompt_cache_key"))),
        ("tools_changed", _hash(body.get("tools"))),
        ("text_format_changed", _hash(text.get("format"))),
        ("reasoning_effort_changed", _hash(reasoning.get("effort"))),
        ("verbosity_changed", _hash(text.get("verbosity"))),
        ("service_tier_changed", _hash(body.get("service_tier"))),
    )
    return Fingerprint(
        str(body.get("model")),
        params,
        tuple((b.key, b.tokens) for b in prompt.blocks),
    )


def _shared(earlier: Fingerprint, now: Fingerprint) -> int:
    """How many leading blocks the two prompts share."""
    n = 0
    for (a, _), (b, _) in zip(earlier.blocks, now.blocks, strict=False):
        if a != b:
            break
        n += 1
    return n


def _tokens(blocks: tuple[tuple[bytes, int], ...]) -> int:
    return sum(t for _, t in blocks)


def anthropic_asks(headers: Any, body: dict[str, Any]) -> bool:
    """The request opts in: the beta header names the feature and ``diagnostics`` is an object."""
    betas = ",".join(headers.getall("anthropic-beta", [])) if hasattr(headers, "getall") else ""
    asked = any(b.strip() == BETA for b in betas.split(","))
    return asked and isinstance(body.get("diagnostics"), dict)


def anthropic_diagnosis(
    body: dict[str, Any], now: Fingerprint, memory: dict[str, Fingerprint], *, pending: bool = False
) -> dict[str, Any] | None:
    """The answer's ``diagnostics`` member: None (JSON null) when nothing diverged."""
    wanted = body["diagnostics"].get("previous_message_id")
    if not isinstance(wanted, str):
        return None  # the first turn opts in with null: nothing to compare
    if pending:
        return {"cache_miss_reason": None}
    earlier = memory.get(wanted)
    if earlier is None:
        return {"cache_miss_reason": {"type": "previous_message_not_found"}}
    shared = _shared(earlier, now)
    missed = _tokens(earlier.blocks[shared:])
    if earlier.model != now.model:
        return {"cache_miss_reason": {"type": "model_changed", "cache_missed_input_tokens": _tokens(earlier.blocks)}}
    for (reason, before), (_, after) in zip(earlier.params, now.params, strict=True):
        if before != after and reason != "unavailable":
            return {"cache_miss_reason": {"type": reason, "cache_missed_input_tokens": missed}}
    if shared < len(earlier.blocks):
        return {"cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": missed}}
    if earlier.params[-1] != now.params[-1]:
        return {"cache_miss_reason": {"type": "unavailable"}}
    return None


def responses_diagnosis(
    body: dict[str, Any], now: Fingerprint, memory: dict[str, Fingerprint]
) -> dict[str, Any] | None:
    """The answer's ``prompt_cache_diagnostics``; None when the request did not ask."""
    options = body.get("prompt_cache_options")
    wanted = options.get("comparison_response_id") if isinstance(options, dict) else None
    if not isinstance(wanted, str):
        return None
    earlier = memory.get(wanted)
    if earlier is None:
        return {"type": "comparison_response_not_found"}
    shared = _shared(earlier, now)
    reusable = _tokens(now.blocks[:shared])
    missed = _tokens(now.blocks[shared:])
    reason = None
    if earlier.model != now.model:
        reason = "model_changed"
    else:
        reason = next((r for (r, a), (_, b) in zip(earlier.params, now.params, strict=True) if a != b), None)
    if reason is None and shared < len(earlier.blocks):
        reason = "input_changed"
    if reason is None:
        return {"type": "cache_hit"}
    return {
        "type": "cache_miss",
        "reason": reason,
        "cache_missed_tokens": missed,
        "comparison_reusable_tokens": reusable,
    }


def responses_cache_options(body: dict[str, Any]) -> dict[str, Any] | None:
    """The ``prompt_cache_options`` a response reports back, when the request set any."""
    options = body.get("prompt_cache_options")
    if not isinstance(options, dict):
        return None
    mode = options.get("mode") if options.get("mode") in ("implicit", "explicit") else "implicit"
    ttl = options.get("ttl") if options.get("ttl") in ("30m", "12h") else "30m"
    wanted = options.get("comparison_response_id")
    return {"mode": mode, "ttl": ttl, "comparison_response_id": wanted if isinstance(wanted, str) else None}


@dataclass(frozen=True)
class Diagnosis:
    """One request's side of the protocol: whether it asked, the answer's member, and what to
    remember of it for a later comparison."""

    asked: bool
    value: dict[str, Any] | None
    fingerprint: Fingerprint | None


NOT_ASKED = Diagnosis(False, None, None)


def diagnose(
    api: str, headers: Any, body: dict[str, Any], prompt: Prompt, memory: dict[str, Fingerprint], *, pending: bool
) -> Diagnosis:
    """The diagnosis for one request of ``api`` ("anthropic" or "responses"; others never diagnose)."""
    if api == "anthropic":
        now = anthropic_fingerprint(body, prompt)
        if not anthropic_asks(headers, body):
            return Diagnosis(False, None, now)
        return Diagnosis(True, anthropic_diagnosis(body, now, memory, pending=pending), now)
    if api == "responses":
        now = responses_fingerprint(body, prompt)
        asked = isinstance(body.get("prompt_cache_options"), dict)
        return Diagnosis(asked, responses_diagnosis(body, now, memory) if asked else None, now)
    return NOT_ASKED
