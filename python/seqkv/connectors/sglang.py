"""seqkv as SGLang's HiCache storage backend (L3), loaded as a "dynamic" backend.

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "seqkv",
        "module_path": "seqkv.connectors.sglang", "class_name": "SeqkvHiCacheStorage",
        "interface_v1": 1, "socket": "/run/seqkv.sock"}'

SGLang's StorageBackendFactory imports `module_path`, takes `class_name` and
calls it as `SeqkvHiCacheStorage(storage_config, kwargs)`; the cache
controller then calls register_mem_pool_host(host_pool). With "interface_v1"
the controller moves pages with batch_get_v1/batch_set_v1 (host indices:
this class reads and writes the host pool itself); without it, with
batch_get/batch_set (flat pages that SGLang copies in and out of the pool).
Prefetch asks batch_exists (how many leading pages are stored) and then
gets that many; write-through calls batch_set(_v1) on the pages it backs up.

Matched against sgl-project/sglang python/sglang/srt/mem_cache/
hicache_storage.py (HiCacheStorage: get, batch_get, set, batch_set, exists,
batch_exists, batch_get_v1, batch_set_v1, clear, register_mem_pool_host),
storage/backend_factory.py (dynamic backends) and managers/cache_controller.py
(call order). The hybrid-model *_v2 methods are not implemented.

The store side: plain Redis string commands through redis-py over seqkv's
Unix socket (any Redis server works too). Each page is two keys, the way
LMCache's Redis connector names them:

    <scope><page hash>kv_bytes   the page, bytes exactly (set first)
    <scope><page hash>metadata   LMCache's RemoteMetadata: struct "iiiiiii" =
                                 byte length, memory format, dtype code, shape[4]

<scope> is extra_config "prefix" (default "sglang:"), the model name and,
unless the model is MLA (whose ranks hold the same page), the TP rank (and
the PP/CP rank when those are split): ranks of one model never read each
other's heads. A page exists when its metadata key does (as in LMCache).

Page layout. When the host pool is SGLang's MHATokenToKVPoolHost or
MLATokenToKVPoolHost, kv_bytes holds the page in LMCache's layout, so the
server can compress it knowing the shape without knowing the model:
  MHA: KV_2LTD (format 1), shape [2, layers, page_size, kv_heads*head_dim]
  MLA: KV_MLA_FMT (format 6), shape [1, layers, page_size, kv_cache_dim]
A flat page of the host pool (get_data_page(i, flat=True)) is in the pool's
layout; this module supports these ("native" is the flat page's order):
  layer_first        MHA [2, L, T, H, D]   MLA [L, T, 1, D]    already LMCache's
  page_first         MHA [2, T, L, H, D]   MLA [T, L, 1, D]    transposed T<->L
  page_first_direct  MHA [2, L, T, H, D]   MLA [L, T, 1, D]    already LMCache's
  page_head          MHA [2, H, T, L, D]   (not MLA)           transposed H<->L
The transposes move whole elements (as unsigned ints of the dtype's size),
so get returns the bytes set was given, bit for bit. Any other pool or
layout: kv_bytes are the flat page as given, metadata format BINARY (4),
dtype uint8 (6), shape [length, 0, 0, 0], and no size check.

The dtype code is LMCache's (float16 2, bfloat16 3, float32 4, uint8 6,
float8_e4m3fn 7, float8_e5m2 8), from the pool's dtype. SGLang stores fp8
KV as uint8: set extra_config "kv_dtype" (e.g. "float8_e4m3fn") to say so.

extra_config keys read here (the others are SGLang's):
  socket           the server's Unix socket (or $SEQKV_SOCKET); required
  auth, tenant     AUTH [tenant] token, for a server with tenant tokens
  prefix           key prefix, default "sglang:"
  kv_dtype         the KV dtype's name when the pool's dtype does not say it
  ttl_s            seconds the pages live (SET EX); default: no expiry
  timeout_s        socket timeout, default 10
  max_batch_bytes  page bytes per round trip (MSET/MGET), default 64 MiB

Errors: a server that cannot be reached or answers an error is a miss
(exists False, get None, set False, logged), as SGLang expects of a cache.
A page or target of the wrong size for the registered pool raises
ValueError: that is a configuration mistake, not a cache miss.

Neither sglang nor torch is imported. When SGLang has loaded its
hicache_storage module (its factory has, before it loads this one) the
class derives from its HiCacheStorage, as the factory's issubclass check
requires; otherwise from object. Pages may be torch tensors (CPU), numpy
arrays, bytes, or objects with .numpy().
"""
import logging
import os
import struct
import sys

