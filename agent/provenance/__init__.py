"""Source provenance: references for web and MCP results, host markers the model can cite, citation checks."""
