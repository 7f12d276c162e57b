"""sandbox_ext's client for Python: request, approve, stream and wait for
runs of agents' code through the extension's SQL API (docs/clients.md)."""
from .client import Client
from .errors import Refused, SandboxError
from .models import Card, Chunk, Download, FileInfo, Result, Run

__all__ = ["Client", "SandboxError", "Refused", "Run", "Chunk", "Result", "Card", "FileInfo", "Download"]
