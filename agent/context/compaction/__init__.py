"""Compaction: archive old tool results or checkpoint the history into a summary, automatically or on /compact."""
