"""What ctxscope's figures are, one sentence each: the CLI's legends and the page's tooltips read
them here, so both say the same (the definitions themselves: docs/architecture.md, "Cache verdicts").

Plain strings with no imports: the web daemon serves them with the vocabulary before it loads
anything of the store side.
"""

from __future__ import annotations

# How a lost dollar is priced (``inspector/analyses/cache/loss.py`` computes it).
LOSS_PRICING = (
    "lost tokens are the cached prefix this call could not read; dollars price them at what was paid "
    "(cache write where re-written, else input) minus the cache-read rate"
)
# What the usage table's "prompt" row and the CLI's PROMPT column are.
PROMPT_TOKENS = (
    "the whole prompt from the provider's report: its input count, plus the cache reads and writes "
    "Anthropic reports apart"
)
