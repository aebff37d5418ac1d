"""Moving KV between seqkv's layout and a paged KV cache (numpy).

A paged cache holds one layer as [2, num_blocks, block_size, kv_heads,
head_dim] (vLLM's FlashAttention layout: K then V, each a pool of blocks
of block_size token slots); a request's token t lives in block
block_ids[t // block_size], slot t % block_size. seqkv moves one layer as
[2, n, kv_heads, head_dim] (its store layout [layer][k, v][token][kv_head]
[head_dim], one layer of it). Both are elements of the profile's dtype;
the moves copy bits and never convert (bf16 travels as uint16 patterns).

numpy is imported on first use, with an error that says what is missing.
"""

_np = None


def numpy():
    """The numpy module, imported now; ImportError saying why it is needed."""
    global _np
    if _np is None:
        try:
            import numpy as np
        except ImportError as e:  # pragma: no cover - numpy is there in the tests
            raise ImportError(
                "seqkv.connectors.vllm moves KV between seqkv's layout and vLLM's "
                "paged cache with numpy, which is not installed (pip install numpy; "
                "Debian: python3-numpy)") from e
        _np = np
    return _np


def check_layer(name, cache, block_size):
    """Raise TypeError/ValueError unless cache is a numpy paged layer
    [2, num_blocks, block_size, kv_heads, head_dim]; returns its shape."""
    np = numpy()
    if not isinstance(cache, np.ndarray):
        raise TypeError(
            "SeqkvConnector: the KV cache of %s is a %s.%s; this connector moves KV "
            "through numpy arrays [2, num_blocks, block_size, kv_heads, head_dim] "
            "(torch tensors are not supported)"
            % (name, type(cache).__module__, type(cache).__name__))
    if cache.ndim != 5 or cache.shape[0] != 2:
        raise ValueError(
            "SeqkvConnector: the KV cache of %s has shape %s; expected "
            "[2, num_blocks, block_size, kv_heads, head_dim] (FlashAttention's layout)"
            % (name, tuple(cache.shape)))
    if cache.shape[2] != block_size:
        raise ValueError(
            "SeqkvConnector: the KV cache of %s has blocks of %d tokens (shape %s); "
            "the connector's block_size is %d"
            % (name, cache.shape[2], tuple(cache.shape), block_size))
    return tuple(cache.shape)


def _blocks(cache, block_ids, what):
    ids = list(block_ids)
    nb = cache.shape[1]
    bad = [b for b in ids if not 0 <= b < nb]
    if bad:
        raise ValueError("SeqkvConnector: %s names block ids %s outside the cache's "
                         "%d blocks" % (what, bad[:8], nb))
    return ids


def gather(cache, block_ids, n, dtype):
    """The first n tokens of a request whose blocks are block_ids, as a new
    array [2, n, kv_heads, head_dim] of dtype (the cache's bits)."""
    bs = cache.shape[2]
    need = -(-n // bs)
    if len(block_ids) < need:
        raise ValueError("SeqkvConnector: %d tokens need %d blocks, the request has %d"
                         % (n, need, len(block_ids)))
    ids = _blocks(cache, block_ids[:need], "a save")
    src = cache.view(dtype)[:, ids]                       # [2, need, bs, H, D], a copy
    return src.reshape(2, need * bs, *cache.shape[3:])[:, :n]


def scatter(cache, block_ids, layer, start, end, dtype):
    """Write tokens [start, end) of layer ([2, >= end, kv_heads, head_dim],
    token 0 first) into the request's blocks; start and end are multiples
    of the block size, so whole blocks are written and no other slot."""
    bs = cache.shape[2]
    if start % bs or end % bs:
        raise ValueError("SeqkvConnector: a load of tokens [%d, %d) is not whole blocks "
                         "of %d" % (start, end, bs))
    if len(block_ids) < end // bs:
        raise ValueError("SeqkvConnector: tokens up to %d need %d blocks, the request "
                         "has %d" % (end, end // bs, len(block_ids)))
    ids = _blocks(cache, block_ids[start // bs:end // bs], "a load")
    src = layer[:, start:end].reshape(2, len(ids), bs, *cache.shape[3:])
    cache.view(dtype)[:, ids] = src


def layer_from_bytes(data, dtype, kv_heads, head_dim, n):
    """One layer of a KV.GET LAYERS reply as [2, n, kv_heads, head_dim]."""
    np = numpy()
    want = 2 * n * kv_heads * head_dim * dtype.itemsize
    if len(data) != want:
        raise ValueError("SeqkvConnector: a layer of %d tokens should be %d bytes, the "
                         "server sent %d" % (n, want, len(data)))
    return np.frombuffer(data, dtype=dtype).reshape(2, n, kv_heads, head_dim)
