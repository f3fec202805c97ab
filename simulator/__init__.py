"""ctxscope.simulator: a deterministic, scriptable stand-in for the Anthropic and OpenAI APIs.

An independent implementation of the wire formats: it imports nothing from the proxy or the
inspector, only ``ctxscope.vocab`` (docs/architecture.md, "The simulator is a second implementation").

- ``app``: the aiohttp application (provider routes plus /_sim control endpoints), ``state``: one
  simulator's state, ``exchange``: answering one model request, ``body``: reading a body within
  limits; ``background``, ``child`` and ``process``: where it runs (a thread, a child process,
  the parent's handle on it).
- ``model/``: what the simulated model is: script steps, the prompt linearised into blocks, the
  prompt-cache model, provider-shaped ids.
- ``wire/``: the four wire formats (Anthropic Messages, OpenAI Chat Completions and Responses,
  Gemini generateContent), the interface they implement (``turn``) and their own SSE framing.
- ``control/``: scripting it over HTTP: who may (access, token), the client, the request log and
  its redaction.

Entry points: ``app.create_app`` / ``app.make_runner`` / ``app.start_simulator``, ``app.STATE_KEY`` /
``state.SimulatorState`` (in-process tests), ``background.simulator_in_thread`` (tests with sync SDK
clients), ``process.SimulatorProcess`` (in a child process, as ``ctxscope serve`` runs it) and
``control.client.SimulatorControl`` (scripting one over HTTP with its token); step schema in
``model.script``.
"""
