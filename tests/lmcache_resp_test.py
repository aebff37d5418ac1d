#!/usr/bin/python3
"""LMCache's multiprocess-mode L2 adapter of type "resp" against `seqkv
serve --port N`: its C++ RESP connector replayed byte for byte over loopback
TCP, from 8 threads with a connection each and one request in flight per
connection, as LMCache runs it.

What is reproduced (read from LMCache/LMCache: csrc/storage_backends/redis/
connector.cpp and connector.h, csrc/storage_backends/connector_base.h and
connector_pybind_utils.h, lmcache/v1/distributed/l2_adapters/
resp_l2_adapter.py and native_connector_l2_adapter.py; the notes are in
the report that came with this test):
  - IPv4 TCP (getaddrinfo AF_INET), one connection per worker thread
    (num_workers, default 8), opened and authenticated when the adapter is
    made: `*3 AUTH user pass` or `*2 AUTH pass` (only with a password),
    reply read as a line that must start with `+OK\\r\\n`;
  - SET `*3\\r\\n$3\\r\\nSET\\r\\n$k\\r\\nkey\\r\\n$n\\r\\n<n bytes>\\r\\n`, exactly 5
    reply bytes that must be `+OK\\r\\n`; GET `*2 GET key`, the header up to
    `\\n` must be `$-1\\r\\n` (a miss) or `$n\\r\\n` with n the caller's buffer
    size, then n bytes and `\\r\\n`; EXISTS and DEL, exactly 4 reply bytes,
    `:1\\r\\n` or `:0\\r\\n`; nothing else is ever sent;
  - a batch cut into min(workers, keys) tiles, each tile's keys run in turn
    on one connection; every buffer of a batch the size of the first;
  - keys `<model>@<kv_rank:08x>@<group:x>@<chunk_hash hex>[@<salt>]`, the
    chunk a KV_2LTD tensor [2, layers, tokens, kv_heads*head_dim] in the
    KV cache dtype.
Checked on top (not something LMCache does): after its batches, each
connection answers a PING with exactly `+PONG\\r\\n` (no reply bytes were
left over or missing).

seqkv side: NOAUTH before AUTH (Redis's exact text), WRONGPASS, both AUTH
forms reaching the same tenant, tenants apart over TCP; chunks of 4 MiB
random bytes; real stories260K KV chunks (256 tokens, bf16) and synthetic
Llama-3.1-8B-shaped chunks (32 layers x 8 kv heads x 128, bf16, 16 tokens)
under keys matching a `kv-layout` directive, with no metadata key, stored
smaller than raw (KV.STATS blob_raw_bytes / blob_stored_bytes deltas); a
value under that pattern whose length is not whole tokens of the shape
accepted and read back exact; `--bind 0.0.0.0` / `--bind 8.8.8.8` (and the
config's `bind`) refused at start.

Usage: lmcache_resp_test.py SEQKV_BIN PYTHON_DIR [--redis]
  --redis: the same client checks against Debian's redis-server on loopback
           TCP (the seqkv-only checks skipped, said so)."""
import hashlib
import os
import queue
import shutil
import socket
import subprocess
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyfixture  # noqa: E402

try:
    import numpy as np
    import redis
except ImportError as e:  # pragma: no cover
    print("SKIP: %s (needs Debian's python3-redis and python3-numpy)" % e)
    sys.exit(77)

seqkv_bin = sys.argv[1]
use_redis = "--redis" in sys.argv[3:]
failures = []
_print_lock = threading.Lock()   # (checks run in threads too)

CHUNK = 256                      # LMCache's default --chunk-size (tokens)
WORKERS = 8                      # RESPL2AdapterConfig num_workers default
KV_RANK_TP1 = (1 << 24) | (0 << 16) | (1 << 8) | 0   # ObjectKey.ComputeKVRank(1, 0, 1, 0)
STORIES = "stories260K"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
L8, H8, D8, T8 = 32, 8, 128, 16  # the synthetic 8B chunk: layers, kv heads, head dim, tokens
TOKENS = {"lmcache": "tok-lmcache-0123456789abcdef", "other": "tok-other-fedcba9876543210",
          "ctl": "tok-ctl-00112233445566778899", "meta": "tok-meta-99887766554433221100"}

