"""What the demo session's effect markers point at, shared by the CLI and the browser demo tests."""

from __future__ import annotations

# A piece of the text each declared effect's marker points at in its request (the receipt, the summary,
# the reminder block ...), for the kinds whose marker must point at text in the request.
MARKER_TEXT = {
    "tool_output_externalized": "Tool output moved to a file",
    "tool_results_archived": "Older tool result moved to a file",
    "checkpoint": "Review the demo service",
    "reminder": "<agent-context>",
    "todo_reminder": "Your todo list has not changed",
    "guard_signal": "No such file",
    "guard_reminder": "Runaway guard",
    "empty_answer_retry": "your reply was empty",
}
