"""Sub-agents: the ``task`` tool runs a child agent with its own context, tools and step budget."""
