#!/usr/bin/python3
"""GET of a 1k-token prefix three ways, in one run: from the local tier
(the host that put it), from the remote tier (a new host's first GET:
LOOKUP misses locally, the records are fetched from the Redis Cluster,
verified, installed, then served) and by recomputing it with the model
(prefill, the engine's own forward pass, one thread and all of them).

The model is a random-weight llama2.c model of a mid-sized shape
(bench_randmodel: dim 512, 8 layers, 8 KV heads of 64, bf16 KV: 16 KiB a
token, 16 MiB for the prefix) -- stories260K stops at 512 positions. Its
KV is as incompressible as real KV at raw level, which is what a fresh
profile stores.

usage: SEQKV_SOURCE_ROOT=$PWD /usr/bin/python3 bench/remote_bench.py [BUILD] [--reps N]
(BUILD: a release build directory, default build-release)"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

root = os.environ.get("SEQKV_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(root, "tests"))
sys.path.insert(0, os.path.join(root, "python"))
import pyfixture  # noqa: E402
import seqkv  # noqa: E402

TOKENS = 1024
SHAPE = dict(dim=512, hidden=1376, layers=8, heads=8, kv_heads=8)


def cpu():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build-release")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    seqkv_bin = os.path.join(a.build, "cli", "seqkv")
    tmp = tempfile.mkdtemp(prefix="seqkv-rbench-")
    cl = None
    hosts = []
    try:
        model = os.path.join(tmp, "m.bin")
        subprocess.run([os.path.join(a.build, "bench", "bench_randmodel"), str(SHAPE["dim"]),
                        str(SHAPE["hidden"]), str(SHAPE["layers"]), str(SHAPE["heads"]),
                        str(SHAPE["kv_heads"]), model, "7", "2048"], check=True,
                       capture_output=True)
        # recompute: the engine's prefill of the prefix (best of reps)
        out = subprocess.run([os.path.join(a.build, "bench", "bench_prefill"), model, "--seqs",
                              "1", "--len", str(TOKENS), "--reps", str(a.reps)],
                             check=True, capture_output=True, text=True).stdout
        tps = {}
        for line in out.splitlines():
            m = re.match(r"^(fp32|int8|fp8)\s+(\d+)\s+(\d+)", line)
            if m:
                tps[(m.group(1), int(m.group(2)))] = float(m.group(3))
        toks = pyfixture.sample(seqkv_bin, 1, TOKENS, 5, model=model)[0][:TOKENS]
        (_, k, v), = pyfixture.model_kv(seqkv_bin, [toks], model=model)
        import numpy as np
        kv = np.ascontiguousarray(np.stack([k, v], axis=1)).tobytes()
        L, H, D = k.shape[0], k.shape[2], k.shape[3]

        cl = pyfixture.Cluster(root)
        keyfile = os.path.join(tmp, "fleet.key")
        conf = "tenant a token tok-a-000000001\ntenant a admin\n"

        def host():
            h = pyfixture.Server(seqkv_bin, conf, extra=["--remote", "redis-cluster://" + cl.seeds,
                                                         "--remote-key", keyfile])
            hosts.append(h)
            c = seqkv.Client(h.sock, timeout=120)
            c.call("AUTH", "a", "tok-a-000000001")
            c.profile_set("m", layers=L, kv_heads=H, head_dim=D, dtype="bf16", chunk=256)
            return h, c

        A, ca = host()
        ca.put("m", toks, kv)
        for _ in range(200):  # the writer's backlog drained
            if "remote_backlog:0" in ca.info("remote"):
                break
            time.sleep(0.05)
        local = []
        for _ in range(a.reps * 4):
            t0 = time.perf_counter()
            got = ca.get("m", toks, raw=True)
            local.append(time.perf_counter() - t0)
            assert got == kv
        remote = []
        for _ in range(a.reps):
            B, cb = host()
            t0 = time.perf_counter()
            got = cb.get("m", toks, raw=True)
            remote.append(time.perf_counter() - t0)
            assert got == kv, "remote GET not exact"
            cb.close()
            B.close()
            hosts.remove(B)
        rec1 = TOKENS / tps[("fp32", 1)]
        recn = TOKENS / max(v for (e, t), v in tps.items() if e == "fp32")
        ml, mr = statistics.median(local), statistics.median(remote)
        print("remote_bench: %s; %d tokens, %.1f MiB of bf16 KV; %s" %
              (cpu(), TOKENS, len(kv) / 2**20, time.strftime("%Y-%m-%d")))
        print("%-44s %10s %12s" % ("way", "median ms", "vs recompute"))
        print("%-44s %10.1f %11.1fx" % ("GET, local tier (the host that put it)", ml * 1e3,
                                         rec1 / ml))
        print("%-44s %10.1f %11.1fx" % ("GET, remote tier (a new host's first GET)", mr * 1e3,
                                         rec1 / mr))
        print("%-44s %10.1f %11s" % ("recompute: prefill, fp32, 1 thread", rec1 * 1e3, "1.0x"))
        print("%-44s %10.1f %11.1fx" % ("recompute: prefill, fp32, best thread count",
                                         recn * 1e3, rec1 / recn))
        print("(local: %d GETs, remote: %d new hosts; remote min %.1f ms, max %.1f ms)" %
              (len(local), len(remote), min(remote) * 1e3, max(remote) * 1e3))
    finally:
        for h in hosts:
            h.close()
        if cl:
            cl.close()
        shutil.rmtree(tmp, ignore_errors=True)


main()
