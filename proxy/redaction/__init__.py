"""Credentials kept out of what is stored (redact) and out of what is shown (mask)."""
