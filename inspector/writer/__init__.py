"""Storing captured exchanges off the proxy's loop: the writer thread, its low-priority child process
and the spool between them."""
