"""The words every part of ctxscope shares: the o200k tokenizer, API ids and the analyses' kinds.

A leaf: it imports nothing else of ours, so the proxy, the inspector, the agent, the simulator and
the web UI (through the API) all read the same spelling of each word from one place
(docs/architecture.md, "One spelling of each word").
"""
