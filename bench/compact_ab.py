#!/usr/bin/python3
"""Two seqkv builds' compaction of the same store, alternating: a store of
raw sequences of a real model's shape (bench/scale_kv.py's synthetic KV,
put through `seqkv serve`, then KV.CALIBRATE), copied afresh for every
run of `seqkv compact`; each run's wall time and CPU time (user + system,
from the child's rusage) and the bytes it stored (both builds must store
the same), then the medians and after/before. A change to the compaction
is measured here rather than through bench/scale.py, whose compaction
figure moves with the machine from run to run.

usage: /usr/bin/python3 bench/compact_ab.py BEFORE_SEQKV AFTER_SEQKV
           [--shape llama3-8b] [--seqs 16] [--seq-len 512] [--rounds 3]
           [--threads N] [--tmpdir DIR] [--made-by before|after]
The store is made by AFTER_SEQKV (--made-by: by either; its format must be
one the other reads: a store with value files, FORMAT 18, is not one that
a build before reads, so make it with BEFORE then);
--threads is passed to both compactions only when given (a build before
`seqkv compact --threads` codes on one thread)."""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from scale import SHAPES, Fail, cpu_name, start_seqkv, stop  # noqa: E402
from scale_kv import SynthSource  # noqa: E402
from scale_resp import Resp  # noqa: E402


def make_store(args, db):
    tmp = os.path.dirname(db)
    cfg = os.path.join(tmp, "seqkv.conf")
    with open(cfg, "w") as f:
        f.write("tenant default uid %d\ntenant default admin\ncompact-interval 0\n" % os.getuid())
    sock = os.path.join(tmp, "s.sock")
    p, _ = start_seqkv(args, db, sock, cfg, os.path.join(tmp, "log"))
    try:
        c = Resp(sock)
        src = SynthSource(args.shape, SHAPES[args.shape], 1, args.seq_len)
        c.call("KV.PROFILE", "SET", "p", *src.profile_args(-1))
        for i in range(args.seqs):
            toks, kv = src.seq(i)
            c.call("KV.PUT", "p", toks, kv)
            sys.stderr.write("put %d/%d\r" % (i + 1, args.seqs))
        sys.stderr.write("\n")
        c.call("KV.CALIBRATE", "p")
        c.close()
    finally:
        stop(p)


def compact(exe, store, work, threads):
    """(wall s, CPU s, stored bytes) of `exe compact` on a fresh copy of store"""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(store, work)
    os.sync()
    cmd = [exe, "compact", "--db", work] + (["--threads", str(threads)] if threads else [])
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    m = re.search(r"records coded again, \d+ -> (\d+) bytes", err)
    if p.returncode or not m:
        raise Fail("%s compact failed (%d): %s" % (exe, p.returncode, err.strip()[-300:]))
    return wall, ru.ru_utime + ru.ru_stime, int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--shape", default="llama3-8b", choices=[s for s in SHAPES
                                                             if not SHAPES[s].get("model")])
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--tmpdir", default=None)
    ap.add_argument("--made-by", choices=("before", "after"), default="after")
    args = ap.parse_args()
    if args.seqs < 1 or args.seq_len < 1 or args.rounds < 1 or args.threads < 0:
        ap.error("--seqs, --seq-len and --rounds want positive integers")
    args.seqkv, args.max_wait = getattr(args, args.made_by), 60
    tmp = tempfile.mkdtemp(prefix="seqkv-compact-ab-", dir=args.tmpdir)
    try:
        store = os.path.join(tmp, "db")
        make_store(args, store)
        runs = {"before": [], "after": []}
        for r in range(args.rounds):
            for name in ("before", "after"):
                runs[name].append(compact(getattr(args, name), store, os.path.join(tmp, "work"),
                                          args.threads))
                w, c, b = runs[name][-1]
                print("round %d %-6s %6.2f s wall %6.2f s CPU %d bytes" % (r + 1, name, w, c, b))
                sys.stdout.flush()
        stored = {b for name in runs for _, _, b in runs[name]}
        if len(stored) != 1:
            raise Fail("the builds stored different bytes: %s" % sorted(stored))
        med = {n: (statistics.median(x[0] for x in runs[n]), statistics.median(x[1] for x in runs[n]))
               for n in runs}
        print("%s, %d CPUs; %s, %d x %d tokens raw; medians of %d rounds:"
              % (cpu_name(), os.cpu_count(), args.shape, args.seqs, args.seq_len, args.rounds))
        print("wall %.2f -> %.2f s (%.2fx); CPU %.2f -> %.2f s (%.2fx)"
              % (med["before"][0], med["after"][0], med["before"][0] / med["after"][0],
                 med["before"][1], med["after"][1], med["before"][1] / med["after"][1]))
        return 0
    except Fail as e:
        sys.stderr.write("compact_ab.py: FAIL: %s\n" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
