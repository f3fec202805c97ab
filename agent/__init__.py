"""ctxscope.agent: a small coding agent whose every model call is visible in the ctxscope inspector.

    from ctxscope.agent.host.runtime import AgentRuntime
    from ctxscope.agent.providers.catalog import make_client, resolve
    rt = AgentRuntime(make_client(resolve("sim")), extensions=[*default_extensions(), my_extension])
    result = await rt.create_session().run("fix the failing test")

The folders say the design (docs/architecture.md, "The agent's packages"): ``core/`` is the loop
and the extension SPI; ``providers/``, ``tools/``, ``context/``, ``reminders/``, ``guard/``,
``provenance/`` and ``recovery/`` are features that plug in through the SPI; ``host/`` composes
them into a runtime with sessions on disk.
"""
