"""Stored calls as OpenTelemetry GenAI spans over OTLP/HTTP.

See docs/architecture.md, "Export to OpenTelemetry".
"""
