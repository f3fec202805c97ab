"""ctxscope.simulator: a deterministic, scriptable stand-in for the Anthropic and OpenAI APIs.

Entry points: `app.create_app` / `app.make_runner` / `app.start_simulator`, `app.STATE_KEY` /
`state.SimulatorState` (in-process tests), `background.simulator_in_thread` (tests with sync SDK
clients), `process.SimulatorProcess` (in a child process, as `ctxscope serve` runs it) and
`control.SimulatorControl` (scripting one over HTTP with its token); step schema in `script`.
"""
