"""The host: the runtime, live sessions, the conversation API, sessions on disk and the built-in composition."""
