#!/usr/bin/python3
"""What bounds a raw KV.PUT: seqkv's raw PUT of a 64 MiB value beside dd
(bs=1M conv=fdatasync, the issue's baseline) and beside bench/put_floor.c,
a server that only receives the value, seals it in 1 MiB pieces
(ChaCha20-Poly1305, as seqkv's records are sealed), writes it to a file
of its own and fdatasyncs it before replying -- and the same without the
sealing, and the same with each piece's writeback started as it is
written (sync_file_range: the disk works while the value still arrives).
All the servers get the same bytes from the same client
(bench/scale_resp.py's: arguments sent from their own buffers), on the
same filesystem, in alternating rounds; each figure is the median of its
rounds and each ratio is over dd's median in the same run.

The floor is what any durable, encrypted PUT over a Unix socket costs on
this machine whatever the store's design (the writeback row: one that
also seals and writes as it receives); seqkv's figure over the
floor's is what its own design adds (the record, LMDB's pages, the hot
tier's copy).

usage: /usr/bin/python3 bench/put_floor.py [--build DIR] [--rounds N]
           [--mib M] [--tmpdir DIR]
The 8B shape (32 layers x 8 KV heads x 128, bf16, 128 KiB a token): a
value of M MiB is M x 8 tokens; each PUT stores new tokens (a profile
that never calibrates, so every PUT is stored raw)."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from scale import Fail, cpu_name, dd_seconds, dd_source, start_seqkv, stop  # noqa: E402
from scale_resp import Resp  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build-release"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--tmpdir", default=None)
    args = ap.parse_args()
    args.seqkv = os.path.join(args.build, "cli", "seqkv")
    floor = os.path.join(args.build, "bench", "put_floor")
    for exe in (args.seqkv, floor):
        if not os.access(exe, os.X_OK):
            sys.exit("put_floor.py: no %s (meson compile -C %s)" % (exe, args.build))
    args.threads, args.max_wait = 0, 60
    if args.rounds < 1 or args.mib < 1:
        ap.error("--rounds and --mib want positive integers")
    tmp = tempfile.mkdtemp(prefix="seqkv-floor-", dir=args.tmpdir)
    procs = []
    try:
        L, H, D = 32, 8, 128
        ntok = args.mib * 8
        value = np.frombuffer(os.urandom(ntok * L * 2 * H * D * 2), np.uint16)
        cfg = os.path.join(tmp, "seqkv.conf")
        with open(cfg, "w") as f:
            f.write("tenant bench uid %d\ntenant bench admin\ncompact-interval 0\n" % os.getuid())
        sock = os.path.join(tmp, "seqkv.sock")
        p, _ = start_seqkv(args, os.path.join(tmp, "db"), sock, cfg, os.path.join(tmp, "log"))
        procs.append(p)
        seqkv = Resp(sock)
        seqkv.call("KV.PROFILE", "SET", "p", "layers", L, "kv_heads", H, "head_dim", D,
                   "dtype", "bf16", "level", "ctx", "chunk", 256, "auto-calibrate", -1)
        floors = {}
        for name, extra in (("floor", []), ("floor, no seal", ["--no-seal"]),
                            ("floor, writeback", ["--writeback"])):
            d = os.path.join(tmp, name.replace(", ", "-").replace(" ", "-"))
            os.mkdir(d)
            fs = os.path.join(d, "s.sock")
            procs.append(subprocess.Popen([floor, fs, d] + extra))
            for _ in range(500):
                if os.path.exists(fs):
                    break
                time.sleep(0.01)
            floors[name] = Resp(fs)
        times = {k: [] for k in ("dd", "seqkv", "floor", "floor, no seal", "floor, writeback")}
        rng = np.random.Generator(np.random.SFC64(7))
        dd_src = dd_source(tmp, args.mib << 20)
        for r in range(args.rounds):
            times["dd"].append(dd_seconds(tmp, dd_src))
            toks = rng.integers(0, 128256, ntok, dtype=np.uint32)
            toks[0] = r  # (every PUT new from its first token)
            for name, c in [("seqkv", seqkv)] + list(floors.items()):
                t0 = time.perf_counter()
                got = c.call("KV.PUT", "p", toks, value)
                times[name].append(time.perf_counter() - t0)
                if name == "seqkv" and got != ntok:
                    raise Fail("seqkv stored %r of %d tokens" % (got, ntok))
            sys.stderr.write("round %d/%d\r" % (r + 1, args.rounds))
        sys.stderr.write("\n")
        nb = args.mib * 1048576
        dd = nb / statistics.median(times["dd"]) / 1e6
        print("raw PUT of %d MiB (%d tokens of the 8B shape), %d rounds, %s, %d CPUs, under %s"
              % (args.mib, ntok, args.rounds, cpu_name(), os.cpu_count(), tmp))
        print("%-16s %8s %6s %8s" % ("", "MB/s", "/dd", "ms"))
        for name in ("dd", "seqkv", "floor", "floor, no seal", "floor, writeback"):
            s = statistics.median(times[name])
            print("%-16s %8.0f %6.2f %8.1f" % (name, nb / s / 1e6, nb / s / 1e6 / dd, s * 1e3))
        print("(medians of the rounds; dd: bs=1M conv=fdatasync of the same size; floor: "
              "bench/put_floor.c)")
        return 0
    except Fail as e:
        sys.stderr.write("put_floor.py: FAIL: %s\n" % e)
        return 1
    finally:
        for p in procs[1:]:
            p.kill()
            p.wait()
        if procs:
            stop(procs[0])
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
