"""Which client to build: provider, wire API, model, base URL (through the local proxy unless direct), limits.

By default every call goes through the ctxscope proxy so it shows up in the inspector:
``<proxy>/anthropic``, ``<proxy>/openai/v1``, and for the simulator ``<proxy>/u/sim/v1`` (OpenAI
APIs) or ``<proxy>/u/sim`` (Anthropic API). ``direct`` talks to ``base_url`` or the provider's
real URL. Keys come from ANTHROPIC_API_KEY / OPENAI_API_KEY; the simulator takes any key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.model import ModelClient
from .anthropic import AnthropicClient
from .openai_chat import OpenAIChatClient
from .openai_responses import OpenAIResponsesClient

PROVIDERS = ("anthropic", "openai", "openai-responses", "sim")
APIS = ("anthropic", "openai-chat", "openai-responses")
DEFAULT_PROXY = "http://127.0.0.1:8787"
DIRECT_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai-chat": "https://api.openai.com/v1",
    "openai-responses": "https://api.openai.com/v1",
}
DEFAULT_MODELS = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4.1",
    "openai-responses": "gpt-4.1",
    "sim": "sim-model",
}
# (model name prefix, context window, output limit); first match wins.
MODEL_LIMITS = (
    ("claude", 200_000, 32_000),
    ("gpt-4.1", 1_047_576, 32_768),
    ("gpt-4o", 128_000, 16_384),
    ("gpt-5", 400_000, 128_000),
    ("o3", 200_000, 100_000),
    ("o4", 200_000, 100_000),
)
DEFAULT_LIMITS = (128_000, 16_000)
KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai-chat": "OPENAI_API_KEY", "openai-responses": "OPENAI_API_KEY"}


class ProviderConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ProviderSettings:
    provider: str
    api: str
    model: str
    base_url: str
    context_window: int
    max_output_tokens: int
    api_key: str | None = field(default=None, repr=False)
    thinking_budget: int | None = None
    via_proxy: bool = True


def default_api(provider: str) -> str:
    return {"anthropic": "anthropic", "openai-responses": "openai-responses"}.get(provider, "openai-chat")


def model_limits(model: str) -> tuple[int, int]:
    for prefix, window, output in MODEL_LIMITS:
        if model.startswith(prefix):
            return window, output
    return DEFAULT_LIMITS


def proxy_base_url(proxy: str, provider: str, api: str) -> str:
    proxy = proxy.rstrip("/")
    if provider == "sim":
        return f"{proxy}/u/sim" if api == "anthropic" else f"{proxy}/u/sim/v1"
    return f"{proxy}/anthropic" if api == "anthropic" else f"{proxy}/openai/v1"


def resolve(
    provider: str,
    *,
    api: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    direct: bool = False,
    proxy: str | None = None,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    thinking_budget: int | None = None,
    env: Mapping[str, str] = os.environ,
) -> ProviderSettings:
    if provider not in PROVIDERS:
        raise ProviderConfigError(f"unknown provider {provider!r} (choose from {', '.join(PROVIDERS)})")
    api = api or default_api(provider)
    if api not in APIS:
        raise ProviderConfigError(f"unknown API {api!r} (choose from {', '.join(APIS)})")
    model = model or DEFAULT_MODELS[provider]
    if direct:
        if base_url is None and provider == "sim":
            raise ProviderConfigError("--direct with --provider sim needs --base-url (the simulator's address)")
        url = base_url or DIRECT_URLS[api]
    else:
        url = base_url or proxy_base_url(proxy or DEFAULT_PROXY, provider, api)
    key = "sim-key" if provider == "sim" else env.get(KEY_ENV[api])
    if not key:
        raise ProviderConfigError(
            f"set {KEY_ENV[api]} to use provider {provider!r} "
            "(or try --provider sim: the built-in simulator needs no key)"
        )
    window, output = model_limits(model)
    return ProviderSettings(
        provider,
        api,
        model,
        url,
        context_window or window,
        max_output_tokens or output,
        key,
        thinking_budget,
        not direct and base_url is None,
    )


def make_client(settings: ProviderSettings, **kwargs: Any) -> ModelClient:
    """The HTTP client for these settings (kwargs: retry, http, extra_headers, read_timeout)."""
    common = dict(
        base_url=settings.base_url,
        model=settings.model,
        api_key=settings.api_key,
        provider=settings.provider,
        context_window=settings.context_window,
        max_output_tokens=settings.max_output_tokens,
        **kwargs,
    )
    if settings.api == "anthropic":
        return AnthropicClient(thinking_budget=settings.thinking_budget, **common)
    if settings.api == "openai-responses":
        return OpenAIResponsesClient(**common)
    return OpenAIChatClient(**common)
