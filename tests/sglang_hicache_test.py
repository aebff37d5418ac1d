#!/usr/bin/python3
"""seqkv.connectors.sglang.SeqkvHiCacheStorage driven the way SGLang's HiCache
drives a storage backend, against a live server.

Usage: sglang_hicache_test.py SEQKV_BIN PYTHON_DIR [--redis]
  default: a `SEQKV_BIN serve` (tests/pyfixture.py's Server), through seqkv's
           Redis string commands (GET/SET/MGET/MSET/EXISTS/SCAN/UNLINK ...)
  --redis: Debian's redis-server on a Unix socket in a temporary directory;
           SEQKV_BIN then only computes the model's KV (seqkv model kv/sample)
Both run the same checks through the same code.

SGLang and torch cannot be installed here, so this reproduces what SGLang
does around the backend, from its sources (sgl-project/sglang, python/
sglang/srt/): the dynamic loading of mem_cache/storage/backend_factory.py
(import module_path, getattr class_name, class(storage_config, kwargs), then
register_mem_pool_host); page hashes of mem_cache/hicache_storage.py's
get_hash_str (sha256 chained over pages, token ids as u32 LE); the host
pool's flat pages of mem_cache/memory_pool_host.py's MHATokenToKVPoolHost
in its four layouts, as numpy; and managers/cache_controller.py's order of
calls: prefetch asks batch_exists, then batch_get (dummy flat pages copied
in with set_from_flat_data_page) or batch_get_v1 (host indices); backup
calls batch_set (get_data_page pages) or batch_set_v1.

KV: stories260K's (5 layers, 4 kv heads, head_dim 8, bf16 as uint16) from
`seqkv model kv` when the model is found ($SEQKV_MODEL, or $SEQKV_SOURCE_ROOT/
../shared/models), else deterministic synthetic KV of that shape (said so).
Runs with Debian's /usr/bin/python3 (python3-numpy, python3-redis)."""
import hashlib
import importlib
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import numpy as np

seqkv_bin, pydir = sys.argv[1], sys.argv[2]
use_redis = "--redis" in sys.argv[3:]
sys.path.insert(0, pydir)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis  # noqa: E402
from pyfixture import Server, model_kv, model_path, sample, stop_process  # noqa: E402

