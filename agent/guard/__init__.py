"""The runaway guard: signals of a stuck agent, a policy, and a reminder sent as a steering message."""