import numpy as np

__all__ = ["SeqkvHiCacheStorage", "PageLayout", "DTYPE_CODES"]

logger = logging.getLogger(__name__)

# LMCache's lmcache/v1/protocol.py DTYPE_TO_INT, by dtype name. torch.half is
# torch.float16, so LMCache writes 2 for it (1 is only ever read back).
DTYPE_CODES = {"float16": 2, "half": 2, "bfloat16": 3, "float32": 4, "float": 4,
               "float64": 5, "double": 5, "uint8": 6, "float8_e4m3fn": 7,
               "float8_e5m2": 8}
_ITEMSIZE = {"float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4,
             "float64": 8, "double": 8, "uint8": 1, "float8_e4m3fn": 1,
             "float8_e5m2": 1}
# LMCache's MemoryFormat values
FMT_KV_2LTD, FMT_BINARY, FMT_KV_MLA = 1, 4, 6

_META = struct.Struct("<iiiiiii")   # RemoteMetadata, native int32 on x86/ARM
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _sglang_base():
    mod = sys.modules.get("sglang.srt.mem_cache.hicache_storage")
    return getattr(mod, "HiCacheStorage", object) if mod is not None else object


def _dtype_name(dt):
    """'bfloat16' for torch.bfloat16, numpy float16, or the string itself."""
    if isinstance(dt, str):
        return dt.replace("torch.", "")
    s = str(dt)
    if s.startswith("torch."):
        return s[len("torch."):]
    try:
        return np.dtype(dt).name
    except TypeError:
        return s


def _torch_of(x):
    """The torch module when x is a torch tensor (torch is then loaded)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else None


def page_u8(value):
    """The bytes of a page as a flat uint8 numpy array (a view when it can)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(value, dtype=np.uint8)
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value).reshape(-1).view(np.uint8)
    torch = _torch_of(value)
    if torch is not None:
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        return t.contiguous().view(-1).view(torch.uint8).numpy()
    if hasattr(value, "numpy"):
        return page_u8(value.numpy())
    raise TypeError("a page must be bytes, a numpy array or a CPU tensor, not %s"
                    % type(value).__name__)


def writable_u8(target):
    """A flat uint8 numpy view of a caller's buffer, to fill in place."""
    if isinstance(target, np.ndarray):
        if not (target.flags.c_contiguous and target.flags.writeable):
            raise ValueError("target buffer must be a writable C-contiguous array")
        return target.reshape(-1).view(np.uint8)
    if isinstance(target, (bytearray, memoryview)):
        a = np.frombuffer(target, dtype=np.uint8)
        if not a.flags.writeable:
            raise ValueError("target buffer is read-only")
        return a
    torch = _torch_of(target)
    if torch is not None:
        if target.device.type != "cpu" or not target.is_contiguous():
            raise ValueError("target tensor must be a contiguous CPU tensor")
        return target.view(-1).view(torch.uint8).numpy()
    raise TypeError("target must be a numpy array, bytearray or CPU tensor, not %s"
                    % type(target).__name__)


