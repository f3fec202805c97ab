"""The prompt-cache analysis: what the provider should read (``prediction``), what it learned
and remembers (``memory``), and the verdict against the reported read (``verdicts``)."""
