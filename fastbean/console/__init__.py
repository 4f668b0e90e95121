"""The web console (--console): pages that show the queue and act on it,
served by the node's own process on its own loop (aiohttp, jinja2).

Imported only with --console: a node without it loads neither library.
"""
from fastbean.console.app import Console

__all__ = ["Console"]
