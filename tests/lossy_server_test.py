#!/usr/bin/python3
"""The opt-in lossy tier through the server, on stories260K KV: a profile
with `lossy q3` stores exactly until KV.CALIBRATE gives it its lossy
calibration; then new prefixes are stored lossy. KV.GET without LOSSY is
-NOTFOUND saying the prefix is stored lossy; with LOSSY it is the
reconstruction, whose exact window (the first lossy-sink and last
lossy-recent positions of the put) is bit-exact and the rest close; the
streamed KV.GET ... LAYERS LOSSY gives the same bytes; INFO and KV.STATS
count the lossy records apart; KV.LOOKUP sees the prefix as cached.

Usage: lossy_server_test.py SEQKV_BIN PYTHON_DIR"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyfixture  # noqa: E402

seqkv_bin, pydir = sys.argv[1], sys.argv[2]
sys.path.insert(0, pydir)
import numpy as np  # noqa: E402
import seqkv  # noqa: E402

failures = []
SINK, RECENT = 4, 16


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def text(x):
    return x.decode() if isinstance(x, bytes) else x


def as_dict(reply):
    """a RESP map (RESP2: a flat array) with str keys"""
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {text(k): v for k, v in reply.items()}


def store_layout(k, v):
    """[layers, T, H, D] K and V -> the store layout [layers, 2, T, H, D]"""
    return np.stack([k, v], axis=1)


def main():
    model = pyfixture.model_path()
    if not model:
        print("SKIP: ../shared/models/stories260K.bin not present")
        return 77
    seqs = pyfixture.sample(seqkv_bin, 12, 160, 31)
    kvs = pyfixture.model_kv(seqkv_bin, seqs)
    with pyfixture.Server(seqkv_bin) as srv:
        c = seqkv.Client(srv.sock)
        check(c.call("KV.PROFILE", "SET", "p", "model", model, "lossy", "q3", "lossy-sink", str(SINK),
                     "lossy-recent", str(RECENT), "auto-calibrate", "0", "chunk", "64") == "OK",
              "profile with lossy q3")
        for toks, k, v in kvs[:10]:
            c.put("p", toks, store_layout(k, v).tobytes())
        # before its lossy calibration: exact
        t0, k0, v0 = kvs[0]
        got = c.get("p", t0)
        check(np.array_equal(got, store_layout(k0, v0)), "exact before the lossy calibration")
        check(c.call("KV.CALIBRATE", "p") == "OK", "KV.CALIBRATE learns the lossy tier too")
        prof = as_dict(c.call("KV.PROFILE", "GET", "p"))
        check(int(prof["lossy_calibrated"]) == 1, "KV.PROFILE GET: lossy_calibrated 1 (%r)" % prof)
        toks, k, v = kvs[10]
        c.put("p", toks, store_layout(k, v).tobytes())
        n = len(toks)
        check(c.lookup("p", toks) == n, "KV.LOOKUP sees the lossy prefix")
        try:
            c.get("p", toks)
            check(False, "KV.GET without LOSSY refused")
        except seqkv.Error as e:
            msg = str(e)
            check(msg.startswith("NOTFOUND") and "lossy" in msg and "LOSSY" in msg,
                  "the refusal says why: %s" % msg)
        got = c.get("p", toks, lossy=True)
        want = store_layout(k, v)
        check(got.shape == want.shape, "shape %r" % (got.shape,))
        exact = list(range(SINK)) + list(range(n - RECENT, n))
        check(np.array_equal(got[:, :, exact], want[:, :, exact]), "the window is bit-exact")
        mid = slice(SINK, n - RECENT)
        check(not np.array_equal(got[:, :, mid], want[:, :, mid]), "the rest is lossy")
        f = lambda a: (a.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
        rel = np.linalg.norm(f(got[:, :, mid]) - f(want[:, :, mid])) / np.linalg.norm(f(want[:, :, mid]))
        print("q3 relative error through the server: %.4f" % rel)
        check(rel < 0.5, "q3 relative error %.3f" % rel)
        layers = list(c.get_layers("p", toks, lossy=True))
        check(all(np.array_equal(layers[i], got[i]) for i in range(len(layers))),
              "KV.GET ... LAYERS LOSSY: the same bytes")
        info = text(c.call("INFO"))
        line = [x for x in info.split("\r\n") if x.startswith("lossy:")]
        check(line and "tokens=%d" % n in line[0], "INFO lossy: %r" % line)
        st = as_dict(c.call("KV.STATS"))
        check(int(st["lossy_tokens"]) == n, "KV.STATS lossy_tokens %r" % st.get("lossy_tokens"))
        # an exact prefix stored before needs no flag
        check(np.array_equal(c.get("p", kvs[1][0]), store_layout(kvs[1][1], kvs[1][2])),
              "earlier prefixes stay exact")
        c.close()
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("OK: lossy tier through the server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
