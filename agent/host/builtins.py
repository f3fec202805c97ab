"""The composition of the built-in extensions: the default extension list and the host builtins.

Built-in features use the same door as third-party extensions: the core tools are an ordinary
configured extension (``core-tools``, can be disabled per session), and host builtins are
ordinary extensions that the registry loads last. Each factory in ``HOST_BUILTIN_FACTORIES``
receives the ``HostOptions`` so it can read settings once at creation. This module is the only
place that knows every feature: features never import it (their settings come from
``core.settings``), so the composition has no cycle.
"""

from __future__ import annotations

from collections.abc import Callable

from ..context.compaction.auto import create_context_management
from ..context.tool_output_budget import create_tool_output_budget
from ..core.settings import HostOptions
from ..core.spi import Extension
from ..guard.extension import create_runaway_guard
from ..provenance.extension import source_provenance_extension
from ..provenance.marker import split_host_marker
from ..recovery.empty_answer import terminal_response_recovery_extension
from ..reminders.extension import create_in_turn_reminders, create_system_reminders
from ..subagents.child import ChildHome
from ..subagents.extension import create_subagents
from ..tools.core_tools import core_tools_extension
from ..tools.fs import GREP, LS, READ
from ..tools.shell import BASH
from .session_report import create_session_report
from .session_store import SessionStore


def default_extensions() -> list[Extension]:
    """Core tools, empty-answer recovery and source provenance: mounted by default, each can be disabled per session."""
    return [core_tools_extension(), terminal_response_recovery_extension(), source_provenance_extension()]


HostBuiltinFactory = Callable[[HostOptions], Extension]


def _tool_output_budget(options: HostOptions) -> Extension:
    # a receipt keeps the host's source marker when the result goes to an artifact
    return create_tool_output_budget(options, split_marker=split_host_marker)


# Ordered: earlier builtins' handlers run before later ones (all after configured extensions).
# Context management's before_llm_call (compaction) belongs before the in-turn reminders, so
# reminders land on the compacted history (docs/architecture.md, "Built-in order"); the session
# report stays last so it records the request as sent.
def _subagents(options: HostOptions) -> Extension:
    # a child's session is a sub-session of its parent on disk (the session report bundles it); it
    # reads and runs commands, records its calls like any session, and cannot start children itself
    store = SessionStore(options.home)

    def new_child(parent_id: str, title: str) -> ChildHome:
        parent = store.get(parent_id)
        meta = store.create(
            workspace=parent.workspace,
            provider=parent.provider,
            model=parent.model,
            title=title,
            parent_session=parent_id,
        )
        return ChildHome(meta.id, store.dir(meta.id), store.history(meta.id))

    return create_subagents(
        options,
        new_child=new_child,
        tools=(READ, LS, GREP, BASH),
        builtins=lambda: [_tool_output_budget(options), create_session_report(options)],
    )


HOST_BUILTIN_FACTORIES: list[HostBuiltinFactory] = [
    create_context_management,
    create_system_reminders,
    create_in_turn_reminders,
    create_runaway_guard,
    _tool_output_budget,
    _subagents,
    create_session_report,
]


def default_host_builtins(options: HostOptions) -> list[Extension]:
    return [factory(options) for factory in HOST_BUILTIN_FACTORIES]
