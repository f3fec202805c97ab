"""The wire between the daemon and its writer child: the messages on their pipes, the spool
record format both write, and the large bodies sent as their new bytes (docs/architecture.md,
"The writer's rooms")."""
