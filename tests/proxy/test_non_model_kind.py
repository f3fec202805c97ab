"""Which requests of known clients are no model call: telemetry, probes, metadata; and never a
request whose path speaks an LLM API, however a client dresses it."""

from __future__ import annotations

import pytest

from ctxscope.proxy.wire.apis import non_model_kind


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("POST", "/api/claude_code/metrics", "telemetry"),
        ("GET", "/api/claude_code/settings", "telemetry"),
        ("POST", "/api/event_logging/batch", "telemetry"),
        ("HEAD", "/", "probe"),
        ("HEAD", "/v1/messages", "probe"),
        ("GET", "/", "probe"),
        ("GET", "/v1/models", "metadata"),
        ("GET", "/v1/models/claude-sonnet-4-6", "metadata"),
        ("GET", "/api/oauth/profile", "metadata"),
        # what Claude Code 2.1.332 sends beside its model calls, seen through the daemon
        ("GET", "/api/claude_cli/bootstrap", "telemetry"),
        ("GET", "/api/claude_code_penguin_mode", "telemetry"),
        ("POST", "/api/eval/sdk-zAZezfDKGoZuXXKe", "telemetry"),
        ("GET", "/api/directory/server-urls", "metadata"),
    ],
)
def test_known_non_model_requests_have_a_kind(method, path, kind):
    assert non_model_kind(method, path) == kind


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/messages"),
        ("POST", "/api/claude_code/v1/messages"),  # a model call under a prefix that looks like telemetry
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/responses"),
        ("POST", "/v1beta/models/gemini-2.5-pro:generateContent"),
        ("GET", "/v1/responses/resp_123"),  # a stored object: a plain exchange, not a known non-model request
        ("POST", "/v1/files"),
    ],
)
def test_model_calls_and_unknown_requests_have_none(method, path):
    assert non_model_kind(method, path) is None
