#!/usr/bin/python3
"""SIGTERM while the server's background thread works at a real model's
shape: how long `seqkv serve` takes to exit, and whether the store opens
clean after it.

usage: /usr/bin/python3 bench/scale_stop.py [--shape llama3-8b] [--tokens 8192]
           [--build build-release]

For each of the two background jobs (a self-calibration; the compaction
that follows it), in a fresh temporary store: --tokens of the shape's
synthetic KV (bench/scale_kv.py) are put raw in 512-token KV.PUTs to a
profile that calibrates itself once it holds them, then compacts (codes
what it stored raw); the bench polls INFO maintenance until
`self_calibration_running` (or, after the calibration, `compaction_running`)
is 1, waits 2 s more (1 s for the compaction, a few seconds long) so the
work is well under way, sends SIGTERM and times the exit. Then a server
starts on the same store, and every sequence is read back and compared with
its BLAKE2b digest. Exit 1 on a mismatch, a server that exits non-zero, or
one that has not exited after 120 s (the figure, not an assertion, is the
point: the issue's bound is 5 s). Temporary files are removed."""
import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

from scale import Fail, digest, log, start_seqkv, stop  # noqa: E402
from scale_kv import SHAPES, SynthSource  # noqa: E402
from scale_resp import Resp, info  # noqa: E402


def one_case(args, job, root):
    tmp = tempfile.mkdtemp(prefix="seqkv-stop-", dir=root)
    srv = None
    try:
        src = SynthSource(args.shape, SHAPES[args.shape], 1, 512)
        nseq = args.tokens // 512
        cfg = os.path.join(tmp, "seqkv.conf")
        with open(cfg, "w") as f:
            f.write("tenant bench uid %d\ntenant bench admin\ncompact-interval 0\n" % os.getuid())
        os.chmod(cfg, 0o600)
        db, sock, slog = (os.path.join(tmp, x) for x in ("db", "s.sock", "serve.log"))
        srv, _ = start_seqkv(args, db, sock, cfg, slog)
        c, mon = Resp(sock), Resp(sock, timeout=60)
        c.call("KV.PROFILE", "SET", "p", *src.profile_args(args.tokens))
        digests, toks_all = [], []
        for i in range(nseq):
            toks, kv = src.seq(i)
            digests.append(digest(kv))
            toks_all.append(toks.copy())
            c.call("KV.PUT", "p", toks.tobytes(), kv)
        key = "self_calibration_running" if job == "calibration" else "compaction_running"
        t0 = time.perf_counter()
        while job == "compaction" and info(mon, "maintenance")["self_calibrations"] == "0":
            if time.perf_counter() - t0 > 300:
                raise Fail("the profile did not calibrate itself within 300 s")
            time.sleep(0.02)
        while info(mon, "maintenance")[key] != "1":
            if time.perf_counter() - t0 > 300:
                raise Fail("%s: %s never became 1" % (job, key))
            time.sleep(0.02)
        lead = 2.0 if job == "calibration" else 1.0
        time.sleep(lead)
        m = info(mon, "maintenance")
        c.close()
        mon.close()
        secs, rc = stop(srv)
        srv = None
        log("%s at %s, %d tokens: SIGTERM %.0f s into it (%s %s, progress %s): exit %d in %.2f s"
            % (job, args.shape, args.tokens, lead, key, m[key], m["compaction_progress"], rc, secs))
        if rc != 0:
            raise Fail("the server exited %d" % rc)
        srv, start_s = start_seqkv(args, db, sock, cfg, slog)
        c = Resp(sock)
        for i in range(nseq):
            got = c.call("KV.GET", "p", toks_all[i].tobytes())
            if digest(got) != digests[i]:
                raise Fail("sequence %d differs after the restart" % i)
        c.close()
        stop(srv)
        srv = None
        log("%s: the store opened again in %.2f s, %d sequences exact" % (job, start_s, nseq))
        return secs
    finally:
        if srv is not None:
            stop(srv)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="llama3-8b", choices=[s for s in SHAPES
                                                            if not SHAPES[s].get("model")])
    ap.add_argument("--tokens", type=int, default=8192, help="stored tokens (multiple of 512)")
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build-release"))
    ap.add_argument("--tmpdir", default=None)
    args = ap.parse_args()
    args.seqkv = os.path.join(args.build, "cli", "seqkv")
    args.threads, args.max_wait = 0, 120
    if args.tokens % 512 or args.tokens < 1024:
        ap.error("--tokens: a multiple of 512, at least 1024")
    try:
        for job in ("calibration", "compaction"):
            one_case(args, job, args.tmpdir)
    except Fail as e:
        print("scale_stop: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
