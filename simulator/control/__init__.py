"""Scripting a simulator over HTTP: who may (access, token), the client, the request log."""
