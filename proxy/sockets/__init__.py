"""Transports other than one HTTP request per call: the Responses API over WebSocket."""
