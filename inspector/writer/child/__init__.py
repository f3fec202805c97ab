"""The writer child's side: ``entry`` (``python -m``), ``life`` (setting up and draining), ``loop``
(its state machine over the inbox) and ``deferred`` (its spool, fed to the writer once storing may
begin). Imports the wire and the storing thread, never the daemon's side."""
