"""The three wire formats the simulator speaks, the interface they share, and their SSE framing."""
