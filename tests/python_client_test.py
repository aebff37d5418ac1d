#!/usr/bin/python3
"""python/seqkv (the package) against a live `seqkv serve`: put, lookup and get
bit-exact (numpy-shaped when numpy is importable), get_layers (the
streamed KV.GET ... LAYERS) layer by layer, profile and stats
replies, error codes; and, when redis-py (Debian's python3-redis) is
installed, the same commands through redis-py.

Usage: python_client_test.py SEQKV_BIN PYTHON_DIR. Runs with Debian's
/usr/bin/python3 (python3-numpy and python3-redis serve that one)."""
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

seqkv_bin, pydir = sys.argv[1], sys.argv[2]
sys.path.insert(0, pydir)
import seqkv  # noqa: E402

try:
    import numpy as np
except ImportError:
    np = None

L, H, D, ES = 2, 2, 8, 2          # layers, kv heads, head dim, bf16 bytes
TB = L * 2 * H * D * ES           # bytes of one token's KV
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def kv_for(tokens, seed):
    """Store-layout KV [layer][k, v][token][H][D] whose bytes for token i
    depend only on tokens[0..i] (a causal fake), so prefixes agree."""
    per = []
    h = seed
    for t in tokens:
        h = (h * 1000003 + t + 1) & 0xFFFFFFFF
        per.append(random.Random(h).randbytes(TB))
    out = bytearray()
    for layer in range(L):
        for kv in range(2):
            for p in per:
                o = (layer * 2 + kv) * H * D * ES
                out += p[o:o + H * D * ES]
    return bytes(out)


def toks(seq):
    return struct.pack("<%dI" % len(seq), *seq)


def main():
    tmp = tempfile.mkdtemp(prefix="seqkv-py-")
    sock = os.path.join(tmp, "s.sock")
    srv = subprocess.Popen([seqkv_bin, "serve", "--db", os.path.join(tmp, "db"),
                            "--socket", sock, "--threads", "2", "--quiet"])
    try:
        for _ in range(400):
            if srv.poll() is not None:
                raise SystemExit("FAIL: the server exited at start-up")
            try:
                c = seqkv.Client(sock, timeout=30)
                if c.ping() == "PONG":
                    break
                c.close()
            except (OSError, seqkv.Error):
                time.sleep(0.025)
        else:
            raise SystemExit("FAIL: the server did not answer")
        run(c, sock)
        c.close()
    finally:
        try:
            with seqkv.Client(sock, timeout=10) as a:
                a.call("SHUTDOWN")
            srv.wait(timeout=10)
        except Exception:  # noqa: BLE001 - best effort, then kill
            srv.kill()
            srv.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("python client: all checks passed")


def run(c, sock):
    check(c.profile_set("py", layers=L, kv_heads=H, head_dim=D, dtype="bf16",
                        chunk=16) == "OK", "profile_set OK")
    p = c.profile_get("py")
    check(p["layers"] == L and p["kv_heads"] == H and p["head_dim"] == D,
          "profile_get shape %r" % p)
    check(p["dtype"] == "bf16" and p["token_bytes"] == TB and p["chunk"] == 16,
          "profile_get dtype/token_bytes/chunk %r" % p)
    check(isinstance(p["rope_theta"], float) and len(p["id"]) == 64, "profile_get types %r" % p)
    from seqkv.profile_fields import FIELDS
    check(sorted(p) == sorted(f[0] for f in FIELDS), "profile_get: the table's fields %r" % sorted(p))
    check(c.profile_set("py", **{"lossy-sink": 8}) == "OK", "a field named with '-' (lossy-sink)")
    check(c.profile_get("py")["lossy_sink"] == 8, "lossy_sink set")
    for bad in ({"token_bytes": 4}, {"id": "x"}, {"layer": 2}):
        try:
            c.profile_set("py", **bad)
            check(False, "profile_set(%r) refused" % bad)
        except ValueError as e:
            check("layers" in str(e), "profile_set(%r): %s" % (bad, e))

    rng = random.Random(5)
    a = [rng.randrange(1000) for _ in range(50)]
    b = a[:30] + [rng.randrange(1000) for _ in range(25)]   # shares 30 tokens with a
    kva, kvb = kv_for(a, 1), kv_for(b, 1)
    check(c.lookup("py", a) == 0, "lookup before any put is 0")
    check(c.put("py", a, kva) == 50, "put a stores 50 tokens")
    check(c.put("py", b, kvb) == 25, "put b: 25 new tokens (the shared prefix was cached)")
    check(c.lookup("py", a) == 50, "lookup a")
    check(c.lookup("py", b + [7, 8]) == 55, "lookup b extended")
    check(c.lookup("py", toks(b[:40])) == 40, "lookup with bytes tokens")
    check(c.get("py", a, raw=True) == kva, "get a raw bit-exact")
    check(c.get("py", b, raw=True) == kvb, "get b raw bit-exact")
    check(c.get("py", b + [9], raw=True) == kvb, "get longest prefix of b+[9]")
    check(c.get("py", a, n=20, raw=True) == kv_for(a[:20], 1), "get first 20 of a")
    if np is not None:
        arr = c.get("py", a)
        check(arr.shape == (L, 2, 50, H, D) and arr.dtype == np.dtype("<u2"),
              "numpy shape %r dtype %r" % (arr.shape, arr.dtype))
        check(arr.tobytes() == kva, "numpy get bit-exact")
        want = np.frombuffer(kva, dtype="<u2").reshape(L, 2, 50, H, D)
        sub = c.get("py", np.array(a, dtype=np.int64), n=30)
        check(np.array_equal(sub, want[:, :, :30]), "numpy prefix of 30 equals the slice")
        # put from a numpy array
        d = a[:10] + [1, 2, 3]
        kvd = np.frombuffer(kv_for(d, 1), dtype="<u2").reshape(L, 2, len(d), H, D)
        check(3 <= c.put("py", np.array(d, dtype=np.uint32), kvd) <= 13, "numpy put")
        check(c.get("py", d).tobytes() == kvd.tobytes(), "numpy put/get bit-exact")
        print("numpy %s: shaped gets checked" % np.__version__)
    else:
        print("numpy absent: shaped gets skipped (bytes only)")

    layers_check(c, a, kva)

    for code, fn in (("NOTFOUND", lambda: c.get("py", [999999])),
                     ("SHAPE", lambda: c.put("py", [1, 2], b"\0" * (TB + 1))),
                     ("NOTFOUND", lambda: c.lookup("nosuch", a))):
        try:
            fn()
            check(False, "expected -%s" % code)
        except seqkv.Error as e:
            check(e.code == code, "error code %s, wanted %s (%s)" % (e.code, code, e))
    try:
        c.call("NO.SUCH.COMMAND")
        check(False, "unknown command accepted")
    except seqkv.Error as e:
        check(e.code == "ERR", "unknown command: %s" % e)
    check(c.ping() == "PONG", "connection usable after errors")

    st = c.stats()
    # 75 tokens stored above, 3 more by the numpy put (when numpy is there)
    check(st["tokens"] >= (78 if np is not None else 75) and st["raw_bytes"] == st["tokens"] * TB,
          "stats tokens/raw_bytes %r" % st)
    check(isinstance(st["ratio"], float) and isinstance(st["level.raw"], list),
          "stats types %r" % st)
    check("tokens:" in c.info("store"), "INFO store text")
    check(c.delete("py", b) >= 1, "delete b's tail")
    check(c.lookup("py", b) == 30, "after delete, b's shared prefix stays")
    check(c.get("py", a, raw=True) == kva, "a intact after deleting b")
    big = seqkv.Client(sock, timeout=30)
    check(big.lookup("py", a) == 50, "second connection sees the same tenant")
    big.close()
    redis_check(sock, a, kva)


