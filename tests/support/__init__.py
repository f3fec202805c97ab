"""Helpers shared by the tests: fixtures' building blocks, clients, a real `ctxscope serve`."""
