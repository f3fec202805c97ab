"""The source-provenance tests' material: a notes file, a web page, quotes of them, and tools
that return canned text."""

from __future__ import annotations

from ctxscope.agent.core.spi import Extension
from ctxscope.agent.core.tools import Tool, ToolOutput

NOTES = """# Deployment notes
The release job builds the wheel, signs it with the offline key kept on the build host, and uploads
it to the internal index only after the smoke tests pass on all three supported Python versions.
Rollbacks are done by yanking the release and re-pinning the previous version in the lock file.
"""
QUOTE = (
    "The release job builds the wheel, signs it with the offline key kept on the build host, and uploads it "
    "to the internal index."
)
PAGE = (
    "<html><head><title>Cache tiers</title></head><body>The edge cache keeps hot objects for ninety seconds "
    "and then revalidates them against the origin with a conditional request before serving again.</body></html>"
)
PAGE_QUOTE = (
    "The edge cache keeps hot objects for ninety seconds and then revalidates them against the origin "
    "with a conditional request."
)


def fake_tools(
    page: str = PAGE,
    mcp_text: str = "Ticket 42: the nightly export fails when the bucket policy "
    "denies list access to the service account used by the exporter job.",
) -> Extension:
    """A fetch tool and an MCP-style tool, without network: they return canned text."""

    async def fetch(args, ctx):
        return ToolOutput(page if args.get("url") != "https://big.example/" else page * 800)

    async def lookup(args, ctx):
        return ToolOutput(mcp_text, details={"uri": f"tickets://{args.get('id', '42')}", "title": "Ticket 42"})

    schema = {"type": "object", "properties": {"url": {"type": "string"}, "id": {"type": "string"}}}

    def init(api):
        api.register_tool(Tool("fetch", "fetch a page", schema, fetch))
        api.register_tool(Tool("mcp__tickets__lookup", "look up a ticket", schema, lookup))

    return Extension("fake-web", init)
