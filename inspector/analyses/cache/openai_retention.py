"""How long OpenAI keeps what a request wrote to its prompt cache: one rule for the cache
prediction, the advisor's replay and its causes (docs/architecture.md, "Cache verdicts").

OpenAI documents in-memory retention as "typically 5 to 10 minutes of inactivity": only the short
end is a promise, so an entry is counted alive for 300 s (a read after that is the provider keeping
more than promised, never a loss). ``prompt_cache_retention: "24h"`` keeps it 24 h. On GPT-5.6 and
later ``prompt_cache_options.ttl`` ("30m" or "12h") sets it explicitly and wins over the retention.
Any other value is not documented and falls back to the rule before it. The simulator models the
same rule with code of its own (it may not import the analysis); a test holds the two together.
"""

from __future__ import annotations

from collections.abc import Mapping

IN_MEMORY_SECONDS = 300.0
RETENTION_SECONDS = {"in_memory": IN_MEMORY_SECONDS, "24h": 86400.0}
OPTION_TTL_SECONDS = {"30m": 1800.0, "12h": 43200.0}


def openai_ttl_seconds(policy: Mapping[str, object]) -> float:
    """Seconds an entry written by a request with these top-level fields stays readable."""
    retention = policy.get("prompt_cache_retention")
    seconds = RETENTION_SECONDS.get(retention, IN_MEMORY_SECONDS) if isinstance(retention, str) else IN_MEMORY_SECONDS
    options = policy.get("prompt_cache_options")
    ttl = options.get("ttl") if isinstance(options, Mapping) else None
    return OPTION_TTL_SECONDS.get(ttl, seconds) if isinstance(ttl, str) else seconds
