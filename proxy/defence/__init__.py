"""The daemon's defences against its clients: abuse limits, connection guards, the Host check."""