CRLF = b"\r\n"
OK, ONE, ZERO, NIL, PONG = b"+OK\r\n", b":1\r\n", b":0\r\n", b"$-1\r\n", b"+PONG\r\n"
NOAUTH = b"-NOAUTH Authentication required.\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
# the connector's pre-built command prefixes (WorkerConn's constructor)
GET_PREFIX = b"*2\r\n$3\r\nGET\r\n"
SET_PREFIX = b"*3\r\n$3\r\nSET\r\n"
EXISTS_PREFIX = b"*2\r\n$6\r\nEXISTS\r\n"
DEL_PREFIX = b"*2\r\n$3\r\nDEL\r\n"


def check(cond, what):
    if not cond:
        with _print_lock:
            failures.append(what)
            print("FAIL: " + what, flush=True)
    return cond


def object_key(model, chunk_hash, kv_rank=KV_RANK_TP1, group=0, salt=""):
    """native_connector_l2_adapter._object_key_to_string"""
    s = "%s@%08x@%x@%s" % (model, kv_rank, group, chunk_hash.hex())
    return s + "@" + salt if salt else s


def chunk_hashes(tokens, prefix=b""):
    """A 32-byte rolling prefix hash per full 256-token chunk (LMCache's
    TokenHasher uses blake3; blake2b-256 here: the value only names keys)"""
    out, prev = [], prefix
    for i in range(0, len(tokens) - len(tokens) % CHUNK, CHUNK):
        h = hashlib.blake2b(prev, digest_size=32)
        h.update(b"".join(t.to_bytes(4, "big") for t in tokens[i:i + CHUNK]))
        prev = h.digest()
        out.append(prev)
    return out


class ConnectorError(Exception):
    pass


class KeyNotFound(ConnectorError):
    pass


class WorkerConn:
    """One worker's TCP session, as connector.cpp's WorkerConn"""

    def __init__(self, host, port, username="", password=""):
        ai = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(120)   # (LMCache has none; a hang here fails the test)
        self.sock.connect(ai[0][4])
        self.username, self.password, self.authed = username, password, False

    def send_multipart(self, parts):
        """writev of the parts, resumed after partial writes"""
        views = [memoryview(p).cast("B") for p in parts if len(p)]
        while views:
            n = self.sock.sendmsg(views)
            while n and views:
                if n >= len(views[0]):
                    n -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][n:]
                    n = 0

    def recv_exactly(self, n):
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectorError("socket recv failed: connection closed")
            got += k
        return bytes(buf)

    def recv_line(self):
        line = bytearray()
        while not line.endswith(CRLF):
            line += self.recv_exactly(1)
        return bytes(line)

    def authenticate_if_needed(self):
        if self.authed or not self.password:
            return
        p = b"$%d\r\n%s\r\n" % (len(self.password.encode()), self.password.encode())
        if self.username:
            u = b"$%d\r\n%s\r\n" % (len(self.username.encode()), self.username.encode())
            self.send_multipart([b"*3\r\n$4\r\nAUTH\r\n", u, p])
        else:
            self.send_multipart([b"*2\r\n$4\r\nAUTH\r\n", p])
        line = self.recv_line()
        if line.startswith(OK):
            self.authed = True
            return
        raise ConnectorError("AUTH failed: %r" % line)

    @staticmethod
    def key_header(key):
        k = key.encode()
        return b"$%d\r\n%s\r\n" % (len(k), k)

    def get(self, key, length, chunk_size):
        if length != chunk_size:
            raise ConnectorError("buffer size mismatch")
        size_header = b"$%d\r\n" % chunk_size
        self.send_multipart([GET_PREFIX, self.key_header(key)])
        header = bytearray()
        while not header.endswith(b"\n"):
            header += self.recv_exactly(1)
            if len(header) > len(size_header) + 32:
                raise ConnectorError("GET: response header too long")
        if header == NIL:
            raise KeyNotFound("GET: key not found")
        if header != size_header:
            raise ConnectorError("GET: size header mismatch: %r" % bytes(header[:80]))
        data = self.recv_exactly(length)
        if self.recv_exactly(2) != CRLF:
            raise ConnectorError("GET: trailer mismatch")
        return data

    def set(self, key, data, chunk_size):
        if len(data) != chunk_size:
            raise ConnectorError("buffer size mismatch")
        self.send_multipart([SET_PREFIX, self.key_header(key), b"$%d\r\n" % chunk_size,
                             data, CRLF])
        reply = self.recv_exactly(len(OK))
        if reply != OK:
            raise ConnectorError("SET: response was not OK: %r" % reply)

    def _int01(self, prefix, key, what):
        self.send_multipart([prefix, self.key_header(key)])
        reply = self.recv_exactly(len(ONE))
        if reply == ONE:
            return True
        if reply == ZERO:
            return False
        raise ConnectorError("%s returned invalid response %r" % (what, reply))

    def exists(self, key):
        return self._int01(EXISTS_PREFIX, key, "EXISTS")

    def delete(self, key):
        return self._int01(DEL_PREFIX, key, "DEL")

    def in_sync(self):
        """(the test's own check) PING answered with exactly +PONG and
        nothing after it"""
        self.sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        if self.recv_exactly(len(PONG)) != PONG:
            return False
        self.sock.settimeout(0.2)
        try:
            extra = self.sock.recv(1)
        except socket.timeout:
            extra = b""
        finally:
            self.sock.settimeout(120)
        return extra == b""

    def close(self):
        self.sock.close()


