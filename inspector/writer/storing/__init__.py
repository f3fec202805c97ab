"""Storing in one thread of whatever process runs it: the daemon's in-process writer and the
writer child both store through ``CaptureWriter`` (docs/architecture.md, "The writer's rooms")."""
