"""What runs in the daemon: the sink the proxy submits to, the hand-over, and the supervisor of
the writer child (docs/architecture.md, "The writer's rooms"). Imports the wire, never the
child's side nor the storing thread."""
