"""todowrite: the model's todo list, kept as session state (``todos``) that reminders and compaction read.

Each call replaces the whole list. ``todos_written`` records the turn and step of the last write so
cadence reminders can count the iterations since.
"""

from __future__ import annotations

from typing import Any

from ..core.state import open_todos, render_todos
from ..core.tools import Tool, ToolContext, ToolError

STATUSES = ("pending", "in_progress", "completed", "cancelled")
MAX_ITEMS = 100


async def todowrite(args: dict[str, Any], ctx: ToolContext) -> str:
    items = args["todos"]
    if len(items) > MAX_ITEMS:
        raise ToolError(f"at most {MAX_ITEMS} todos")
    todos = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise ToolError(f"todo {i} must be an object with content and status")
        content, status = item.get("content"), item.get("status", "pending")
        if not isinstance(content, str) or not content.strip():
            raise ToolError(f"todo {i} needs a non-empty content")
        if status not in STATUSES:
            raise ToolError(f"todo {i}: status must be one of {', '.join(STATUSES)}")
        todos.append({"id": str(item.get("id") or i), "content": content.strip(), "status": status})
    ctx.session.state.set("todos", todos)
    ctx.session.state.set("todos_written", {"turn": ctx.turn, "step": ctx.step})
    left = len(open_todos(todos))
    return f"todo list updated ({left} open of {len(todos)}):\n{render_todos(todos)}"


TODOWRITE = Tool(
    "todowrite",
    "Replace your todo list for this session. Use it for multi-step work: one item in_progress at a time, "
    "mark items completed as soon as they are done.",
    {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "content": {"type": "string"},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["content", "status"],
                },
            }
        },
        "required": ["todos"],
    },
    todowrite,
)
