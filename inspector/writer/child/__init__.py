"""The writer child's side: ``entry`` (``python -m``), ``life`` (the child's loop) and ``deferred``
(its spool, fed to the writer once storing may begin)."""
