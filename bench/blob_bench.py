#!/usr/bin/python3
"""redis-py GET and SET of 256-token KV chunks (stories260K, LMCache's
KV_2LTD layout with its metadata key, as LMCache's Redis connector writes
them) against `seqkv serve` and against redis-server holding the same
values, in the same run: throughput ratios and bytes stored.

redis-server runs twice: without persistence (a cache that a restart
empties) and with `appendonly yes, appendfsync always` (durable per write,
like seqkv, whose every SET is an fsynced LMDB commit). Each client is a
process of its own with one redis-py connection; GETs pick chunks at
random. Bytes stored: seqkv's blob_stored_bytes (INFO blobs) against
redis's used_memory growth (the values held in memory).

usage: bench/blob_bench.py [--seqkv build-release/cli/seqkv] [--chunks 32]
                           [--seconds 3] [--clients 1,4]"""
import argparse
import multiprocessing as mp
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import numpy as np  # noqa: E402
import pyfixture  # noqa: E402
import redis  # noqa: E402

CHUNK = 256


def chunks(seqkv_bin, n):
    seqs = pyfixture.sample(seqkv_bin, (n + 1) // 2, 2 * CHUNK, 31)
    out = []
    for tok, k, v in pyfixture.model_kv(seqkv_bin, seqs):
        L, T, H, D = k.shape
        for c in range(T // CHUNK):
            sl = slice(c * CHUNK, (c + 1) * CHUNK)
            kv = np.stack([k[:, sl].reshape(L, CHUNK, H * D),
                           v[:, sl].reshape(L, CHUNK, H * D)]).tobytes()
            meta = struct.pack("iiiiiii", len(kv), 1, 3, 2, L, CHUNK, H * D)
            out.append(("stories260K@1@0@%016x@bfloat16" % random.getrandbits(63), kv, meta))
    return out[:n]


def redis_server(tmp, durable):
    sock = os.path.join(tmp, "r.sock")
    args = ["redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
            "--save", "", "--dir", tmp, "--appendonly", "yes" if durable else "no"]
    if durable:
        args += ["--appendfsync", "always"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    for _ in range(400):
        try:
            if redis.Redis(unix_socket_path=sock).ping():
                return p, sock
        except redis.ConnectionError:
            time.sleep(0.025)
    raise SystemExit("redis-server did not start")


def _client(sock, keys, seconds, op, values, q, seed):
    r = redis.Redis(unix_socket_path=sock)
    rnd = random.Random(seed)
    n = nbytes = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        i = rnd.randrange(len(keys))
        if op == "get":
            v = r.get(keys[i] + "kv_bytes")
            assert v is not None and len(v) == len(values[i])
        else:
            # a new chunk each time (a new key, bytes of its own), as LMCache
            # puts what it did not find
            key = "new-%d-%d" % (seed, n)
            r.set(key + "kv_bytes", struct.pack("<Q", seed << 32 | n) + values[i][8:])
            r.set(key + "metadata", METAS[i])
        n += 1
        nbytes += len(values[i])
    q.put((n, nbytes, time.perf_counter() - t0))


METAS = []


def run(sock, data, clients, seconds, op):
    q = mp.Queue()
    keys = [d[0] for d in data]
    vals = [d[1] for d in data]
    ps = [mp.Process(target=_client, args=(sock, keys, seconds, op, vals, q, 7 + i))
          for i in range(clients)]
    for p in ps:
        p.start()
    res = [q.get() for _ in ps]
    for p in ps:
        p.join()
    ops = sum(r[0] for r in res)
    secs = max(r[2] for r in res)
    return ops / secs, sum(r[1] for r in res) / secs


def load(sock, data):
    r = redis.Redis(unix_socket_path=sock)
    for key, kv, meta in data:  # LMCache's order: kv_bytes, then metadata
        r.set(key + "kv_bytes", kv)
        r.set(key + "metadata", meta)
    for key, kv, _ in data:
        assert r.get(key + "kv_bytes") == kv, "a value came back different"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqkv", default="build-release/cli/seqkv")
    ap.add_argument("--chunks", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--threads", type=int, default=4,
                    help="seqkv serve --threads (SETs wait on fsync: more than the CPUs helps)")
    a = ap.parse_args()
    if pyfixture.model_path() is None:
        raise SystemExit("needs ../shared/models/stories260K.bin (or SEQKV_MODEL)")
    data = chunks(a.seqkv, a.chunks)
    METAS.extend(d[2] for d in data)
    raw = sum(len(d[1]) + len(d[2]) for d in data)
    clients = [int(c) for c in a.clients.split(",")]
    cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | sed 's/.*: *//'"],
                         capture_output=True, text=True).stdout.strip()
    print("%d chunks of %d bytes (256 tokens of stories260K, KV_2LTD bf16) + metadata; "
          "%s, %d CPUs" % (len(data), len(data[0][1]), cpu, os.cpu_count()))
    tmp = tempfile.mkdtemp(prefix="seqkv-blobbench-")
    results = {}
    try:
        for name in ("seqkv", "redis", "redis-fsync"):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            if name == "seqkv":
                srv = pyfixture.Server(a.seqkv, db=os.path.join(d, "db"), threads=a.threads)
                sock, stop = srv.sock, srv.close
            else:
                p, sock = redis_server(d, name == "redis-fsync")
                stop = p.terminate
            try:
                r = redis.Redis(unix_socket_path=sock)
                mem0 = r.info("memory")["used_memory"] if name != "seqkv" else 0
                load(sock, data)
                if name == "seqkv":
                    stored = r.info("blobs")["stored_bytes"]
                else:
                    stored = r.info("memory")["used_memory"] - mem0
                row = {"stored": stored}
                for c in clients:
                    row["get%d" % c] = run(sock, data, c, a.seconds, "get")
                    row["set%d" % c] = run(sock, data, c, a.seconds, "set")
                results[name] = row
            finally:
                stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    s = results["seqkv"]
    print("\n| server | bytes stored (%d raw) | ratio |" % raw)
    print("|---|---|---|")
    for name, row in results.items():
        print("| %s | %d | %.2fx |" % (name, row["stored"], raw / row["stored"]))
    print("\n| clients | op | seqkv ops/s | redis ops/s | seqkv/redis | redis-fsync ops/s "
          "| seqkv/redis-fsync |")
    print("|---|---|---|---|---|---|---|")
    for c in clients:
        for op in ("get", "set"):
            k = "%s%d" % (op, c)
            sv, rv, fv = s[k][0], results["redis"][k][0], results["redis-fsync"][k][0]
            print("| %d | %s | %.0f | %.0f | %.2f | %.0f | %.2f |" % (c, op.upper(), sv, rv,
                                                                  sv / rv, fv, sv / fv))
    print("\n(SET: one op is LMCache's put of a new chunk, SET kv_bytes then SET metadata)")


if __name__ == "__main__":
    main()
