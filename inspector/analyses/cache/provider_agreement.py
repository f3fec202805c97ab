"""The provider's own cache diagnosis held against ctxscope's verdict: one word per call
(docs/architecture.md, "Cache verdicts").

``parse_provider_diagnostics`` (``verdicts.py``) reads the provider's answer into a ``status`` (and
OpenAI's ``reason``); this table says when ctxscope's relation and break agree with it. A break is
where ctxscope's prediction puts the first difference from the predecessor (``break_pointer``, a
JSON Pointer into this call's body, and the kind of segment there), or the relation's pointer.
Where the two disagree, the provider is the reference: it compared the prompts it actually cached.

| provider says                                   | agrees when ctxscope has                                        |
|-------------------------------------------------|-----------------------------------------------------------------|
| no divergence (Anthropic), ``cache_hit`` (OpenAI) | APPEND_ONLY or IDENTICAL and no ``client_break``                |
| ``model_changed``                               | EPOCH_START ``model_change``, or a break at ``/model``           |
| ``system_changed``                              | a break under ``/system`` (a system segment)                     |
| ``tools_changed``                               | a break under ``/tools`` (a tools segment)                       |
| ``messages_changed``                            | DIVERGED with a break under ``/messages``                        |
| ``input_changed``, ``context_compacted``        | DIVERGED with a break under ``/input`` or ``/instructions``      |
| ``text_format_changed``, ``verbosity_changed``  | a break under ``/text``                                          |
| ``reasoning_effort_changed``                    | a break under ``/reasoning``                                     |
| ``service_tier_changed``                        | a break at ``/service_tier``                                     |
| ``prompt_cache_key_changed``                    | a break at ``/prompt_cache_key``                                 |
| a null reason (comparison pending)              | ``pending``, whatever ctxscope says                              |
| not found, ``unavailable``, not reported, first turn | ``none``: the provider gave no diagnosis                    |

Anything else (a verdict ctxscope cannot hold against it: NOT_COMPARABLE) is ``none`` too, so
``agree`` and ``disagree`` always count a comparison both sides made.
"""

from __future__ import annotations

from typing import Any

from ctxscope.vocab.headers import Annotation
from ctxscope.vocab.kinds import CacheVerdict, EpochReason, ProviderAgreement, RelationKind

NO_DIVERGENCE = frozenset({"no_divergence", "cache_hit"})
NO_DIAGNOSIS = frozenset(
    {"baseline", "previous_message_not_found", "comparison_response_not_found", "unavailable", "not_reported"}
)
# A provider's reason -> the JSON Pointer prefixes (of this call's body) and segment kinds where
# ctxscope's break must lie to agree.
_WHERE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "model_changed": (("/model",), ("model",)),
    "system_changed": (("/system",), ("system",)),
    "tools_changed": (("/tools",), ("tools",)),
    "messages_changed": (("/messages",), ()),
    "input_changed": (("/input", "/instructions"), ()),
    "context_compacted": (("/input", "/instructions"), ()),
    "text_format_changed": (("/text",), ()),
    "verbosity_changed": (("/text",), ()),
    "reasoning_effort_changed": (("/reasoning",), ()),
    "service_tier_changed": (("/service_tier",), ()),
    "prompt_cache_key_changed": (("/prompt_cache_key",), ()),
}


def _under(pointer: str | None, prefixes: tuple[str, ...]) -> bool:
    return pointer is not None and any(pointer == p or pointer.startswith(p + "/") for p in prefixes)


