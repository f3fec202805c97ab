"""ctxscope.simulator: a deterministic, scriptable stand-in for the Anthropic and OpenAI APIs.

Entry points: `app.create_app`, `app.start_simulator`, `app.STATE_KEY` / `state.SimulatorState`,
`background.simulator_in_thread` (tests with sync SDK clients); step schema in `script`.
"""