class PageLayout:
    """One host page: its flat order in SGLang's pool ("native") and how it
    maps to LMCache's 4-d layout ("canonical")."""

    MHA_NATIVE = {  # native axes, named; canonical is (2, L, T, H, D)
        "layer_first": "2LTHD", "page_first": "2TLHD",
        "page_first_direct": "2LTHD", "page_head": "2HTLD"}
    MLA_NATIVE = {"layer_first": "LTD", "page_first": "TLD",
                  "page_first_direct": "LTD"}

    def __init__(self, kind, layout, layers, page_size, dtype_name, heads=1,
                 head_dim=0):
        if dtype_name not in DTYPE_CODES:
            raise ValueError("unknown KV dtype %r: set extra_config kv_dtype to one of %s"
                             % (dtype_name, ", ".join(sorted(DTYPE_CODES))))
        sizes = {"2": 2, "L": layers, "T": page_size, "H": heads, "D": head_dim}
        table = self.MHA_NATIVE if kind == "mha" else self.MLA_NATIVE
        if layout not in table:
            raise ValueError("%s layout %r has no LMCache shape here (supported: %s)"
                             % (kind.upper(), layout, ", ".join(table)))
        native = table[layout]
        canonical = "2LTHD" if kind == "mha" else "LTD"
        self.kind, self.layout, self.page_size = kind, layout, page_size
        self.elem = _UINT[_ITEMSIZE[dtype_name]]
        self.native_shape = tuple(sizes[a] for a in native)
        self.perm = tuple(native.index(a) for a in canonical)
        self.inv_perm = tuple(canonical.index(a) for a in native)
        self.canonical_shape = tuple(sizes[a] for a in canonical)
        self.identity = self.perm == tuple(range(len(native)))
        self.page_bytes = int(np.prod(self.native_shape)) * _ITEMSIZE[dtype_name]
        if kind == "mha":
            self.fmt, shape = FMT_KV_2LTD, (2, layers, page_size, heads * head_dim)
        else:
            self.fmt, shape = FMT_KV_MLA, (1, layers, page_size, head_dim)
        self.dtype_code = DTYPE_CODES[dtype_name]
        self.meta = _META.pack(self.page_bytes, self.fmt, self.dtype_code, *shape)

    @classmethod
    def of_pool(cls, pool, kv_dtype=None):
        """The layout of an SGLang host pool, or None when it is not an MHA or
        MLA pool of a layout above."""
        dtype = kv_dtype or _dtype_name(getattr(pool, "dtype", ""))
        common = (getattr(pool, "layout", None), getattr(pool, "layer_num", 0),
                  getattr(pool, "page_size", 0), dtype)
        if hasattr(pool, "head_num") and hasattr(pool, "head_dim"):
            return cls("mha", *common, heads=pool.head_num, head_dim=pool.head_dim)
        if hasattr(pool, "kv_cache_dim"):
            return cls("mla", *common, head_dim=pool.kv_cache_dim)
        return None

    def check(self, u8, what):
        if u8.size != self.page_bytes:
            raise ValueError("%s has %d bytes; a %s %s page of this pool has %d"
                             % (what, u8.size, self.kind.upper(), self.layout,
                                self.page_bytes))

    def to_store(self, u8):
        """A flat host page (uint8) -> the bytes of its LMCache layout."""
        if self.identity:
            return u8.tobytes()
        a = u8.view(self.elem).reshape(self.native_shape).transpose(self.perm)
        return np.ascontiguousarray(a).tobytes()

    def from_store(self, data):
        """Stored bytes -> the flat host page (uint8), the inverse of to_store."""
        a = np.frombuffer(data, dtype=self.elem)
        if not self.identity:
            a = np.ascontiguousarray(a.reshape(self.canonical_shape)
                                     .transpose(self.inv_perm))
        return a.reshape(-1).view(np.uint8)


def _glob_escape(s):
    return "".join("\\" + c if c in "*?[]\\" else c for c in s)