def provider_agreement(
    diagnostics: dict[str, Any] | None,
    relation: RelationKind | str,
    epoch_reason: str | None,
    verdict: str | None,
    break_pointer: str | None,
    break_kind: str | None,
    relation_pointer: str | None = None,
) -> ProviderAgreement:
    """The table above, for one call. ``relation_pointer`` is the relation's first difference,
    which stands for the break when the prediction names none (no cache breakpoints asked)."""
    if not diagnostics:
        return ProviderAgreement.NONE
    status = diagnostics.get("status")
    if status == "pending":
        return ProviderAgreement.PENDING
    if status in NO_DIAGNOSIS or relation == RelationKind.NOT_COMPARABLE:
        return ProviderAgreement.NONE
    if status in NO_DIVERGENCE:
        intact = relation in (RelationKind.APPEND_ONLY, RelationKind.IDENTICAL)
        ok = intact and verdict != CacheVerdict.CLIENT_BREAK
        return ProviderAgreement.AGREE if ok else ProviderAgreement.DISAGREE
    reason = diagnostics.get("reason") or status
    where = _WHERE.get(str(reason))
    if where is None:
        return ProviderAgreement.NONE  # a reason this table does not know yet: no claim either way
    if reason == "model_changed" and epoch_reason == EpochReason.MODEL_CHANGE:
        return ProviderAgreement.AGREE
    prefixes, kinds = where
    broke = relation in (RelationKind.DIVERGED, RelationKind.EPOCH_START) or break_pointer is not None
    located = (
        _under(break_pointer, prefixes)
        or _under(relation_pointer, prefixes)
        or (break_kind is not None and break_kind in kinds)
    )
    return ProviderAgreement.AGREE if broke and located else ProviderAgreement.DISAGREE


ASKED = Annotation.ASKED_DIAGNOSIS.value
_ASKED_FIELDS = {
    "diagnostics.previous_message_id": ("diagnostics", "previous_message_id"),
    "prompt_cache_options.comparison_response_id": ("prompt_cache_options", "comparison_response_id"),
}


def asked_body(body: Any, annotations: Any) -> Any:
    """The request as the provider saw it, for reading its diagnosis: the client's body with the
    field ``serve --ask-diagnosis`` added upstream (its annotation), when the client asked nothing."""
    added = next((v for k, v in annotations or () if k == ASKED), None)
    if not isinstance(body, dict) or not isinstance(added, str):
        return body
    name, _, value = added.partition("=")
    where = _ASKED_FIELDS.get(name)
    if where is None or not value or where[0] in body:
        return body
    return {**body, where[0]: {where[1]: value}}


def diagnosis_words(diagnostics: dict[str, Any] | None) -> str | None:
    """The provider's diagnosis in a few words ("system_changed, 4,200 tokens missed"); None when
    the call did not ask."""
    if not diagnostics:
        return None
    status = diagnostics.get("status")
    words = {
        "no_divergence": "no divergence",
        "cache_hit": "cache hit",
        "baseline": "first turn, nothing to compare",
        "pending": "pending",
        "not_reported": "asked, not reported",
        "previous_message_not_found": "previous message not found",
        "comparison_response_not_found": "comparison response not found",
    }
    if status in words:
        return words[str(status)]
    reason = diagnostics.get("reason") or status
    missed = diagnostics.get("missed_tokens")
    return f"{reason}, {missed:,} tokens missed" if isinstance(missed, int) else str(reason)


AGREEMENT_WORDS = {
    ProviderAgreement.AGREE: "agrees with ctxscope's verdict",
    ProviderAgreement.DISAGREE: "disagrees with ctxscope's verdict: the provider is the reference",
    ProviderAgreement.PENDING: "the provider had not finished comparing",
    ProviderAgreement.NONE: "no diagnosis to hold against ctxscope's verdict",
}


def diagnosis_sentence(cache: dict[str, Any] | None) -> str | None:
    """A stored call's diagnosis and its agreement in one line, for ``show``, the call page and the
    span ("system_changed, 1,700 tokens missed; agrees with ctxscope's verdict"); None when the call
    did not ask."""
    diagnostics = (cache or {}).get("provider_diagnostics")
    words = diagnosis_words(diagnostics)
    if words is None:
        return None
    agreement = (cache or {}).get("provider_agreement") or ProviderAgreement.NONE
    return f"{words}; {AGREEMENT_WORDS.get(agreement, str(agreement))}"
