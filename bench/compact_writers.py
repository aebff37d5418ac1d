#!/usr/bin/python3
"""Clients' writes while the server compacts: how many get in, and how long
a PUT waits, with every reply checked.

usage: /usr/bin/python3 bench/compact_writers.py [SEQKV_BIN] [--seqs N] [--clients C]
  SEQKV_BIN: default build-release/cli/seqkv

A profile of 4 layers x 8 KV heads x 128 (bf16) in chunks of 64 tokens, so
that each record is 1 MiB and the compaction writes it behind
(store/compact.c). N sequences of 256 tokens (default 64) are put raw,
KV.CALIBRATE learns the profile, then KV.COMPACT runs while C clients
(default 3) PUT new sequences, DEL stored ones and GET the others in a
loop (each DELs and GETs sequences of its own, never one another client
deletes). Printed: the compaction's time, the writes (PUT, DEL) that went in
during it, and the PUTs' mean and longest wait. Every GET is compared with
what was put, during the compaction, after it, and after a restart on the
same store (every sequence kept is exact, every one deleted is gone). Each
sequence has a first token of its own, so no two share a prefix (a shared
prefix holds one KV, whoever stored it). Timings are printed, never
asserted; a wrong reply fails the run (exit 1). The temporary directory is
removed."""
import argparse
import os
import random
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "python"))
import numpy as np  # noqa: E402
from pyfixture import Server  # noqa: E402
import seqkv  # noqa: E402

L, H, D, CH, T = 4, 8, 128, 64, 256  # a record: 64 x 4 x 2 x 1024 x 2 B = 1 MiB
VOCAB = 500


def seq(i):
    """Sequence i: its tokens (the first is i + 1) and its bf16 KV."""
    if i >= VOCAB - 1:
        raise ValueError("sequence %d: no first token of its own left" % i)
    rng = np.random.default_rng(1000 + i)
    tok = np.concatenate([[i + 1], rng.integers(1, VOCAB, T - 1)]).astype("<u4")
    base = rng.normal(0, 1, (L, 2, 1, H, D)).astype(np.float32)
    kv = base + 0.3 * rng.normal(0, 1, (L, 2, T, H, D)).astype(np.float32)
    return tok, (kv.view(np.uint32) >> 16).astype(np.uint16)


def check(c, i, present=True):
    tok, b = seq(i)
    n = c.lookup("p", tok)
    if not present:
        if n == T:
            raise SystemExit("FAIL: deleted sequence %d is still stored" % i)
        return
    if n != T:
        raise SystemExit("FAIL: sequence %d: lookup %d of %d" % (i, n, T))
    if bytes(c.get("p", tok, raw=True)) != b.tobytes():
        raise SystemExit("FAIL: sequence %d: GET differs from its PUT" % i)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seqkv", nargs="?", default=os.path.join(ROOT, "build-release/cli/seqkv"))
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--clients", type=int, default=3)
    a = ap.parse_args()
    conf = "tenant t uid %d\ntenant t admin\ncompact-interval 0\n" % os.getuid()
    n0 = a.seqs
    deleted, added, lat, errs = set(), set(), [], []
    lock = threading.Lock()
    next_id = [n0]
    with Server(a.seqkv, config=conf) as srv:
        c = seqkv.Client(srv.sock)
        c.profile_set("p", layers=L, kv_heads=H, head_dim=D, dtype="bf16", level="ctx", chunk=CH)
        for i in range(n0):
            tok, b = seq(i)
            c.put("p", tok, b)
        c.calibrate("p")
        stop = threading.Event()

        def client(seed):
            try:
                cc = seqkv.Client(srv.sock)
                r = random.Random(seed)
                while not stop.is_set():
                    op = r.random()
                    # (each client DELs and GETs its own sequences, i % clients)
                    i = r.randrange(seed, n0, a.clients)
                    if op < 0.3:
                        with lock:
                            if i in deleted:
                                continue
                            deleted.add(i)
                        cc.delete("p", seq(i)[0])
                    elif op < 0.6:
                        with lock:
                            k = next_id[0]
                            next_id[0] += 1
                        if k >= VOCAB - 1:
                            continue
                        tok, b = seq(k)
                        t1 = time.time()
                        cc.put("p", tok, b)
                        lat.append(time.time() - t1)
                        added.add(k)
                    else:
                        with lock:
                            gone = i in deleted
                        if not gone:
                            check(cc, i)
                cc.close()
            except BaseException as e:  # (reported by the main thread)
                errs.append(e)

        ths = [threading.Thread(target=client, args=(s,)) for s in range(a.clients)]
        for t in ths:
            t.start()
        t0 = time.time()
        st = c.call("KV.COMPACT", "p")
        secs = time.time() - t0
        stop.set()
        for t in ths:
            t.join()
        for e in errs:
            raise e
        st = dict(zip([x.decode() for x in st[0::2]], st[1::2]))
        print("compaction: %.2f s, %d of %d records coded again (another compaction may take "
              "some: the server's own)" % (secs, st["recoded"], st["records"]))
        worst = max(lat or [0])
        print("during it: %d PUTs, %d DELs; PUT waited %.3f s on average, %.3f s at most "
              "(%.2fx the compaction's time)" % (len(added), len(deleted),
                                                 sum(lat) / max(1, len(lat)), worst, worst / secs))
        for i in range(n0):
            check(c, i, i not in deleted)
        for i in added:
            check(c, i)
        c.close()
        db = srv.db
        srv.stop()
        with Server(a.seqkv, config=conf, db=db) as s2:
            c = seqkv.Client(s2.sock)
            for i in range(n0):
                check(c, i, i not in deleted)
            for i in added:
                check(c, i)
            c.close()
    print("every reply exact, also after a restart")


if __name__ == "__main__":
    main()