class Batch:
    def __init__(self, n, tiles):
        self.left, self.ok, self.error = tiles, True, None
        self.per_key = [0] * n
        self.values = [None] * n
        self.lock, self.done = threading.Lock(), threading.Event()

    def tile_done(self, error=None):
        with self.lock:
            if error is not None and self.ok:
                self.ok, self.error = False, error
            self.left -= 1
            if self.left == 0:
                self.done.set()


class Connector:
    """ConnectorBase<WorkerConn> with RedisConnector's operations: workers
    each with its own connection, a queue of tiles, per-key results"""

    def __init__(self, host, port, num_workers=WORKERS, username="", password=""):
        self.host, self.port, self.n = host, port, num_workers
        self.username, self.password = username, password
        self.requests = queue.Queue()
        self.lock = threading.Lock()
        self.live, self.dead, self.synced, self.used = 0, [], [], set()
        self.started = threading.Barrier(num_workers + 1)
        self.threads = [threading.Thread(target=self._worker, args=(i,), daemon=True)
                        for i in range(num_workers)]
        for t in self.threads:
            t.start()
        self.started.wait(60)

    def _worker(self, idx):
        try:
            conn = WorkerConn(self.host, self.port, self.username, self.password)
            conn.authenticate_if_needed()   # create_connection()
        except (ConnectorError, OSError) as e:
            with self.lock:
                self.dead.append(str(e))
            self.started.wait(60)
            return                          # the worker thread exits, as in LMCache
        with self.lock:
            self.live += 1
        self.started.wait(60)
        while True:
            req = self.requests.get()
            if req is None:
                break
            op, start, keys, bufs, chunk_bytes, batch = req
            with self.lock:
                self.used.add(idx)
            try:
                for i, key in enumerate(keys):
                    j = start + i
                    if op == "set":
                        conn.set(key, bufs[i], chunk_bytes)
                    elif op == "exists":
                        batch.per_key[j] = int(conn.exists(key))
                    elif op == "get":   # errors are per key (do_batch_get)
                        try:
                            batch.values[j] = conn.get(key, bufs[i], chunk_bytes)
                            batch.per_key[j] = 1
                        except ConnectorError:
                            batch.per_key[j] = 0
                    elif op == "delete":
                        try:
                            batch.per_key[j] = int(conn.delete(key))
                        except ConnectorError:
                            batch.per_key[j] = 0
                batch.tile_done()
            except (ConnectorError, OSError) as e:
                batch.tile_done(str(e))
        try:
            ok = conn.in_sync()
        except (ConnectorError, OSError):
            ok = False
        with self.lock:
            self.synced.append(ok)
        conn.close()

    def _submit(self, op, keys, bufs):
        n = len(keys)
        tiles = min(self.n, n)
        size = (n + tiles - 1) // tiles
        tiles = (n + size - 1) // size
        batch = Batch(n, tiles)
        chunk_bytes = bufs[0] if op == "get" else (len(bufs[0]) if op == "set" else 0)
        for t in range(tiles):
            a, b = t * size, min(n, (t + 1) * size)
            self.requests.put((op, a, keys[a:b], bufs[a:b], chunk_bytes, batch))
        if not batch.done.wait(300):
            return {"ok": False, "error": "no completion in 300 s (workers gone?)",
                    "per_key": [0] * n, "values": [None] * n}
        return {"ok": batch.ok, "error": batch.error, "per_key": batch.per_key,
                "values": batch.values}

    def batch_set(self, keys, values):
        return self._submit("set", keys, values)

    def batch_get(self, keys, length):
        return self._submit("get", keys, [length] * len(keys))

    def batch_exists(self, keys):
        return self._submit("exists", keys, [None] * len(keys))

    def batch_delete(self, keys):
        return self._submit("delete", keys, [None] * len(keys))

    def close(self):
        for _ in self.threads:
            self.requests.put(None)
        for t in self.threads:
            t.join(60)
        return self.synced


