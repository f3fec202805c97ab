"""The capture store: the only code that reads or writes SQL (docs/architecture.md, "The inspector: store, writer and analyses")."""
