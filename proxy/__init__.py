"""ctxscope.proxy: the capture proxy. It forwards bytes unchanged, streams unbuffered, and hands
each finished exchange to a sink.

- ``server``: the daemon's aiohttp application (provider routes to the forwarder, the rest to
  extra routes); ``exchange``: the record handed to the store; ``ids``: time-ordered call ids.
- ``defence/``: what a client may hold (abuse limits, connection guards) and who may connect
  (the Host check against DNS rebinding).
- ``forward/``: the hot path: route a path to its upstream, pick the headers that cross, forward,
  relay the answer, record what happened, and the answers the proxy gives itself.
- ``redaction/``: credentials kept out of the store (headers, query, key fingerprints) and masked
  out of what is shown.
- ``wire/``: reading what was captured, off the hot path: which API a path speaks, SSE decoding,
  Content-Encoding, stream reassembly, usage normalisation.

See docs/architecture.md, "The proxy, the simulator and the shared vocabulary".
"""
