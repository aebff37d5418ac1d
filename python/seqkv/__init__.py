"""seqkv: the Python side of the seqkv KV-cache store.

- `seqkv.Client` (seqkv/client.py): the server's protocol (RESP) on its
  Unix socket or loopback TCP port, standard library only, numpy when
  installed.
- `seqkv.connectors`: serving engines' storage interfaces on top of it
  (SGLang HiCache, vLLM's KV connector, a vLLM offloading tier); each
  imports only what it needs.
"""
from .client import Client, Error

# include/seqkv.h's SEQKV_VERSION_MAJOR.MINOR.PATCH (tests/packaging_test.py
# checks); the wheel's version (python/_build/seqkv_build.py reads it here)
__version__ = "0.2.0"

__all__ = ["Client", "Error"]
