#!/usr/bin/python3
"""LMCache's remote backend (its Redis connector) against `seqkv serve`,
unchanged: redis-py (Debian's python3-redis, the asyncio client LMCache
uses) replays the calls of lmcache/v1/storage_backend/connector/
redis_connector.py byte for byte -- key strings
`model@world_size@worker_id@chunk_hash@dtype` + "kv_bytes" / "metadata",
RemoteMetadata packed as LMCache packs it (struct "iiiiiii": length,
MemoryFormat, dtype code, shape[4]), exists -> set kv_bytes -> set
metadata -> get metadata -> get kv_bytes, and the batched variants (a
gather of those) -- with chunks of 256 tokens of stories260K KV in
LMCache's KV_2LTD layout [2, layers, tokens, hidden]. Every value must
come back exact; KV.STATS and INFO must show the bytes saved. Then the
rest of the string commands a Redis client uses, tenants (AUTH) kept
apart, and a kill -9 and restart losing nothing acknowledged.

LMCache cannot be installed here (no torch); the test reproduces its calls
and byte formats, read from its sources.

Usage: lmcache_redis_test.py SEQKV_BIN PYTHON_DIR"""
import asyncio
import hashlib
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyfixture  # noqa: E402

try:
    import numpy as np
    import redis
    import redis.asyncio as aredis
except ImportError as e:  # pragma: no cover
    print("SKIP: %s (needs Debian's python3-redis and python3-numpy)" % e)
    sys.exit(77)

seqkv_bin = sys.argv[1]
failures = []

KV_2LTD, BF16 = 1, 3   # lmcache MemoryFormat.KV_2LTD, protocol.DTYPE_TO_INT[torch.bfloat16]
CHUNK = 256            # LMCache's default chunk_size
TOKENS = {"alice": "tok-alice-0123456789", "bob": "tok-bob-9876543210"}
CONFIG = """tenant alice token %s
tenant alice admin
tenant bob token %s
""" % (TOKENS["alice"], TOKENS["bob"])


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def engine_key(model, world_size, worker_id, chunk_hash, dtype="bfloat16"):
    """CacheEngineKey.to_string() (lmcache/utils.py)"""
    return "%s@%d@%d@%016x@%s" % (model, world_size, worker_id, chunk_hash, dtype)


def chunk_hashes(tokens):
    """A prefix-chained hash per 256-token chunk, folded to an int as
    LMCache's token database does (sha256 here; the value only names keys)"""
    out, prev = [], b""
    for i in range(0, len(tokens) - len(tokens) % CHUNK, CHUNK):
        prev = hashlib.sha256(prev + struct.pack("<%dI" % CHUNK, *tokens[i:i + CHUNK])).digest()
        out.append(int.from_bytes(prev[:8], "little") & 0x7FFFFFFFFFFFFFFF)
    return out


def remote_metadata(length, shape, fmt=KV_2LTD, dtype=BF16):
    """RemoteMetadata.serialize() (lmcache/v1/protocol.py)"""
    return struct.pack("iiiiiii", length, fmt, dtype, *shape)


class Connector:
    """The calls of LMCache's RedisConnector, through redis.asyncio"""

    def __init__(self, url):
        self.pool = aredis.ConnectionPool.from_url(url, max_connections=150)
        self.conn = aredis.Redis(connection_pool=self.pool)
        self.sem = asyncio.Semaphore(150)

    async def exists(self, key):
        async with self.sem:
            return bool(await self.conn.exists(key + "metadata"))

    async def put(self, key, kv_bytes, shape):
        meta = remote_metadata(len(kv_bytes), shape)
        async with self.sem:  # kv bytes first, as LMCache does
            await self.conn.set(key + "kv_bytes", kv_bytes)
            await self.conn.set(key + "metadata", meta)

    async def get(self, key):
        async with self.sem:
            meta = await self.conn.get(key + "metadata")
            if meta is None:
                return None
            length, fmt, dtype, *shape = struct.unpack_from("iiiiiii", meta)
            kv = await self.conn.get(key + "kv_bytes")
        if kv is None:
            return None
        return (length, fmt, dtype, shape), kv

    async def batched_put(self, keys, values, shapes):
        await asyncio.gather(*(self.put(k, v, s) for k, v, s in zip(keys, values, shapes)))

    async def batched_async_contains(self, keys):
        hits = 0
        for k in keys:
            async with self.sem:
                if not await self.conn.exists(k + "metadata"):
                    return hits
            hits += 1
        return hits

    async def batched_get_non_blocking(self, keys):
        res = await asyncio.gather(*(self.get(k) for k in keys))
        return [r for r in res if r is not None]

    async def close(self):
        await self.conn.close()
        await self.pool.disconnect()