def raw(port, data, want_len=None, timeout=30):
    """One exchange on a fresh TCP connection: send data, read until the
    connection is quiet (or want_len bytes)"""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return read_some(s, want_len)


def read_some(s, want_len=None):
    out = b""
    s.settimeout(2 if want_len is None else 30)
    try:
        while want_len is None or len(out) < want_len:
            d = s.recv(65536)
            if not d:
                break
            out += d
            if want_len is None:
                s.settimeout(0.3)
    except socket.timeout:
        pass
    return out


def auth_checks(port, seqkv):
    """before AUTH: PING, then NOAUTH for the connector's commands; WRONGPASS;
    then AUTH in both forms"""
    k = WorkerConn.key_header("m@01000100@0@00")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        want = PONG if seqkv else NOAUTH   # (Redis wants AUTH even for PING)
        got = read_some(s, len(want))
        check(got == want, "PING before AUTH: %r, want %r" % (got, want))
        for name, req in (("SET", SET_PREFIX + k + b"$4\r\nabcd\r\n"), ("GET", GET_PREFIX + k),
                          ("EXISTS", EXISTS_PREFIX + k), ("DEL", DEL_PREFIX + k)):
            s.sendall(req)
            got = read_some(s, len(NOAUTH))
            check(got == NOAUTH, "%s before AUTH: %r, want %r" % (name, got, NOAUTH))
        s.sendall(b"*3\r\n$4\r\nAUTH\r\n$7\r\nlmcache\r\n$9\r\nwrong-tok\r\n")
        got = read_some(s, len(WRONGPASS))
        check(got == WRONGPASS, "AUTH user wrong-pass: %r, want %r" % (got, WRONGPASS))
        s.sendall(b"*2\r\n$4\r\nAUTH\r\n$9\r\nwrong-tok\r\n")
        got = read_some(s, len(WRONGPASS))
        check(got == WRONGPASS, "AUTH wrong-pass: %r, want %r" % (got, WRONGPASS))
        tok = TOKENS["lmcache"].encode()
        s.sendall(b"*3\r\n$4\r\nAUTH\r\n$7\r\nlmcache\r\n$%d\r\n%s\r\n" % (len(tok), tok))
        check(read_some(s, len(OK)) == OK, "AUTH user pass after a failure: +OK")
        s.sendall(EXISTS_PREFIX + k)
        check(read_some(s, len(ZERO)) == ZERO, "EXISTS after AUTH: :0")
    # a connector with no password sends no AUTH: its first SET must fail
    # (it reads 5 bytes of the NOAUTH line), not be stored
    c = Connector("127.0.0.1", port, num_workers=1)
    r = c.batch_set(["m@01000100@0@01"], [b"x" * 64])
    check(not r["ok"], "a connector without a password cannot SET")
    c.close()
    # a wrong password: the worker threads die at start, as LMCache's do
    c = Connector("127.0.0.1", port, num_workers=2, username="lmcache", password="wrong-tok")
    check(c.live == 0 and len(c.dead) == 2 and all("WRONGPASS" in d for d in c.dead),
          "wrong password: the workers stop with AUTH failed: -WRONGPASS (%s)" % c.dead[:1])
    c.close()


def stats(r):
    flat = r.execute_command("KV.STATS")
    if isinstance(flat, dict):
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in flat.items()}
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def blob_figures(r):
    """(blob_raw_bytes, blob_stored_bytes, INFO blobs kv_values or None)"""
    st = stats(r)
    kvv = r.info("blobs").get("kv_values")
    return int(st["blob_raw_bytes"]), int(st["blob_stored_bytes"]), \
        (int(kvv) if kvv is not None else None)


