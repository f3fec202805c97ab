"""Findings and the cache advisor: what wastes a session's context, and where its breakpoints should go."""