class SeqkvHiCacheStorage(_sglang_base()):
    """SGLang HiCacheStorage over a seqkv (or Redis) server; see the module
    docstring for keys, layouts and options."""

    def __init__(self, storage_config, kwargs=None):
        try:
            import redis
        except ImportError as e:
            raise ImportError("seqkv.connectors.sglang needs redis-py "
                              "(pip install redis; Debian: python3-redis)") from e
        cfg = dict(getattr(storage_config, "extra_config", None) or {})
        sock = cfg.get("socket") or os.environ.get("SEQKV_SOCKET")
        if not sock:
            raise ValueError("seqkv HiCache backend: extra_config needs \"socket\", "
                             "the seqkv server's Unix socket path (or set SEQKV_SOCKET)")
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        self.kv_dtype = cfg.get("kv_dtype")
        self.ttl_s = int(cfg["ttl_s"]) if cfg.get("ttl_s") else None
        self.max_batch_bytes = int(cfg.get("max_batch_bytes", 64 << 20))
        self.scope = self._scope(storage_config, cfg.get("prefix", "sglang:"))
        self.r = redis.Redis(unix_socket_path=sock, password=cfg.get("auth"),
                             username=cfg.get("tenant"),
                             socket_timeout=float(cfg.get("timeout_s", 10)))
        self.redis_error = redis.RedisError
        self.mem_pool_host = None
        self.page = None   # PageLayout once a known pool is registered
        self.counters = dict(pages_set=0, pages_skipped=0, pages_hit=0, pages_missed=0,
                             errors=0)
        pool = (kwargs or {}).get("mem_pool_host")
        if pool is not None:
            self.register_mem_pool_host(pool)

    def _scope(self, sc, prefix):
        g = lambda name, default: getattr(sc, name, default)  # noqa: E731
        model = g("model_name", None)
        scope = prefix + (model + "/" if model else "")
        if not self.is_mla:
            scope += "tp%d-%d/" % (g("tp_rank", 0), g("tp_size", 1))
        if g("pp_size", 1) > 1:
            scope += "pp%d-%d/" % (g("pp_rank", 0), g("pp_size", 1))
        if g("attn_cp_size", 1) > 1:
            scope += "cp%d-%d/" % (g("attn_cp_rank", 0), g("attn_cp_size", 1))
        return scope

    # --- keys ---------------------------------------------------------------

    def kv_key(self, key):
        return self.scope + key + "kv_bytes"

    def meta_key(self, key):
        return self.scope + key + "metadata"

    # --- SGLang's interface --------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host
        try:
            self.page = PageLayout.of_pool(mem_pool_host, self.kv_dtype)
        except ValueError as e:
            logger.warning("seqkv: %s; pages are stored as raw bytes", e)
            self.page = None
            return
        if self.page is None:
            logger.info("seqkv: host pool %s has no known page layout; pages are "
                        "stored as raw bytes", type(mem_pool_host).__name__)

    def exists(self, key) -> bool:
        try:
            return bool(self.r.exists(self.meta_key(key)))
        except self.redis_error as e:
            self._failed("exists", e)
            return False

    def batch_exists(self, keys, extra_info=None) -> int:
        """How many of keys, from the first, are stored (one round trip)."""
        flags = self._exists_flags(keys)
        return flags.index(False) if False in flags else len(flags)

    def get(self, key, target_location=None, target_sizes=None):
        return self.batch_get([key], None if target_location is None
                              else [target_location])[0]

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Each key's page in host order: written into target_locations[i]
        (and that returned) when given, else a new uint8 array; None if absent."""
        if target_locations is not None and len(target_locations) != len(keys):
            raise ValueError("batch_get: %d keys but %d target locations"
                             % (len(keys), len(target_locations)))
        targets = [None if t is None else writable_u8(t)
                   for t in (target_locations or [None] * len(keys))]
        if self.page is not None:
            for i, t in enumerate(targets):
                if t is not None:
                    self.page.check(t, "target location %d" % i)
        out = []
        for i, data in enumerate(self._fetch(keys)):
            if data is None:
                out.append(None)
                continue
            page = self.page.from_store(data) if self.page else np.frombuffer(data, np.uint8)
            if targets[i] is None:
                out.append(page.copy() if not page.flags.writeable else page)
            else:
                if page.size != targets[i].size:
                    logger.warning("seqkv: page %s has %d bytes, target %d; a miss",
                                   keys[i], page.size, targets[i].size)
                    out.append(None)
                    continue
                targets[i][:] = page
                out.append(target_locations[i])
        return out

    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        """Store flat host pages; pages already stored are skipped. True when
        every page is stored."""
        if values is None or len(values) != len(keys):
            raise ValueError("batch_set: %d keys but %s values"
                             % (len(keys), "no" if values is None else len(values)))
        return all(self._store(keys, [page_u8(v) for v in values]))

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Read pages straight into the registered host pool at host_indices
        (page_size indices per key). One bool per key."""
        pool, ps = self._pool_and_page_size(keys, host_indices)
        out, dummy = [], None
        for i, data in enumerate(self._fetch(keys)):
            if data is None:
                out.append(False)
                continue
            page = self.page.from_store(data) if self.page else np.frombuffer(data, np.uint8)
            if dummy is None:
                dummy = pool.get_dummy_flat_data_page()
                dummy_u8 = writable_u8(dummy)
            if page.size != dummy_u8.size:
                logger.warning("seqkv: page %s has %d bytes, host pages %d; a miss",
                               keys[i], page.size, dummy_u8.size)
                out.append(False)
                continue
            dummy_u8[:] = page
            pool.set_from_flat_data_page(int(host_indices[i * ps]), dummy)
            out.append(True)
        return out

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Store the host pool's pages at host_indices. One bool per key."""
        pool, ps = self._pool_and_page_size(keys, host_indices)
        present = self._exists_flags(keys)
        absent = [i for i, p in enumerate(present) if not p]
        pages = [page_u8(pool.get_data_page(int(host_indices[i * ps]), flat=True))
                 for i in absent]
        stored = self._store([keys[i] for i in absent], pages, checked_absent=True)
        self.counters["pages_skipped"] += len(keys) - len(absent)
        out = [True] * len(keys)
        for i, ok in zip(absent, stored):
            out[i] = ok
        return out

    def clear(self) -> bool:
        """Delete this scope's pages (this model and rank), not the server's."""
        try:
            batch = []
            for k in self.r.scan_iter(match=_glob_escape(self.scope) + "*", count=1000):
                batch.append(k)
                if len(batch) >= 1000:
                    self.r.unlink(*batch)
                    batch = []
            if batch:
                self.r.unlink(*batch)
            return True
        except self.redis_error as e:
            self._failed("clear", e)
            return False

    def close(self):
        self.r.close()

    # --- the store ----------------------------------------------------------

    def _failed(self, what, e):
        self.counters["errors"] += 1
        logger.warning("seqkv %s failed: %s", what, e)

    def _pool_and_page_size(self, keys, host_indices):
        pool = self.mem_pool_host
        if pool is None:
            raise ValueError("batch_*_v1 needs register_mem_pool_host first")
        ps = int(pool.page_size)
        if len(host_indices) != len(keys) * ps:
            raise ValueError("%d keys need %d host indices (page_size %d), got %d"
                             % (len(keys), len(keys) * ps, ps, len(host_indices)))
        return pool, ps

    def _exists_flags(self, keys):
        if not keys:
            return []
        try:
            pipe = self.r.pipeline(transaction=False)
            for k in keys:
                pipe.exists(self.meta_key(k))
            return [bool(n) for n in pipe.execute()]
        except self.redis_error as e:
            self._failed("exists", e)
            return [False] * len(keys)

    def _chunks(self, n, nbytes):
        """Index ranges of at most max_batch_bytes (one page at least)."""
        per = max(1, self.max_batch_bytes // max(1, nbytes))
        return [range(i, min(n, i + per)) for i in range(0, n, per)]

    def _store(self, keys, pages, checked_absent=False):
        """Set the pages' kv_bytes then their metadata; skip stored ones."""
        if self.page is not None:
            for k, p in zip(keys, pages):
                self.page.check(p, "page " + k)
        present = [False] * len(keys) if checked_absent else self._exists_flags(keys)
        out = [True] * len(keys)
        absent = [i for i, p in enumerate(present) if not p]
        self.counters["pages_skipped"] += len(keys) - len(absent)
        if not absent:
            return out
        for rng in self._chunks(len(absent), max(p.size for p in pages)):
            idx = [absent[j] for j in rng]
            values = {self.kv_key(keys[i]): self._encode(pages[i]) for i in idx}
            metas = {self.meta_key(keys[i]): self._meta(pages[i]) for i in idx}
            try:
                pipe = self.r.pipeline(transaction=False)
                self._set_many(pipe, values)     # kv_bytes first, then metadata:
                self._set_many(pipe, metas)      # metadata present => kv_bytes set
                pipe.execute()
                self.counters["pages_set"] += len(idx)
            except self.redis_error as e:
                self._failed("set", e)
                for i in idx:
                    out[i] = False
        return out

    def _set_many(self, pipe, mapping):
        if self.ttl_s is None:
            pipe.mset(mapping)
        else:
            for k, v in mapping.items():
                pipe.set(k, v, ex=self.ttl_s)

    def _encode(self, u8):
        return self.page.to_store(u8) if self.page else u8.tobytes()

    def _meta(self, u8):
        if self.page is not None:
            return self.page.meta
        return _META.pack(u8.size, FMT_BINARY, DTYPE_CODES["uint8"], u8.size, 0, 0, 0)

    def _fetch(self, keys):
        """Each key's stored bytes, or None when absent or not what this pool's
        pages are (length or metadata differ)."""
        per_page = self.page.page_bytes if self.page else 1 << 20
        out = []
        for rng in self._chunks(len(keys), per_page):
            ks = [keys[i] for i in rng]
            try:
                pipe = self.r.pipeline(transaction=False)
                pipe.mget([self.kv_key(k) for k in ks])
                pipe.mget([self.meta_key(k) for k in ks])
                values, metas = pipe.execute()
            except self.redis_error as e:
                self._failed("get", e)
                values = metas = [None] * len(ks)
            out += [self._valid(k, v, m) for k, v, m in zip(ks, values, metas)]
        hits = sum(v is not None for v in out)
        self.counters["pages_hit"] += hits
        self.counters["pages_missed"] += len(out) - hits
        return out

    def _valid(self, key, value, meta):
        if value is None or meta is None:
            if meta is not None:
                logger.warning("seqkv: page %s has metadata but no kv_bytes", key)
            return None
        if len(meta) != _META.size or _META.unpack(meta)[0] != len(value):
            logger.warning("seqkv: page %s: metadata does not describe its %d bytes",
                           key, len(value))
            return None
        if self.page is not None and meta != self.page.meta:
            logger.warning("seqkv: page %s was stored with another shape or dtype "
                           "(%s, expected %s); a miss", key, _META.unpack(meta),
                           _META.unpack(self.page.meta))
            return None
        return value
