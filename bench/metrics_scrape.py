#!/usr/bin/python3
"""bench/metrics_scrape.py SEQKV_BIN: a scrape's cost against INFO's as the store grows: PUTs of 64-token
sequences (chunk 16: 4 records each) of a small profile through the socket,
then GET /metrics and INFO timed (best of 5)."""
import os, sys, time, random, urllib.request
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests")); sys.path.insert(0, os.path.join(ROOT, "python"))
from pyfixture import Server, free_port
import seqkv
L, H, D = 2, 2, 8
port = free_port()
with Server(sys.argv[1], "tenant a token token-of-a-0001\ntenant a admin\ntenant b token token-of-b-0002\n",
            extra=["--metrics", "127.0.0.1:%d" % port]) as srv:
    c = seqkv.Client(srv.sock, timeout=60)
    c.call("AUTH", "a", "token-of-a-0001")
    for p in ("m1", "m2"):
        c.profile_set(p, layers=L, kv_heads=H, head_dim=D, dtype="bf16", chunk=16)
    rng = random.Random(1)
    kv = os.urandom(L * 2 * 64 * H * D * 2)
    done = 0
    for target in (1000, 10000, 50000):
        while done < target:
            toks = [rng.randrange(1, 30000) for _ in range(64)]
            c.put("m1" if done % 2 else "m2", toks, kv)
            done += 1
        def best(fn):
            t = []
            for _ in range(5):
                t0 = time.perf_counter(); n = fn(); t.append(time.perf_counter() - t0)
            return min(t), n
        url = "http://127.0.0.1:%d/metrics" % port
        ms, n = best(lambda: len(urllib.request.urlopen(url).read()))
        info, ni = best(lambda: len(c.info("everything")))
        print("%6d sequences (%6d records): GET /metrics %.1f ms (%d bytes), INFO everything %.1f ms"
              % (done, done * 4, ms * 1e3, n, info * 1e3), flush=True)