def layers_check(c, a, kva):
    """get_layers (KV.GET ... LAYERS): one layer at a time, the same bytes
    as get(); a miss raises at the call; the connection refuses other
    commands until the stream is read or closed."""
    per = 2 * H * D * ES                  # bytes of one token of one layer
    stream = c.get_layers("py", a, raw=True)
    check(stream.layers == L, "get_layers: %d layers, wanted %d" % (stream.layers, L))
    try:
        c.ping()
        check(False, "a command while a LAYERS stream is open was accepted")
    except RuntimeError:
        pass
    got = list(stream)
    check(len(got) == L and stream.received == L, "get_layers yields %d layers" % len(got))
    for i, layer in enumerate(got):
        check(layer == kva[i * 50 * per:(i + 1) * 50 * per], "get_layers layer %d bit-exact" % i)
    check(c.ping() == "PONG", "connection usable after a whole stream")
    stream = c.get_layers("py", a, n=20, raw=True)
    first = next(stream)
    half = H * D * ES                     # K (or V) of one token
    check(first == kva[:20 * half] + kva[50 * half:70 * half],
          "get_layers n=20: layer 0 is K then V of the first 20 tokens")
    stream.close()
    check(c.ping() == "PONG", "connection usable after closing a stream half-way")
    try:
        c.get_layers("py", [999999])
        check(False, "get_layers of an uncached prefix did not raise")
    except seqkv.Error as e:
        check(e.code == "NOTFOUND", "get_layers miss: %s" % e)
    if np is not None:
        arrs = list(c.get_layers("py", a, n=30))
        want = np.frombuffer(kva, dtype="<u2").reshape(L, 2, 50, H, D)
        check(all(x.shape == (2, 30, H, D) and np.array_equal(x, want[i, :, :30])
                  for i, x in enumerate(arrs)), "get_layers numpy layers")
    check(c.ping() == "PONG", "connection usable after get_layers")


def redis_check(sock, a, kva):
    try:
        import redis
    except ImportError:
        print("redis-py absent (Debian: python3-redis): redis-py check skipped")
        return
    r = redis.Redis(unix_socket_path=sock, socket_timeout=30)
    check(r.ping() is True, "redis-py PING")
    check(r.execute_command("KV.LOOKUP", "py", toks(a)) == 50, "redis-py KV.LOOKUP")
    check(r.execute_command("KV.GET", "py", toks(a)) == kva, "redis-py KV.GET bit-exact")
    e = [5, 6, 7, 8]
    kve = kv_for(e, 3)
    check(r.execute_command("KV.PUT", "py", toks(e), kve) == 4, "redis-py KV.PUT")
    check(r.execute_command("KV.GET", "py", toks(e), 2) == kv_for(e[:2], 3),
          "redis-py KV.GET n=2 bit-exact")
    try:
        r.execute_command("KV.GET", "py", toks([424242]))
        check(False, "redis-py: KV.GET miss should be an error")
    except redis.ResponseError as ex:
        check(str(ex).startswith("KV.GET") or "cached" in str(ex), "redis-py miss: %s" % ex)
    r.close()
    print("redis-py %s: checked" % redis.__version__)


if __name__ == "__main__":
    socket.setdefaulttimeout(60)
    main()
