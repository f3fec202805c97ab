"""``python -m ctxscope.simulator``: the child process the daemon runs its built-in simulator in
(see ``process.py``; ``ctxscope sim`` is the command for running one by hand)."""

from ctxscope.simulator.child import main

main()
