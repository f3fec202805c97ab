"""The capture store: the only code that reads or writes SQL.

See docs/architecture.md, "The inspector: store, writer and analyses".
"""