def to_bf16(x):
    """float32 -> bf16 bit patterns (round to nearest even), uint16"""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def synthetic_8b_chunks(n, seed=7):
    """KV_2LTD chunks [2, 32, 16, 8*128] bf16 shaped like Llama-3.1-8B's:
    per-layer per-channel scales and offsets (log-normal, a few outlier
    channels, as real K has) fixed for the 'model', tokens correlated
    (AR(1), rho 0.9) -- what makes real KV compressible"""
    rng = np.random.default_rng(seed)
    shape = (2, L8, 1, H8 * D8)
    scale = np.exp(rng.normal(-1.5, 0.7, size=shape)).astype(np.float32)
    scale[rng.random(shape) < 0.02] *= 10
    offset = (rng.normal(0, 1.0, size=shape) * scale).astype(np.float32)
    out = []
    for _ in range(n):
        e = rng.normal(size=(2, L8, T8, H8 * D8)).astype(np.float32)
        x = np.empty_like(e)
        x[:, :, 0] = e[:, :, 0]
        for t in range(1, T8):
            x[:, :, t] = 0.9 * x[:, :, t - 1] + 0.4359 * e[:, :, t]
        out.append(to_bf16(offset + scale * x).tobytes())
    return out


def stories_chunks():
    """[(tokens, KV_2LTD bf16 bytes of each full 256-token chunk)] of
    sampled stories260K sequences, and (L, H, D); None without the model"""
    if pyfixture.model_path() is None:
        return None, None
    seqs = pyfixture.sample(seqkv_bin, 8, 512, 23)
    out, dims = [], None
    for tok, k, v in pyfixture.model_kv(seqkv_bin, seqs):
        L, T, H, D = k.shape
        dims = (L, H, D)
        hashes = chunk_hashes([int(t) for t in tok])
        for c in range(T // CHUNK):
            sl = slice(c * CHUNK, (c + 1) * CHUNK)
            kv = np.stack([k[:, sl].reshape(L, CHUNK, H * D), v[:, sl].reshape(L, CHUNK, H * D)])
            out.append((hashes[c], kv.tobytes()))
    return out, dims


def connector_flow(port, seqkv, r, stories, dims):
    """The adapter's store / lookup / load / delete traffic"""
    rng = np.random.default_rng(3)
    c = Connector("127.0.0.1", port, username="lmcache", password=TOKENS["lmcache"])
    check(c.live == WORKERS, "%d workers connected and authenticated (%d; %s)"
          % (WORKERS, c.live, c.dead[:1]))

    # 16 chunks of 4 MiB random bytes under a model with no kv-layout
    big = [rng.integers(0, 256, 4 << 20, dtype=np.uint8).tobytes() for _ in range(16)]
    keys = [object_key("opaque-model", hashlib.blake2b(b"r%d" % i, digest_size=32).digest())
            for i in range(16)]
    check(c.batch_exists(keys)["per_key"] == [0] * 16, "lookup before store: all miss")
    t0 = time.time()
    res = c.batch_set(keys, big)
    dt = time.time() - t0
    check(res["ok"], "store 16 x 4 MiB: %s" % res["error"])
    print("lmcache resp: stored 16 x 4 MiB over %d connections in %.2f s" % (WORKERS, dt))
    check(c.batch_exists(keys)["per_key"] == [1] * 16, "lookup after store: all hit")
    res = c.batch_get(keys, 4 << 20)
    check(res["ok"] and all(v == b for v, b in zip(res["values"], big)), "load 16 x 4 MiB exact")
    missing = object_key("opaque-model", b"\x00" * 32)
    res = c.batch_get([keys[0], missing, keys[1]], 4 << 20)
    check(res["per_key"] == [1, 0, 1] and res["values"][0] == big[0] and res["values"][2] == big[1],
          "a miss inside a load batch: per-key result 0, the others exact")
    got = raw(port, b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(TOKENS["lmcache"]),
              TOKENS["lmcache"].encode()) + GET_PREFIX + WorkerConn.key_header(missing),
              want_len=len(OK) + len(NIL))
    check(got == OK + NIL, "GET of a missing key after AUTH pass: exactly $-1 (%r)" % got)
    # eviction's deletes
    res = c.batch_delete(keys[:8])
    check(res["per_key"] == [1] * 8, "DEL of 8 present keys: :1 each (%s)" % res["per_key"])
    res = c.batch_delete(keys[:8] + [missing])
    check(res["per_key"] == [0] * 9, "DEL again / of a missing key: :0 each")
    check(c.batch_exists(keys)["per_key"] == [0] * 8 + [1] * 8, "lookup after delete")
    check(c.batch_get(keys[:8], 4 << 20)["per_key"] == [0] * 8, "load after delete: misses")

    # the AUTH pass form reaches the same tenant
    c2 = Connector("127.0.0.1", port, num_workers=2, password=TOKENS["lmcache"])
    check(c2.live == 2, "AUTH pass (no username): workers connected")
    check(c2.batch_exists(keys[8:])["per_key"] == [1] * 8, "AUTH pass reaches the same keys")
    res = c2.batch_get(keys[8:10], 4 << 20)
    check(res["ok"] and res["values"] == big[8:10], "AUTH pass: load exact")
    check(all(c2.close()), "AUTH pass connections in sync at the end")

    if seqkv:   # another tenant sees none of them (Redis has one keyspace: not there)
        c3 = Connector("127.0.0.1", port, num_workers=2, username="other", password=TOKENS["other"])
        check(c3.batch_exists(keys[8:])["per_key"] == [0] * 8, "another tenant sees no keys")
        check(all(c3.close()), "other tenant's connections in sync")

    # KV chunks under kv-layout patterns, no metadata key anywhere
    before = blob_figures(r) if seqkv else None
    kv_keys, kv_vals, kv_stored, l_stored = [], [], 0, 0
    if stories is not None:
        skeys = [object_key(STORIES, h) for h, _ in stories]
        svals = [v for _, v in stories]
        res = c.batch_set(skeys, svals)
        check(res["ok"], "store %d stories260K chunks: %s" % (len(svals), res["error"]))
        res = c.batch_get(skeys, len(svals[0]))
        check(res["ok"] and res["values"] == svals, "load stories260K chunks exact")
        kv_keys += skeys
        kv_vals += svals
        if seqkv:
            mid = blob_figures(r)
            raw_d, stored_d = mid[0] - before[0], mid[1] - before[1]
            size = sum(map(len, svals))
            kv_stored = stored_d
            print("lmcache resp: %d stories260K chunks (%d tokens, KV_2LTD bf16, %d bytes): "
                  "%d stored, %.3f of raw" % (len(svals), CHUNK, len(svals[0]), stored_d,
                                              stored_d / max(raw_d, 1)))
            check(raw_d == size, "blob_raw_bytes grew by the values' bytes (%d, %d)"
                  % (raw_d, size))
            check(stored_d < raw_d * 0.9, "real KV under kv-layout stored < 0.9 of raw "
                  "(%d of %d)" % (stored_d, raw_d))
            if before[2] is not None:
                check(mid[2] - before[2] == len(svals), "INFO blobs kv_values +%d (%d)"
                      % (len(svals), mid[2] - before[2]))
            before = mid
    else:
        print("SKIP: real-model KV chunks: ../shared/models/stories260K.bin is absent "
              "(set SEQKV_MODEL); the synthetic 8B-shaped chunks still run")
    lvals = synthetic_8b_chunks(8)
    lkeys = [object_key(LLAMA, hashlib.blake2b(b"l%d" % i, digest_size=32).digest())
             for i in range(8)]
    res = c.batch_set(lkeys, lvals)
    check(res["ok"], "store 8 x 2 MiB 8B-shaped chunks: %s" % res["error"])
    res = c.batch_get(lkeys, len(lvals[0]))
    check(res["ok"] and res["values"] == lvals, "load 8B-shaped chunks exact")
    if seqkv:
        mid = blob_figures(r)
        raw_d, stored_d = mid[0] - before[0], mid[1] - before[1]
        l_stored = stored_d
        print("lmcache resp: 8 synthetic Llama-3.1-8B chunks (%d tokens, %d bytes): %d stored, "
              "%.3f of raw%s" % (T8, len(lvals[0]), stored_d, stored_d / max(raw_d, 1),
                                 "" if stored_d < raw_d * 0.85 else " (above the 0.85 expected)"))
        check(raw_d == sum(map(len, lvals)), "blob_raw_bytes grew by the 8B chunks' bytes")
        check(stored_d < raw_d, "8B-shaped KV under kv-layout stored smaller than raw "
              "(%d of %d)" % (stored_d, raw_d))
        if before[2] is not None:
            check(mid[2] - before[2] == len(lvals), "INFO blobs kv_values +%d (%d)"
                  % (len(lvals), mid[2] - before[2]))
        before = mid

    # under the pattern but not whole tokens of its shape: stored as bytes,
    # accepted, exact (a connector's batch holds one size: one batch each)
    odd = [lvals[0] + b"\x01\x02\x03", lvals[1][:1000], b"\x07" * 2]
    okeys = [object_key(LLAMA, hashlib.blake2b(b"odd%d" % i, digest_size=32).digest())
             for i in range(len(odd))]
    for k, v in zip(okeys, odd):
        res = c.batch_set([k], [v])
        check(res["ok"], "a %d-byte value under the kv-layout pattern accepted: %s"
              % (len(v), res["error"]))
        res = c.batch_get([k], len(v))
        check(res["ok"] and res["values"][0] == v, "the %d-byte value read back exact" % len(v))
    # whole tokens of the shape but random bits (not KV at all): accepted, exact
    noise = rng.integers(0, 256, len(lvals[0]), dtype=np.uint8).tobytes()
    nkey = object_key(LLAMA, b"\x11" * 32)
    res = c.batch_set([nkey], [noise])
    check(res["ok"], "random bits of a whole chunk's length under the pattern accepted")
    res = c.batch_get([nkey], len(noise))
    check(res["ok"] and res["values"][0] == noise, "random bits under the pattern exact")
    if seqkv:
        after = blob_figures(r)
        check(after[0] - before[0] == sum(map(len, odd)) + len(noise),
              "blob_raw_bytes counts the odd-sized and random values")
        if before[2] is not None:
            check(after[2] - before[2] <= 1, "odd-sized values are not coded as KV (kv_values +%d)"
                  % (after[2] - before[2]))
    # salted keys are keys like any other
    skey = object_key(LLAMA, b"\x22" * 32, salt="user-42")
    res = c.batch_set([skey], [lvals[2]])
    check(res["ok"] and c.batch_get([skey], len(lvals[2]))["values"] == [lvals[2]],
          "a salted key stores and loads")

    synced = c.close()
    check(len(synced) == WORKERS and all(synced),
          "every connection in sync after the run (PING -> exactly +PONG): %s" % synced)
    print("lmcache resp: %d of %d connections carried requests" % (len(c.used), WORKERS))
    return kv_vals, kv_stored, lvals, l_stored


