"""seqkv: the Python side of the seqkv KV-cache store.

- `seqkv.Client` (seqkv/client.py): the server's Unix-socket protocol
  (RESP), standard library only, numpy when installed.
- `seqkv.connectors`: serving engines' storage interfaces on top of it
  (SGLang HiCache, vLLM's KV connector); each imports only what it needs.
"""
from .client import Client, Error

__all__ = ["Client", "Error"]