def chunks_of(seqkv_bin, nseq, length, seed):
    """[(tokens, KV_2LTD bytes of each full chunk)] of sampled sequences"""
    seqs = pyfixture.sample(seqkv_bin, nseq, length, seed)
    out = []
    for tok, k, v in pyfixture.model_kv(seqkv_bin, seqs):
        L, T, H, D = k.shape
        for c in range(T // CHUNK):
            sl = slice(c * CHUNK, (c + 1) * CHUNK)
            kv = np.stack([k[:, sl].reshape(L, CHUNK, H * D), v[:, sl].reshape(L, CHUNK, H * D)])
            out.append((list(tok), c, kv.tobytes(), [2, L, CHUNK, H * D]))
    return seqs, out


async def lmcache_flow(url, chunks):
    """What LMCache's engine does through the connector: lookups, then
    puts of what misses (single and batched), then retrievals"""
    lm = Connector(url)
    keys = [engine_key("stories260K", 1, 0, chunk_hashes(t)[c]) for t, c, _, _ in chunks]
    # a first request: lookup misses, puts chunk by chunk
    check(await lm.batched_async_contains(keys) == 0, "nothing cached at first")
    half = len(chunks) // 2
    for key, (_, _, kv, shape) in zip(keys[:half], chunks[:half]):
        check(not await lm.exists(key), "exists before put")
        await lm.put(key, kv, shape)
    # the rest as a batched put
    await lm.batched_put(keys[half:], [c[2] for c in chunks[half:]], [c[3] for c in chunks[half:]])
    check(await lm.batched_async_contains(keys) == len(keys), "every chunk found")
    # retrieval, single and batched: exact bytes, metadata as written
    for key, (_, _, kv, shape) in zip(keys, chunks):
        got = await lm.get(key)
        check(got is not None and got[1] == kv, "get of %s exact" % key)
        check(got is not None and got[0] == (len(kv), KV_2LTD, BF16, shape), "metadata of " + key)
    got = await lm.batched_get_non_blocking(keys)
    check(len(got) == len(keys) and all(g[1] == c[2] for g, c in zip(got, chunks)),
          "batched get exact")
    missing = engine_key("stories260K", 1, 0, 12345)
    check(await lm.get(missing) is None and not await lm.exists(missing), "a miss is None")
    await lm.close()
    return keys


def stats(r):
    flat = r.execute_command("KV.STATS")
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def info_blobs(r):
    """INFO blobs, parsed by redis-py as it parses Redis's INFO"""
    return r.info("blobs")


def string_commands(sock):
    """The rest of the string commands, with redis-py's reply types"""
    r = redis.Redis(unix_socket_path=sock, username="alice", password=TOKENS["alice"])
    check(r.set("a", b"1") is True and r.get("a") == b"1", "SET/GET")
    check(r.set("a", b"2", nx=True) is None and r.get("a") == b"1", "SET NX on a key")
    check(r.set("b", b"x", xx=True) is None and r.get("b") is None, "SET XX on no key")
    check(r.mset({"b": b"2", "c": b"3"}) is True, "MSET")
    check(r.mget(["a", "b", "nope", "c"]) == [b"1", b"2", None, b"3"], "MGET")
    check(r.exists("a", "b", "nope", "a") == 3, "EXISTS counts")
    check(r.strlen("a") == 1 and r.strlen("nope") == 0, "STRLEN")
    check(r.ttl("a") == -1 and r.ttl("nope") == -2, "TTL of no expiry / no key")
    check(r.expire("a", 100) is True and 99 <= r.ttl("a") <= 100, "EXPIRE, TTL")
    check(r.pexpire("b", 150) is True and 0 < r.pttl("b") <= 150, "PEXPIRE, PTTL")
    check(r.persist("a") is True and r.ttl("a") == -1, "PERSIST")
    r.set("e", b"v", px=100)
    time.sleep(0.25)
    check(r.get("e") is None and r.get("b") is None, "expired keys read as absent")
    check(r.set("t", b"v", ex=1000) and 999 <= r.ttl("t") <= 1000, "SET EX")
    check(r.type("a") == b"string" and r.type("nope") == b"none", "TYPE")
    for i in range(50):
        r.set("scan:%d" % i, b"v")
    seen = set(r.scan_iter(match="scan:*", count=7))
    check(seen == {b"scan:%d" % i for i in range(50)}, "SCAN MATCH returns each key")
    check(r.delete("a", "nope") == 1 and r.unlink("c") == 1, "DEL / UNLINK counts")
    n = r.dbsize()
    check(isinstance(n, int) and n >= 50, "DBSIZE")
    try:
        r.set("k", b"v", ex=0)
        check(False, "SET EX 0 refused")
    except redis.ResponseError as e:
        check("invalid expire time" in str(e), "SET EX 0: " + str(e))
    try:
        r.execute_command("GET")
        check(False, "GET without a key refused")
    except redis.ResponseError as e:
        check("wrong number of arguments" in str(e), "arity error: " + str(e))
    # tenants: bob sees none of alice's keys and may not FLUSHDB
    b = redis.Redis(unix_socket_path=sock, username="bob", password=TOKENS["bob"])
    check(b.get("t") is None and b.dbsize() == 0, "bob sees none of alice's keys")
    b.set("t", b"bob's")
    check(r.get("t") == b"v" and b.get("t") == b"bob's", "same name, two tenants")
    try:
        b.flushdb()
        check(False, "FLUSHDB is for admins")
    except redis.ResponseError as e:
        check("NOPERM" in str(e) or "admin" in str(e), "FLUSHDB by a non-admin: " + str(e))
    return r, b


def main():
    if pyfixture.model_path() is None:
        print("SKIP: ../shared/models/stories260K.bin is absent: LMCache's chunks are real "
              "model KV (set SEQKV_MODEL)")
        sys.exit(77)
    seqs, chunks = chunks_of(seqkv_bin, 4, 512, 11)
    raw = sum(len(c[2]) for c in chunks)
    srv = pyfixture.Server(seqkv_bin, config=CONFIG)
    try:
        url = "unix://alice:%s@%s" % (TOKENS["alice"], srv.sock)
        keys = asyncio.run(lmcache_flow(url, chunks))
        r = redis.Redis(unix_socket_path=srv.sock, username="alice", password=TOKENS["alice"])
        st, ib = stats(r), info_blobs(r)
        stored = int(st["blob_stored_bytes"])
        print("lmcache: %d chunks of %d bytes (256 tokens, KV_2LTD bf16): %d bytes stored "
              "(%.2fx), %s of them coded as KV" % (len(chunks), len(chunks[0][2]), stored,
                                                   raw / stored, ib.get("kv_values")))
        check(int(st["blob_keys"]) == 2 * len(chunks), "KV.STATS blob_keys")
        check(int(st["blob_raw_bytes"]) == raw + 28 * len(chunks), "KV.STATS blob_raw_bytes")
        check(stored < raw * 0.8, "KV chunks stored smaller than 0.8x (%d of %d)" % (stored, raw))
        check(int(ib["kv_values"]) == len(chunks), "INFO blobs kv_values")
        check(int(ib["coding_saved_bytes"]) > 0, "INFO blobs coding_saved_bytes")
        r2, b = string_commands(srv.sock)
        # kill -9, restart on the same store: every acknowledged value there
        db = srv.db
        srv.kill()
        srv2 = pyfixture.Server(seqkv_bin, config=CONFIG, db=db)
        try:
            r = redis.Redis(unix_socket_path=srv2.sock, username="alice", password=TOKENS["alice"])
            vals = r.mget([k + "kv_bytes" for k in keys])
            check(all(v == c[2] for v, c in zip(vals, chunks)), "exact after kill -9 and restart")
            check(int(stats(r)["blob_stored_bytes"]) >= stored, "stored bytes counted again")
            r.flushdb()
            check(r.dbsize() == 0 and r.get(keys[0] + "kv_bytes") is None, "FLUSHDB (admin)")
            b = redis.Redis(unix_socket_path=srv2.sock, username="bob", password=TOKENS["bob"])
            check(b.get("t") == b"bob's", "FLUSHDB leaves other tenants")
        finally:
            srv2.close()
    finally:
        srv.close()
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("lmcache redis: all checks passed")


main()
