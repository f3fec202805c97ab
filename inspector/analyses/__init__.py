"""The analyses: pure functions over parsed prompts and responses (no SQL, no store)."""
