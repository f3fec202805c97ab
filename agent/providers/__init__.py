"""Model clients: the Anthropic and OpenAI wire formats over HTTP with retries, and a scripted model for tests."""
