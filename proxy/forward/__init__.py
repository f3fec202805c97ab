"""The hot path: one request routed, forwarded and relayed byte for byte, and recorded as it goes.

It parses nothing (docs/architecture.md, "The hot path parses nothing").
"""
