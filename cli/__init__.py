"""ctxscope: an LLM context inspector and capture proxy.

This directory is installed as the root package ``ctxscope``; the sibling folders
``proxy/``, ``inspector/``, ``agent/``, ``web/`` and ``simulator/`` are installed as
``ctxscope.proxy`` and so on (see ``[tool.setuptools.package-dir]`` in pyproject.toml),
so their generic names never clash with other installed distributions.
"""

__version__ = "0.1.0"
