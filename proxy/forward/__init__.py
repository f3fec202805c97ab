"""The hot path: one request routed, forwarded and relayed byte for byte, and recorded as it goes."""