def control_ratio(port, r_ctl, kv_vals, kv_stored):
    """The same real KV bytes under a key no kv-layout matches, in a tenant
    of its own (values are deduplicated within a tenant): zstd's figure,
    which the kv-layout coding must beat"""
    if not kv_vals:
        return
    c = Connector("127.0.0.1", port, num_workers=4, username="ctl", password=TOKENS["ctl"])
    b = blob_figures(r_ctl)
    keys = [object_key("no-layout-model", hashlib.blake2b(v[:64] + b"%d" % i,
                                                          digest_size=32).digest())
            for i, v in enumerate(kv_vals)]
    res = c.batch_set(keys, kv_vals)
    check(res["ok"], "control tenant stores the chunks")
    a = blob_figures(r_ctl)
    print("lmcache resp: the same stories260K chunks with no kv-layout (bytes, zstd): "
          "%.3f of raw" % ((a[1] - b[1]) / max(a[0] - b[0], 1)))
    check(kv_stored < a[1] - b[1], "kv-layout coding beats the bytes path on real KV "
          "(%d < %d)" % (kv_stored, a[1] - b[1]))
    check(all(c.close()), "control connections in sync")


def metadata_size(port, kv_vals, kv_stored, dims, tokens=None, tag="stories260K"):
    """The same chunks through LMCache's legacy Redis connector in a tenant
    of its own: `<key>metadata` (RemoteMetadata: KV_2LTD, bf16, [2, L, T,
    H*D]) set first, then `<key>kv_bytes`, which the server codes by the
    fast level in that layout. kv-layout must store them in exactly as many
    bytes: the fast level's size"""
    if not kv_vals or not dims:
        return
    L, H, D = dims
    r = redis.Redis(host="127.0.0.1", port=port, username="meta", password=TOKENS["meta"])
    meta = struct.pack("<7i", len(kv_vals[0]), 1, 3, 2, L, tokens or CHUNK, H * D)
    for i in range(len(kv_vals)):
        r.set("%s-%dmetadata" % (tag, i), meta)
    b = blob_figures(r)
    for i, v in enumerate(kv_vals):
        r.set("%s-%dkv_bytes" % (tag, i), v)
    a = blob_figures(r)
    check(all(r.get("%s-%dkv_bytes" % (tag, i)) == v for i, v in enumerate(kv_vals)),
          "the chunks read back exact through the metadata path")
    print("lmcache resp: the same %s chunks with LMCache's metadata key: %d stored; under "
          "kv-layout: %d" % (tag, a[1] - b[1], kv_stored))
    check(a[1] - b[1] == kv_stored, "kv-layout stores the chunks at the fast level's size, as "
          "with their metadata key (%d, %d)" % (kv_stored, a[1] - b[1]))