PS, L, H, D = 64, 5, 4, 8            # page size; stories260K's layers, kv heads, head dim
PAGE_BYTES = 2 * L * PS * H * D * 2  # one bf16 MHA page
LAYOUTS = ["layer_first", "page_first", "page_first_direct", "page_head"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


# --- servers ----------------------------------------------------------------

class RedisServer:
    """Debian's redis-server on a Unix socket in a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="seqkv-redis-")
        self.sock = os.path.join(self.dir, "redis.sock")
        self.log = open(os.path.join(self.dir, "redis.log"), "w")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.sock,
             "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
             "--dir", self.dir], stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(400):
            if self.proc.poll() is not None:
                raise SystemExit("FAIL: redis-server exited at start-up")
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.sock)
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.025)
        raise SystemExit("FAIL: redis-server did not answer")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop_process(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def probe(sock):
    """The server must speak the Redis string commands the backend uses."""
    r = redis.Redis(unix_socket_path=sock)
    try:
        r.set("probe:k", b"\x00\xff")
        ok = r.get("probe:k") == b"\x00\xff" and r.exists("probe:k", "probe:none") == 1
        r.delete("probe:k")
    except redis.ResponseError as e:
        raise SystemExit("FAIL: the server does not answer the Redis string commands "
                         "the backend needs (%s)" % e)
    finally:
        r.close()
    if not ok:
        raise SystemExit("FAIL: SET/GET/EXISTS probe gave wrong replies")


# --- KV and page hashes -----------------------------------------------------

def synthetic_kv(tokens, seed):
    """k, v [L, T, H, D] uint16 where token i's values depend only on
    tokens[0..i], like a causal model's (so shared prefixes agree)."""
    h = hashlib.sha256(b"%d" % seed)
    k = np.empty((L, len(tokens), H, D), np.uint16)
    v = np.empty_like(k)
    for i, t in enumerate(tokens):
        h.update(struct.pack("<I", t))
        rng = np.random.default_rng(np.frombuffer(h.digest()[:8], np.uint64)[0])
        k[:, i] = rng.integers(0, 1 << 16, (L, H, D), dtype=np.uint16)
        v[:, i] = rng.integers(0, 1 << 16, (L, H, D), dtype=np.uint16)
    return k, v


def prompts_and_kv():
    """Prompt A (4 pages), prompt B sharing A's first 2 pages; their KV."""
    if model_path():
        s = sample(seqkv_bin, 2, 4 * PS, seed=11)
        a, b = s[0], s[0][:2 * PS] + s[1][2 * PS:]
        (_, ka, va), (_, kb, vb) = model_kv(seqkv_bin, [a, b])
        return a, b, (ka, va), (kb, vb), "stories260K (seqkv model kv, bf16)"
    print("SKIP: real-model KV (stories260K not found; set SEQKV_MODEL or "
          "SEQKV_SOURCE_ROOT): using deterministic synthetic KV of its shape")
    rnd = random.Random(11)
    a = [1] + [rnd.randrange(512) for _ in range(4 * PS - 1)]
    b = a[:2 * PS] + [rnd.randrange(512) for _ in range(2 * PS)]
    return a, b, synthetic_kv(a, 0), synthetic_kv(b, 0), "synthetic"


def page_hashes(tokens, prior=None):
    """SGLang's get_hash_str chained over full pages."""
    out = []
    for i in range(0, len(tokens) // PS * PS, PS):
        h = hashlib.sha256()
        if prior:
            h.update(bytes.fromhex(prior))
        for t in tokens[i:i + PS]:
            h.update(int(t).to_bytes(4, byteorder="little", signed=False))
        prior = h.hexdigest()
        out.append(prior)
    return out


def kv_2ltd(k, v, page):
    """LMCache KV_2LTD bytes [2, L, T, H*D] of one page, from the model's arrays."""
    s = slice(page * PS, (page + 1) * PS)
    return np.stack([k[:, s], v[:, s]]).reshape(2, L, PS, H * D).tobytes()


# --- SGLang's host pools, in numpy ------------------------------------------

class FakeMHAHostPool:
    """MHATokenToKVPoolHost's buffer and page methods (kv_buffer dims per
    layout, get_data_page / get_dummy_flat_data_page / set_from_flat_data_page
    as in memory_pool_host.py); pages handed out in a shuffled order."""

    def __init__(self, layout, num_pages=12):
        self.layout, self.page_size, self.layer_num = layout, PS, L
        self.head_num, self.head_dim, self.dtype = H, D, "bfloat16"
        n = num_pages * PS
        dims = {"layer_first": (2, L, n, H, D), "page_first": (2, n, L, H, D),
                "page_first_direct": (2, num_pages, L, PS, H, D),
                "page_head": (2, num_pages, H, PS, L, D)}[layout]
        self.kv_buffer = np.zeros(dims, np.uint16)
        self.free = list(range(num_pages))
        random.Random(layout).shuffle(self.free)

    def alloc(self, n_tokens):
        pages, self.free = self.free[:n_tokens // PS], self.free[n_tokens // PS:]
        return np.concatenate([np.arange(p * PS, (p + 1) * PS) for p in pages])

    def _page(self, index):
        return slice(index // PS, index // PS + 1)

    def get_data_page(self, index, flat=True):
        if self.layout == "layer_first":
            page = self.kv_buffer[:, :, index:index + PS]
        elif self.layout == "page_first":
            page = self.kv_buffer[:, index:index + PS]
        else:
            page = self.kv_buffer[:, self._page(index)]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return np.zeros(2 * L * PS * H * D, np.uint16)

    def set_from_flat_data_page(self, index, data_page):
        shape = {"layer_first": (2, L, PS, H, D), "page_first": (2, PS, L, H, D),
                 "page_first_direct": (2, 1, L, PS, H, D),
                 "page_head": (2, 1, H, PS, L, D)}[self.layout]
        if self.layout == "layer_first":
            self.kv_buffer[:, :, index:index + PS] = data_page.reshape(shape)
        elif self.layout == "page_first":
            self.kv_buffer[:, index:index + PS] = data_page.reshape(shape)
        else:
            self.kv_buffer[:, self._page(index)] = data_page.reshape(shape)

    # what the device<->host copy kernels do: token t of k/v [L, T, H, D]
    def _token_view(self, idx):
        p, o = idx // PS, idx % PS
        if self.layout == "layer_first":
            return (slice(None), idx), (0, 1, 2, 3)        # [L, T, H, D]
        if self.layout == "page_first":
            return (idx,), (1, 0, 2, 3)                    # [T, L, H, D]
        if self.layout == "page_first_direct":
            return (p, slice(None), o), (1, 0, 2, 3)       # [T, L, H, D]
        return (p, slice(None), o), (1, 2, 0, 3)           # page_head: [T, H, L, D]

    def write_tokens(self, idx, k, v):
        sel, perm = self._token_view(idx)
        self.kv_buffer[0][sel] = k.transpose(perm)
        self.kv_buffer[1][sel] = v.transpose(perm)

    def read_tokens(self, idx):
        sel, perm = self._token_view(idx)
        inv = tuple(np.argsort(perm))
        return self.kv_buffer[0][sel].transpose(inv), self.kv_buffer[1][sel].transpose(inv)


class FakeMLAHostPool:
    """MLATokenToKVPoolHost, page_first layout: kv_buffer [size, L, 1, dim]."""

    def __init__(self, dim, num_pages=4):
        self.layout, self.page_size, self.layer_num = "page_first", PS, L
        self.kv_cache_dim, self.dtype = dim, "uint8"   # SGLang stores fp8 as uint8
        self.kv_buffer = np.zeros((num_pages * PS, L, 1, dim), np.uint8)

    def get_data_page(self, index, flat=True):
        page = self.kv_buffer[index:index + PS]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return np.zeros(L * PS * self.kv_cache_dim, np.uint8)

    def set_from_flat_data_page(self, index, data_page):
        self.kv_buffer[index:index + PS] = data_page.reshape(PS, L, 1, self.kv_cache_dim)


# --- the backend, loaded as SGLang's factory loads a "dynamic" one -----------

def storage_config(sock, tp_rank=0, tp_size=1, mla=False, layout="page_first", **extra):
    """HiCacheStorageConfig's fields, as cache_controller fills them."""
    return SimpleNamespace(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
        attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=False,
        is_page_first_layout=layout == "page_first", model_name="stories260K",
        dp_rank=0, dp_size=1, tp_lcm_size=None, should_split_heads=False,
        extra_config=dict({"backend_name": "seqkv",
                           "module_path": "seqkv.connectors.sglang",
                           "class_name": "SeqkvHiCacheStorage", "interface_v1": 1,
                           "socket": sock}, **extra))


def load_backend(config, pool):
    ec = config.extra_config
    cls = getattr(importlib.import_module(ec["module_path"]), ec["class_name"])
    backend = cls(config, {})
    backend.register_mem_pool_host(pool)
    return backend


def extra_info(prefix_keys=None):
    return SimpleNamespace(prefix_keys=prefix_keys, extra_info=None)


def stored(backend, key):
    r = backend.r
    return r.get(backend.kv_key(key)), r.get(backend.meta_key(key))


# --- the checks -------------------------------------------------------------

def write_through_and_prefetch(sock, layout, zero_copy, a, b, kva, kvb):
    """Prompt A written through; prompt B prefetches A's 2 shared pages, then
    its 2 new pages are written. As the cache controller calls the backend."""
    what = "%s %s" % (layout, "batch_*_v1" if zero_copy else "batch_get/set")
    pool = FakeMHAHostPool(layout)
    # the zero-copy runs also split batches: at most 2 pages a round trip
    extra = {"max_batch_bytes": 2 * PAGE_BYTES} if zero_copy else {}
    be = load_backend(storage_config(sock, layout=layout, **extra), pool)
    ha, hb = page_hashes(a), page_hashes(b)
    meta = struct.pack("<7i", PAGE_BYTES, 1, 3, 2, L, PS, H * D)

    def backup(hashes, idx, prefix_keys):
        if zero_copy:
            return all(be.batch_set_v1(hashes, idx, extra_info(prefix_keys)))
        pages = [pool.get_data_page(idx[i * PS]) for i in range(len(hashes))]
        return be.batch_set(hashes, pages)

    def prefetch(hashes, idx):
        if zero_copy:
            return be.batch_get_v1(hashes, idx, extra_info())
        got = be.batch_get(hashes, [pool.get_dummy_flat_data_page() for _ in hashes])
        for i, page in enumerate(got):
            if page is not None:
                pool.set_from_flat_data_page(idx[i * PS], page)
        return [page is not None for page in got]

    # prompt A: nothing stored yet, so no get; prefill, host copy, backup
    check(be.batch_exists(ha, extra_info()) == 0, what + ": A before write-through")
    idx_a = pool.alloc(4 * PS)
    pool.write_tokens(idx_a, *kva)
    check(backup(ha, idx_a, None), what + ": A's backup")
    check(be.batch_exists(ha, extra_info()) == 4, what + ": A's 4 pages exist")
    for p in range(4):
        value, m = stored(be, ha[p])
        check(value == kv_2ltd(*kva, p), what + ": A page %d stored as KV_2LTD" % p)
        check(m == meta, what + ": A page %d metadata %r" % (p, m and struct.unpack("<7i", m)))

    # prompt B: 2 leading pages hit; fetched into fresh host pages bit-exact
    check(be.batch_exists(hb, extra_info()) == 2, what + ": B hits A's 2 pages")
    idx_b = pool.alloc(2 * PS)
    check(prefetch(hb[:2], idx_b) == [True, True], what + ": B prefetch")
    k, v = pool.read_tokens(idx_b)
    check(np.array_equal(k, kva[0][:, :2 * PS]) and np.array_equal(v, kva[1][:, :2 * PS]),
          what + ": B's prefetched pages equal A's KV bit for bit")
    idx_new = pool.alloc(2 * PS)
    pool.write_tokens(idx_new, kvb[0][:, 2 * PS:], kvb[1][:, 2 * PS:])
    check(backup(hb[2:], idx_new, hb[:2]), what + ": B's new pages backed up")
    check(be.batch_exists(hb, extra_info()) == 4, what + ": B's 4 pages exist")
    check(stored(be, hb[3])[0] == kv_2ltd(*kvb, 3), what + ": B page 3 stored")

    # a page already stored is not sent again
    before = dict(be.counters)
    check(backup(ha[:1], idx_a[:PS], None), what + ": re-backup of a stored page")
    check(be.counters["pages_skipped"] == before["pages_skipped"] + 1
          and be.counters["pages_set"] == before["pages_set"],
          what + ": a stored page is skipped, not rewritten")

    check(be.clear() and be.batch_exists(ha + hb) == 0
          and not list(be.r.scan_iter(match=be.scope + "*")), what + ": clear()")
    be.close()


def misses_and_errors(sock, a, kva):
    pool = FakeMHAHostPool("page_first")
    be = load_backend(storage_config(sock), pool)
    ha, unknown = page_hashes(a), hashlib.sha256(b"never stored").hexdigest()
    idx = pool.alloc(2 * PS)
    pool.write_tokens(idx, kva[0][:, :2 * PS], kva[1][:, :2 * PS])
    page0 = pool.get_data_page(idx[0])
    check(be.set(ha[0], page0), "set of one page")

    check(be.exists(unknown) is False, "exists(unknown) is False")
    check(be.get(unknown, pool.get_dummy_flat_data_page()) is None, "get(unknown) is None")
    check(be.get(unknown) is None, "get(unknown) without a target is None")
    t0, t1 = pool.get_dummy_flat_data_page(), pool.get_dummy_flat_data_page()
    got = be.batch_get([ha[0], unknown], [t0, t1])
    check(got[0] is t0 and np.array_equal(t0, page0) and got[1] is None,
          "batch_get([known, unknown]) fills the first, None for the second")
    whole = be.get(ha[0])
    check(whole is not None and whole.tobytes() == page0.tobytes(),
          "get without a target returns the flat page's bytes")
    check(be.batch_get_v1([unknown], idx[PS:]) == [False], "batch_get_v1(unknown)")
    check(be.batch_exists([unknown, ha[0]]) == 0, "batch_exists stops at the first miss")

    for bad, name in ((page0[:-1], "short"), (np.concatenate([page0, page0[:1]]), "long")):
        try:
            be.set(ha[1], bad)
            check(False, "a %s page is refused" % name)
        except ValueError as e:
            check(str(PAGE_BYTES) in str(e), "the %s page's error names the size: %s"
                  % (name, e))
    check(not be.exists(ha[1]), "nothing stored for a wrong-size page")
    try:
        be.get(ha[0], np.zeros(10, np.uint16))
        check(False, "a wrong-size target is refused")
    except ValueError:
        pass
    be.clear()
    be.close()

    ttl = load_backend(storage_config(sock, ttl_s=100), pool)
    check(ttl.set(ha[0], page0) and 0 < ttl.r.ttl(ttl.kv_key(ha[0])) <= 100
          and 0 < ttl.r.ttl(ttl.meta_key(ha[0])) <= 100, "ttl_s: pages set with EX")
    ttl.clear()
    ttl.close()


def rank_scopes(sock, a, kva):
    """MHA ranks hold different heads: each reads only its own pages. MLA
    ranks hold the same page: rank 1 reads rank 0's (fp8, KV_MLA_FMT)."""
    h = page_hashes(a)[0]
    pool = FakeMHAHostPool("layer_first")
    idx = pool.alloc(PS)
    pool.write_tokens(idx, kva[0][:, :PS], kva[1][:, :PS])
    r0 = load_backend(storage_config(sock, 0, 2), pool)
    r1 = load_backend(storage_config(sock, 1, 2), pool)
    check(all(r0.batch_set_v1([h], idx)), "tp rank 0 stores a page")
    check(r0.exists(h) and not r1.exists(h), "tp rank 1 does not see rank 0's MHA page")

    dim = 24
    lat = np.random.default_rng(5).integers(0, 256, (L, PS, dim), dtype=np.uint8)
    mla = FakeMLAHostPool(dim)
    mla.kv_buffer[:PS, :, 0] = lat.transpose(1, 0, 2)     # page_first: [T, L, 1, dim]
    cfg = dict(mla=True, kv_dtype="float8_e4m3fn")
    m0 = load_backend(storage_config(sock, 0, 2, **cfg), mla)
    m1 = load_backend(storage_config(sock, 1, 2, **cfg), mla)
    check(all(m0.batch_set_v1([h], np.arange(PS))), "MLA rank 0 stores a page")
    value, meta = stored(m0, h)
    check(meta == struct.pack("<7i", L * PS * dim, 6, 7, 1, L, PS, dim),
          "MLA fp8 metadata: KV_MLA_FMT, float8_e4m3fn, [1, L, T, dim]")
    check(value == lat.tobytes(), "MLA page stored as [1, L, T, dim]")
    check(m1.batch_exists([h]) == 1 and m1.batch_get_v1([h], np.arange(PS, 2 * PS)) == [True]
          and np.array_equal(mla.kv_buffer[PS:2 * PS], mla.kv_buffer[:PS]),
          "MLA rank 1 reads rank 0's page bit for bit")
    for be in (r0, r1, m0, m1):
        be.clear()
        be.close()


def imports_nothing_and_subclasses():
    """The module imports neither sglang nor torch; once SGLang's
    hicache_storage is loaded (the factory loads it first), the class
    passes the factory's issubclass(…, HiCacheStorage) and instantiates."""
    code_clean = ("import sys, seqkv.connectors.sglang as m; "
                  "bad = [n for n in sys.modules if n.split('.')[0] in ('torch', 'sglang')]; "
                  "print('imported', bad) if bad else print('ok')")
    code_stub = r"""
import abc, sys, types
names = ["sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.hicache_storage"]
for n in names:
    sys.modules[n] = types.ModuleType(n)
class HiCacheStorage(abc.ABC):
    def register_mem_pool_host(self, mem_pool_host): self.mem_pool_host = mem_pool_host
for name in ["get", "batch_get", "set", "batch_set", "exists"]:
    setattr(HiCacheStorage, name, abc.abstractmethod(lambda self, *a, **k: None))
HiCacheStorage.__abstractmethods__ = frozenset(["get", "batch_get", "set", "batch_set", "exists"])
sys.modules[names[-1]].HiCacheStorage = HiCacheStorage
import importlib
cls = getattr(importlib.import_module("seqkv.connectors.sglang"), "SeqkvHiCacheStorage")
cfg = types.SimpleNamespace(extra_config={"socket": "/nonexistent"}, is_mla_model=False)
print("ok" if issubclass(cls, HiCacheStorage) and cls(cfg, {}) else "not a subclass")
"""
    env = dict(os.environ, PYTHONPATH=pydir)
    for what, code in (("imports neither sglang nor torch", code_clean),
                       ("subclasses SGLang's HiCacheStorage when it is loaded", code_stub)):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True)
        check(r.returncode == 0 and r.stdout.strip() == "ok",
              "the module %s: %s%s" % (what, r.stdout.strip(), r.stderr.strip()[-300:]))


def main():
    a, b, kva, kvb, source = prompts_and_kv()
    ha, hb = page_hashes(a), page_hashes(b)
    check(ha[0] == hashlib.sha256(struct.pack("<64I", *a[:PS])).hexdigest()
          and ha[1] == hashlib.sha256(bytes.fromhex(ha[0])
                                      + struct.pack("<64I", *a[PS:2 * PS])).hexdigest(),
          "page hashes chain sha256(prior digest + u32 LE token ids)")
    check(hb[:2] == ha[:2] and hb[2] != ha[2] and hb[3] != ha[3],
          "B shares A's first 2 page hashes only")
    imports_nothing_and_subclasses()

    server = RedisServer() if use_redis else Server(seqkv_bin)
    name = "redis-server" if use_redis else "seqkv serve"
    with server as srv:
        probe(srv.sock)
        for layout in LAYOUTS:
            for zero_copy in (False, True):
                write_through_and_prefetch(srv.sock, layout, zero_copy, a, b, kva, kvb)
        misses_and_errors(srv.sock, a, kva)
        rank_scopes(srv.sock, a, kva)
    if failures:
        print("%d failure(s) (server: %s)" % (len(failures), name))
        sys.exit(1)
    print("sglang hicache: all checks passed (server: %s; KV: %s; layouts: %s; "
          "batch_get/set and batch_*_v1)" % (name, source, ", ".join(LAYOUTS)))


if __name__ == "__main__":
    main()
