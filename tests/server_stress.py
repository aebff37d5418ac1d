#!/usr/bin/python3
"""Everything at once against one server, for a race detector: two tenants
PUT, GET and SET in a loop, a third thread scrapes GET /metrics and asks
INFO, and the config file is reloaded (SIGHUP) every 0.2 s, alternating
between three versions. Every GET must return exactly what was PUT: the
KV of a token is a function of its prefix (as a model's is), so a prefix
two prompts share holds the same bytes whichever stored it.

Not part of the suite (it proves nothing a normal build can see); run it
against a ThreadSanitizer build (server/README.md "Tests"):
    meson setup build-tsan -Db_sanitize=thread -Dcuda=disabled -Dtests=false
    ninja -C build-tsan cli/seqkv
    TSAN_OPTIONS=halt_on_error=1 /usr/bin/python3 tests/server_stress.py build-tsan/cli/seqkv

Usage: server_stress.py SEQKV_BIN [SECONDS]"""
import hashlib
import os
import random
import signal
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyfixture import Server, free_port  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
import seqkv  # noqa: E402

L, H, D = 2, 2, 8
ROW = H * D * 2  # bytes of one token's K (or V) in one layer
CONF = ("tenant a token token-of-a-0001\ntenant a admin\n"
        "tenant b token token-of-b-0002\n")
CONFS = [CONF, CONF + "tenant c token token-of-c-0003\nmax-clients 500\n",
         CONF + "tenant b max-inflight 10M\n"]


def kv_of(tokens):
    """[layer][k, v][token][H*D] bf16 bytes, each token's rows a hash of its prefix"""
    rows, h = [], hashlib.blake2b(digest_size=32)
    for t in tokens:
        h.update(t.to_bytes(4, "little"))
        seed = h.digest()
        rows.append(b"".join(hashlib.blake2b(seed + bytes([i]), digest_size=64).digest()
                             for i in range((2 * L * ROW + 63) // 64))[:2 * L * ROW])
    out = bytearray()
    for layer in range(L):
        for kv in range(2):
            off = (layer * 2 + kv) * ROW
            for r in rows:
                out += r[off:off + ROW]
    return bytes(out)


def main():
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
    port = free_port()
    with Server(sys.argv[1], CONF, extra=["--metrics", "127.0.0.1:%d" % port]) as srv:
        stop, wrong, counts = threading.Event(), [], {"puts": 0, "scrapes": 0, "reloads": 0}

        def putter(tenant, token):
            c = seqkv.Client(srv.sock, timeout=60)
            c.call("AUTH", tenant, token)
            c.profile_set("m", layers=L, kv_heads=H, head_dim=D, dtype="bf16", chunk=16)
            rng = random.Random(tenant)
            while not stop.is_set():
                toks = [rng.randrange(1, 500) for _ in range(rng.randrange(8, 60))]
                kv = kv_of(toks)
                c.put("m", toks, kv)
                if c.get("m", toks, raw=True) != kv:
                    wrong.append((tenant, toks))
                c.call("SET", "k%d" % rng.randrange(100), "v" * rng.randrange(1, 300))
                counts["puts"] += 1

        def scraper():
            c = seqkv.Client(srv.sock, timeout=60)
            c.call("AUTH", "a", "token-of-a-0001")
            while not stop.is_set():
                urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30).read()
                c.info()
                counts["scrapes"] += 1

        threads = [threading.Thread(target=putter, args=("a", "token-of-a-0001")),
                   threading.Thread(target=putter, args=("b", "token-of-b-0002")),
                   threading.Thread(target=scraper)]
        for t in threads:
            t.start()
        t0 = time.time()
        while time.time() - t0 < seconds:
            with open(os.path.join(srv.dir, "seqkv.conf"), "w") as f:
                f.write(CONFS[counts["reloads"] % 3])
            srv.proc.send_signal(signal.SIGHUP)
            counts["reloads"] += 1
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join()
        alive = srv.proc.poll() is None
    print("%d puts, %d scrapes, %d reloads; %d GETs not exact; server %s"
          % (counts["puts"], counts["scrapes"], counts["reloads"], len(wrong),
             "alive" if alive else "DIED"))
    sys.exit(0 if not wrong and alive else 1)


main()