def bind_refusals():
    """non-loopback addresses refused at start: non-zero exit, a message
    naming the address or loopback; the same command line with 127.0.0.1
    serves (so the address is what was refused). Every case has a token
    tenant, without which a TCP port is refused anyway."""
    tenant = "tenant lmcache token %s\n" % TOKENS["lmcache"]
    cases = [("0.0.0.0", True), ("8.8.8.8", True), ("0.0.0.0", False), ("8.8.8.8", False),
             ("127.0.0.1", True)]
    for addr, on_cli in cases:
        tmp = tempfile.mkdtemp(prefix="seqkv-bind-")
        proc = None
        try:
            port = pyfixture.free_port()
            conf = tenant if on_cli else tenant + "port %d\nbind %s\n" % (port, addr)
            cf = os.path.join(tmp, "seqkv.conf")
            with open(cf, "w") as f:
                f.write(conf)
            os.chmod(cf, 0o600)
            args = [seqkv_bin, "serve", "--db", os.path.join(tmp, "db"), "--socket",
                    os.path.join(tmp, "s.sock"), "--threads", "1", "--config", cf]
            if on_cli:
                args += ["--port", str(port), "--bind", addr]
            what = ("--bind " if on_cli else "config bind ") + addr
            proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if addr == "127.0.0.1":
                up = False
                for _ in range(400):
                    if proc.poll() is not None:
                        break
                    if pyfixture.Server._ping(socket.AF_INET, ("127.0.0.1", port)):
                        up = True
                        break
                    time.sleep(0.025)
                check(up, "%s: the server serves on loopback TCP" % what)
                continue
            try:
                _, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                check(False, "%s: the server started (it must refuse)" % what)
                continue
            msg = err.decode(errors="replace").strip()
            check(proc.returncode != 0, "%s: non-zero exit (%d)" % (what, proc.returncode))
            check(addr in msg or "loopback" in msg,
                  "%s: a message naming the address or loopback on stderr (%r)" % (what, msg))
            print("bind refused (%s): %s" % (what, msg.splitlines()[-1] if msg else ""))
        finally:
            pyfixture.stop_process(proc)
            shutil.rmtree(tmp, ignore_errors=True)


def seqkv_config(dims):
    L, H, D = dims or (5, 4, 8)
    return ("tenant lmcache token %s\ntenant other token %s\ntenant ctl token %s\n"
            "tenant meta token %s\n"
            "kv-layout %s@* layers %d kv-heads %d head-dim %d dtype bf16 order kv_2ltd\n"
            "kv-layout %s@* layers %d kv-heads %d head-dim %d dtype bf16 order kv_2ltd\n"
            % (TOKENS["lmcache"], TOKENS["other"], TOKENS["ctl"], TOKENS["meta"],
               STORIES, L, H, D, LLAMA, L8, H8, D8))


def main():
    stories, dims = stories_chunks()
    if use_redis:
        print("(--redis: the client checks against redis-server; kv-layout, KV.STATS, "
              "tenants and --bind are seqkv's, skipped)")
        with pyfixture.RedisTcp(users={"lmcache": TOKENS["lmcache"], "other": TOKENS["other"]},
                                requirepass=TOKENS["lmcache"]) as rs:
            auth_checks(rs.port, False)
            connector_flow(rs.port, False, None, stories, dims)
    else:
        bind_refusals()
        with pyfixture.Server(seqkv_bin, config=seqkv_config(dims), port=True) as srv:
            r = redis.Redis(host="127.0.0.1", port=srv.port, username="lmcache",
                            password=TOKENS["lmcache"])
            auth_checks(srv.port, True)
            kv_vals, kv_stored, lvals, l_stored = connector_flow(srv.port, True, r, stories, dims)
            r_ctl = redis.Redis(host="127.0.0.1", port=srv.port, username="ctl",
                                password=TOKENS["ctl"])
            control_ratio(srv.port, r_ctl, kv_vals, kv_stored)
            metadata_size(srv.port, kv_vals, kv_stored, dims)
            metadata_size(srv.port, lvals, l_stored, (L8, H8, D8), T8, "llama-8b")
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("lmcache resp: all checks passed")


main()
