#!/usr/bin/python3
"""How every cost of seqkv grows with the tokens it stores, at real model
shapes, measured through `seqkv serve` over its Unix socket, with the
baselines (dd to the same filesystem, redis-server on a Unix socket)
measured in the same run.

usage: /usr/bin/python3 bench/scale.py [--shapes a,b] [--sizes 1024,8192,32768]
           [--quick] [--json FILE] [--png FILE] [--build DIR] ...  (--help)
       bench/scale.sh [same arguments]   (installs what it uses first)

Shapes: llama3-8b, qwen3-8b, llama3-70b, qwen3-0.6b and deepseek-v3 with
synthetic KV (seeded, deterministic, numpy); stories260k with the real KV
of ../shared/models/stories260K.bin (or $SEQKV_MODEL; skipped, saying so,
when the file is absent). The head of bench/scale_kv.py documents every
shape, how deepseek-v3's MLA latent is mapped onto a K and a V, and the
synthetic generator.
The bench keeps a BLAKE2b-256 digest of every sequence put and compares
every GET reply with it (a mismatch regenerates the sequence to name the
first differing scalar, and the run fails).

The bench's files, all in bench/: scale.py (this one: the processes, the
run of one point, main), scale_kv.py (the shapes and the KV sources),
scale_resp.py (the RESP client, INFO parsing, /proc readings),
scale_report.py (the tables, their legend, the PNG); scale.sh runs it.

Each (shape, N stored tokens) point, in a fresh temporary directory (under
--tmpdir, the filesystem the store is on):
  1. baselines: dd of 64 MiB of random bytes to that filesystem
     (bs=1M conv=fdatasync; the JSON's dd_first_mbps); redis-server on a
     Unix socket (no persistence): timed SETs of one sequence's KV, then
     timed GETs of it, with the client code the seqkv PUTs and GETs use (a
     minimal RESP client: arguments sent from their own buffers, replies
     received into one reused buffer); once a shape, the coder's encode
     rate on one thread at ctx (`seqkv codec bench --level ctx --no-zstd`,
     calibrated on two sequences of the shape and coding a third, at most
     256 tokens each), the baseline of the compaction's target (one core's
     encode rate x the server's threads).
  2. `seqkv serve` with a config that makes this uid an admin tenant and
     sets compact-interval 0 (compaction only after a self-calibration);
     KV.PROFILE SET ... level ctx chunk 256 auto-calibrate <positions the N
     tokens will hold>.
  3. N/seq-len KV.PUTs, each timed: raw PUT MB/s and tokens/s (the profile
     stores raw until it is calibrated); before each, a dd of the same
     size to the same filesystem, timed (the table's dd: a disk's write
     cache makes a dd on an idle disk several times faster than one after
     gigabytes of PUTs, so PUTs and dds alternate, as in put_floor.py).
  4. the PUT that crosses the threshold makes the server's background thread
     calibrate the profile, then compact (re-code what was stored raw):
     INFO maintenance and /proc/<pid>/status (VmRSS, RssAnon) are polled
     every 50 ms: calibration time (from that PUT's reply to
     self_calibrations 1), compaction time and MB/s (raw bytes it re-codes /
     its time), RssAnon before, its peak during each, and after both, beside
     the hot tier's budget (INFO cache_budget_bytes). --max-wait bounds it.
  5. --coded-puts more PUTs (coded PUT MB/s); a KV.GET of every stored
     sequence, twice (the second is the hot figure), then the server is
     restarted on the same store with --cache-bytes 0 and every sequence
     read again (cold: decoded from LMDB; the OS page cache is left warm).
  6. bytes on disk (du -sB1: LMDB's map file is sparse, so real blocks),
     INFO store (raw vs stored bytes, ratio).
  7. SIGTERM: how long the server takes to exit; every temporary file is
     removed.
MB/s is 10^6 bytes a second (as dd prints it), of raw bf16 KV bytes.
Timings are printed, never asserted; a GET that differs from its PUT, a
server error or a server that exits non-zero fails the run (exit 1)."""
import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.environ.get("SEQKV_SOURCE_ROOT", os.path.join(HERE, "..")))

# the sibling modules, found from any cwd, and no __pycache__ left in bench/
sys.dont_write_bytecode = True
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from scale_kv import (SHAPES, StoriesSource, SynthSource, positions_held,  # noqa: E402
                      write_kvfile)
from scale_report import draw_png, fmt_bytes, print_tables  # noqa: E402
from scale_resp import (Resp, RespError, info, info_fields, proc_cpu, proc_status,  # noqa: E402
                        server_usec)

DD_BYTES = 64 << 20
POLL_S = 0.05
# the server's log lines of a failed background step (server/maintain.c:
# a successful compaction logs "compaction: N records coded again ...")
BG_ERROR = re.compile(r"self-calibration: |compaction: (?!\d+ records coded again)")

# --quick: shape -> (sizes, seq-len); a shape not named takes QUICK_SYNTH
QUICK = {"stories260k": ((1024, 2048), 512)}
QUICK_SYNTH = ((256, 512), 256)
DEFAULT_SIZES = (1024, 8192, 32768)
DEFAULT_SEQ_LEN = 512


class Fail(Exception):
    """a failure that ends the run (exit 1)"""


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def mb(nbytes, seconds):
    return nbytes / seconds / 1e6 if seconds > 0 else float("nan")


def digest(buf):
    return hashlib.blake2b(memoryview(buf).cast("B"), digest_size=32).digest()


# --------------------------------------------------------------------------
# processes

def start_seqkv(args, db, sock, cfg, logpath, extra=()):
    cmd = [args.seqkv, "serve", "--db", db, "--socket", sock, "--config", cfg]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += list(extra)
    logf = open(logpath, "ab")
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    logf.close()
    deadline = t0 + args.max_wait
    while True:
        if p.poll() is not None:
            raise Fail("seqkv serve exited at start-up (rc %d):\n%s"
                       % (p.returncode, tail(logpath)))
        try:
            c = Resp(sock, timeout=5)
            if c.call("PING") == "PONG":
                c.close()
                return p, time.perf_counter() - t0
            c.close()
        except OSError:
            pass
        if time.perf_counter() > deadline:
            stop(p)
            raise Fail("seqkv serve did not answer within %d s" % args.max_wait)
        time.sleep(0.02)


def stop(p, timeout=120):
    """SIGTERM; (seconds to exit, rc); SIGKILL past timeout"""
    if p is None or p.poll() is not None:
        return 0.0, (p.returncode if p else 0)
    t0 = time.perf_counter()
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise Fail("the server did not exit within %d s of SIGTERM (killed)" % timeout)
    return time.perf_counter() - t0, p.returncode


def tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def dd_seconds(tmp, src):
    """seconds of dd bs=1M conv=fdatasync of file src to tmp (removed after)"""
    dst = os.path.join(tmp, "dd.bin")
    r = subprocess.run(["dd", "if=" + src, "of=" + dst, "bs=1M", "conv=fdatasync"],
                       capture_output=True, text=True)
    if os.path.exists(dst):
        os.unlink(dst)
    m = re.search(r"^(\d+) bytes.*copied, ([0-9.eE+-]+) s", r.stderr, re.M)
    if r.returncode != 0 or not m:
        raise Fail("dd failed: %s" % r.stderr.strip())
    return float(m.group(2))


def dd_source(tmp, nbytes):
    """a file of nbytes random bytes in tmp for dd_seconds"""
    src = os.path.join(tmp, "rand.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(nbytes))
    return src


def dd_baseline(tmp):
    """MB/s of one dd of DD_BYTES to tmp"""
    src = dd_source(tmp, DD_BYTES)
    try:
        return mb(DD_BYTES, dd_seconds(tmp, src))
    finally:
        os.unlink(src)


def encode_baseline(args, src, tmp):
    """one thread's ctx encode rate on this shape's KV, in MB/s of raw bf16
    (`seqkv codec bench`: the best of 3 passes on the thread's CPU clock);
    measured once a shape and kept in args.encode_mbps"""
    if src.name in args.encode_mbps:
        return args.encode_mbps[src.name]
    n = getattr(src, "seqs", None)
    idx = [0, 1, 2] if n is None or len(n) >= 3 else [0, 0, 0]
    cal, test = os.path.join(tmp, "enc-cal.safetensors"), os.path.join(tmp, "enc-test.safetensors")
    write_kvfile(cal, [lambda i=i: src.seq(i) for i in idx[:2]], 256)
    write_kvfile(test, [lambda: src.seq(idx[2])], 256)
    cmd = [args.seqkv, "codec", "bench", "--calib", cal, "--test", test, "--level", "ctx",
           "--no-zstd", "--json"]
    if getattr(src, "model", None):
        cmd += ["--model", src.model]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode and "--no-zstd" in r.stderr:  # (a build before that option)
        r = subprocess.run([a for a in cmd if a != "--no-zstd"], capture_output=True, text=True)
    os.unlink(cal)
    os.unlink(test)
    rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    rows = [x for x in rows if x.get("level") == "ctx" and "encode_msps" in x]
    if r.returncode or not rows:
        raise Fail("seqkv codec bench failed (%d): %s" % (r.returncode, r.stderr.strip()[-400:]))
    args.encode_mbps[src.name] = rows[0]["encode_msps"] * 2.0  # bf16: 2 bytes a scalar
    return args.encode_mbps[src.name]


def redis_baseline(args, tmp, kv, reps):
    """(SET MB/s, GET MB/s of the value kv, redis-server version): reps
    timed SETs of it (more for a small value: at least 64 MiB in all, at
    most 256 of them), one warm-up GET, as many timed GETs, each checked"""
    reps = max(reps, min(256, -(-DD_BYTES // kv.nbytes)))
    sock = os.path.join(tmp, "r.sock")
    p = subprocess.Popen([args.redis_server, "--port", "0", "--unixsocket", sock,
                          "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                          "--proto-max-bulk-len", str(max(512 << 20, 2 * kv.nbytes)),
                          "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        c = None
        for _ in range(500):
            try:
                c = Resp(sock, timeout=30)
                if c.call("PING") == "PONG":
                    break
            except (OSError, RespError):
                c = None
            time.sleep(0.02)
        if c is None:
            raise Fail("redis-server did not start:\n" + tail(os.path.join(tmp, "redis.log")))
        ver = info(c, "server").get("redis_version", "?")
        ts = 0.0
        for _ in range(reps):
            t0 = time.perf_counter()
            c.call("SET", "kv", kv)
            ts += time.perf_counter() - t0
        want = digest(kv)
        c.reserve(kv.nbytes)
        c.call_into("GET", "kv")
        tt = 0.0
        for _ in range(reps):
            t0 = time.perf_counter()
            got = c.call_into("GET", "kv")
            tt += time.perf_counter() - t0
            if digest(got) != want:
                raise Fail("redis-server returned other bytes than were SET")
        c.close()
        return mb(kv.nbytes * reps, ts), mb(kv.nbytes * reps, tt), ver
    finally:
        stop(p, 30)


# --------------------------------------------------------------------------
# one (shape, size) point

def check_reply(src, i, got, want_digest, what):
    if digest(got) == want_digest:
        return
    toks, kv = src.seq(i)
    ref = memoryview(kv).cast("B")
    detail = "length %d, expected %d" % (len(got), len(ref))
    if len(got) == len(ref):
        a = np.frombuffer(got, np.uint16)
        b = np.frombuffer(ref, np.uint16)
        d = np.nonzero(a != b)[0]
        if len(d):
            L, T, H, D = src.L, len(toks), src.H, src.D
            j = int(d[0])
            layer, rem = divmod(j, 2 * T * H * D)
            kvi, rem = divmod(rem, T * H * D)
            t, rem = divmod(rem, H * D)
            h, ch = divmod(rem, D)
            detail = ("%d of %d scalars differ; the first at layer %d %s token %d head %d "
                      "channel %d: got 0x%04x, put 0x%04x"
                      % (len(d), len(a), layer, "kv"[kvi], t, h, ch, a[j], b[j]))
        else:
            detail = "same bytes on regeneration: the digest kept was wrong"
    raise Fail("%s of sequence %d of %s differs from what was put: %s"
               % (what, i, src.name, detail))


def run_point(args, shape_name, n_tokens, seq_len, tmp_root):
    tag = "[%s N=%d]" % (shape_name, n_tokens)
    tmp = tempfile.mkdtemp(prefix="seqkv-scale-", dir=tmp_root)
    res = {"shape": shape_name, "tokens": n_tokens}
    procs = []
    conns = []
    try:
        if n_tokens % seq_len:
            raise Fail("%s: %d tokens is not a whole number of %d-token sequences"
                       % (tag, n_tokens, seq_len))
        nseq = n_tokens // seq_len
        ntotal = nseq + args.coded_puts
        if SHAPES[shape_name].get("model"):
            if seq_len > 512:
                raise Fail("stories260K has 512 positions: --seq-len %d is too long" % seq_len)
            log("%s sampling %d sequences and computing their KV with the model" % (tag, ntotal))
            src = StoriesSource(args.seqkv, args.model, tmp, ntotal, seq_len, args.seed + n_tokens)
            allt = [src.tokens(i) for i in range(ntotal)]
            autocal, held_all = positions_held(allt[:nseq]), positions_held(allt)
        else:
            src = SynthSource(shape_name, SHAPES[shape_name], args.seed, seq_len)
            autocal, held_all = n_tokens, ntotal * seq_len
        tb = src.token_bytes
        seq_bytes = tb * seq_len
        res.update(shape_desc=src.describe(), token_bytes=tb, seq_len=seq_len, sequences=nseq,
                   auto_calibrate=autocal)

        # 1. baselines
        res["dd_first_mbps"] = dd_baseline(tmp)
        t0 = time.perf_counter()
        toks0, kv0 = src.seq(0)
        gen = [time.perf_counter() - t0]
        res["redis_set_mbps"], res["redis_get_mbps"], res["redis_version"] = \
            redis_baseline(args, tmp, kv0, args.redis_reps)
        log("%s dd %.0f MB/s, redis SET %.0f MB/s, GET %.0f MB/s (%s a value)"
            % (tag, res["dd_first_mbps"], res["redis_set_mbps"], res["redis_get_mbps"],
               fmt_bytes(seq_bytes)))
        res["encode_mbps"] = encode_baseline(args, src, tmp)
        res["server_threads"] = args.threads or os.cpu_count()
        log("%s one thread encodes ctx at %.0f MB/s (x %d threads: %.0f MB/s)"
            % (tag, res["encode_mbps"], res["server_threads"],
               res["encode_mbps"] * res["server_threads"]))

        # 2. the server
        cfg = os.path.join(tmp, "seqkv.conf")
        with open(cfg, "w") as f:
            f.write("tenant bench uid %d\ntenant bench admin\ncompact-interval 0\n" % os.getuid())
            if seq_bytes > (256 << 20):  # (the defaults: max-bulk 512M, max-query 1G)
                f.write("max-bulk %d\nmax-query %d\nmax-output %d\n"
                        % (2 * seq_bytes, 4 * seq_bytes, 4 * seq_bytes))
        os.chmod(cfg, 0o600)
        db, sock = os.path.join(tmp, "db"), os.path.join(tmp, "s.sock")
        slog = os.path.join(tmp, "serve.log")
        srv, res["start_seconds"] = start_seqkv(args, db, sock, cfg, slog)
        procs.append(srv)
        c = Resp(sock)
        conns.append(c)
        mon = Resp(sock, timeout=60)
        conns.append(mon)
        pname = re.sub(r"[^A-Za-z0-9._-]", "_", shape_name)
        c.call("KV.PROFILE", "SET", pname, *src.profile_args(autocal))
        res["cache_budget_bytes"] = int(info(mon, "cache")["cache_budget_bytes"])

        # 3. raw PUTs (the last one crosses the auto-calibrate threshold)
        us0 = server_usec(mon, "kv.put")
        digests = {}
        put_s, held = [], 0
        # dd of the same size before each PUT, so that both see the disk
        # (and its write cache) in the same state
        dd_src, dd_s = dd_source(tmp, seq_bytes), []
        rss_before_cross = None
        t_cross = None
        for i in range(nseq):
            if i:
                t0 = time.perf_counter()
                toks, kv = src.seq(i)
                gen.append(time.perf_counter() - t0)
            else:
                toks, kv = toks0, kv0
            digests[i] = digest(kv)
            dd_s.append(dd_seconds(tmp, dd_src))
            if i == nseq - 1:
                rss_before_cross = proc_status(srv.pid)
            t0 = time.perf_counter()
            new = c.call("KV.PUT", pname, toks, kv)
            t1 = time.perf_counter()
            put_s.append(t1 - t0)
            held += new
            log("%s put %d/%d: %s in %.3f s (%.0f MB/s), %d new tokens"
                % (tag, i + 1, nseq, fmt_bytes(kv.nbytes), t1 - t0, mb(kv.nbytes, t1 - t0), new))
            if i == nseq - 1:
                t_cross = t1
        if held != autocal:
            raise Fail("%s the store holds %d positions after the puts, expected %d"
                       % (tag, held, autocal))
        raw_bytes = nseq * seq_bytes
        os.unlink(dd_src)
        res["dd_mbps"] = mb(raw_bytes, sum(dd_s))
        res["dd_seconds"] = dd_s
        srv_s = (server_usec(mon, "kv.put") - us0) / 1e6
        res["put_raw"] = {"bytes": raw_bytes, "seconds": sum(put_s),
                          "mbps": mb(raw_bytes, sum(put_s)), "server_seconds": srv_s,
                          "server_mbps": mb(raw_bytes, srv_s),
                          "tokens_per_s": n_tokens / sum(put_s), "per_put_seconds": put_s}
        res["generate_seconds_per_seq"] = sum(gen) / len(gen)
        log("%s raw PUTs: %.0f MB/s, %.0f MB/s in the server (INFO commandstats); dd of "
            "the same size before each: %.0f MB/s"
            % (tag, res["put_raw"]["mbps"], res["put_raw"]["server_mbps"], res["dd_mbps"]))

        # 4. calibration and compaction in the background
        vm0, anon0 = proc_status(srv.pid)
        st0 = info(mon, "store")
        lv_raw0 = info_fields(st0.get("level_raw", ""))
        samples = []
        t_cal = t_comp = None
        logpos = [0]

        def check_log():
            with open(slog, errors="replace") as f:
                f.seek(logpos[0])
                new_log = f.read()
                logpos[0] = f.tell()
            bad = [ln for ln in new_log.splitlines() if BG_ERROR.search(ln)]
            if bad:
                raise Fail("%s the server's background thread failed: %s" % (tag, "; ".join(bad)))

        while True:
            now = time.perf_counter()
            m = info(mon, "maintenance")
            vm, anon = proc_status(srv.pid)
            cal, comps, running = (int(m["self_calibrations"]), int(m["compactions"]),
                                   int(m["compaction_running"]))
            samples.append({"t": now - t_cross, "vmrss": vm, "rss_anon": anon,
                            "self_calibrations": cal, "compactions": comps,
                            "compaction_running": running,
                            "compaction_progress": m.get("compaction_progress")})
            check_log()
            if t_cal is None and cal >= 1:
                t_cal, cpu_cal = now, proc_cpu(srv.pid)
                log("%s calibrated itself in %.1f s; compacting" % (tag, now - t_cross))
            if t_cal is not None and comps >= 1 and not running:
                t_comp, cpu_comp = now, proc_cpu(srv.pid)
                break
            if srv.poll() is not None:
                raise Fail("%s the server exited (rc %d):\n%s" % (tag, srv.returncode, tail(slog)))
            if now - t_cross > args.max_wait:
                raise Fail("%s timed out after %d s (--max-wait) waiting for the %s: "
                           "self_calibrations %d, compactions %d, compaction_progress %s"
                           % (tag, args.max_wait, "compaction" if t_cal else "self-calibration",
                              cal, comps, m.get("compaction_progress")))
            if len(samples) % 200 == 0:
                log("%s waiting: %.0f s, %s, RssAnon %s, progress %s"
                    % (tag, now - t_cross, "compacting" if t_cal else "calibrating",
                       fmt_bytes(anon or 0), m.get("compaction_progress")))
            time.sleep(POLL_S)
        t_cal_rel = t_cal - t_cross
        cal_anon = [s["rss_anon"] for s in samples if s["t"] <= t_cal_rel and s["rss_anon"]]
        comp_anon = [s["rss_anon"] for s in samples if s["t"] >= t_cal_rel and s["rss_anon"]]
        vm1, anon1 = proc_status(srv.pid)
        m = info(mon, "maintenance")
        # (the server logs a failed compaction after it counts it)
        time.sleep(0.2)
        check_log()
        left = int(info_fields(info(mon, "store").get("level_raw", "")).get("tokens", 0))
        if left:
            raise Fail("%s the compaction left %d of %d tokens raw:\n%s"
                       % (tag, left, held, tail(slog)))
        comp_s = t_comp - t_cal
        recode_bytes = int(lv_raw0.get("raw_bytes", 0))
        res["calibration"] = {"seconds": t_cal_rel, "rss_anon_before": anon0, "vmrss_before": vm0,
                              "rss_anon_before_crossing_put": rss_before_cross[1],
                              "rss_anon_peak": max(cal_anon + [anon0])}
        cpu_s = cpu_comp - cpu_cal if cpu_comp is not None and cpu_cal is not None else None
        res["compaction"] = {"seconds": comp_s, "raw_bytes": recode_bytes,
                             "mbps": mb(recode_bytes, comp_s), "cpu_seconds": cpu_s,
                             "mbps_per_cpu": mb(recode_bytes, cpu_s) if cpu_s else None,
                             "rss_anon_peak": max(comp_anon or [anon0]),
                             "records_recoded": int(m["records_recoded"]),
                             "bytes_saved": int(m["compaction_bytes_saved"])}
        res["rss_anon_after"], res["vmrss_after"] = anon1, vm1
        res["poll_samples"] = samples
        log("%s compacted %s in %.1f s (%.1f CPU s in the server: %.0f MB/s a CPU s, "
            "%.2fx one thread's encode rate); RssAnon %s before, peak %s calibrating, "
            "%s compacting, %s after"
            % (tag, fmt_bytes(recode_bytes), comp_s, cpu_s or float("nan"),
               res["compaction"]["mbps_per_cpu"] or float("nan"),
               (res["compaction"]["mbps_per_cpu"] or float("nan")) / res["encode_mbps"],
               fmt_bytes(anon0),
               fmt_bytes(res["calibration"]["rss_anon_peak"]),
               fmt_bytes(res["compaction"]["rss_anon_peak"]), fmt_bytes(anon1)))

        # 5. coded PUTs, then GETs hot and cold
        us0 = server_usec(mon, "kv.put")
        put_s = []
        for i in range(nseq, ntotal):
            t0 = time.perf_counter()
            toks, kv = src.seq(i)
            gen.append(time.perf_counter() - t0)
            digests[i] = digest(kv)
            t0 = time.perf_counter()
            held += c.call("KV.PUT", pname, toks, kv)
            put_s.append(time.perf_counter() - t0)
        if held != held_all:
            raise Fail("%s the store holds %d positions after the coded puts, expected %d"
                       % (tag, held, held_all))
        cb = args.coded_puts * seq_bytes
        srv_s = (server_usec(mon, "kv.put") - us0) / 1e6
        res["put_coded"] = {"bytes": cb, "seconds": sum(put_s), "server_seconds": srv_s,
                            "server_mbps": mb(cb, srv_s) if put_s else None,
                            "mbps": mb(cb, sum(put_s)) if put_s else None,
                            "tokens_per_s": (args.coded_puts * seq_len / sum(put_s)
                                             if put_s else None),
                            "per_put_seconds": put_s}
        res["generate_seconds_per_seq"] = sum(gen) / len(gen)
        c.reserve(seq_bytes)
        first = hot = 0.0
        for i in range(ntotal):
            toks = src.tokens(i)
            for k in range(2):
                t0 = time.perf_counter()
                got = c.call_into("KV.GET", pname, toks, seq_len)
                dt = time.perf_counter() - t0
                check_reply(src, i, got, digests[i], "a KV.GET")
                if k:
                    hot += dt
                else:
                    first += dt
        gb = ntotal * seq_bytes
        res["get_first"] = {"bytes": gb, "seconds": first, "mbps": mb(gb, first)}
        res["get_hot"] = {"bytes": gb, "seconds": hot, "mbps": mb(gb, hot)}
        log("%s GET %d sequences: first %.0f MB/s, hot %.0f MB/s"
            % (tag, ntotal, res["get_first"]["mbps"], res["get_hot"]["mbps"]))

        # 6. what is stored
        st = info(mon, "store")
        res["store"] = {"tokens": int(st["tokens"]), "raw_bytes": int(st["raw_bytes"]),
                        "stored_bytes": int(st["stored_bytes"]), "ratio": float(st["ratio"]),
                        "levels": {k[6:]: info_fields(v) for k, v in st.items()
                                   if k.startswith("level_")}}
        raw_left = res["store"]["levels"].get("raw", {}).get("tokens", 0)
        res["store"]["raw_tokens_left"] = int(raw_left)
        res["rss_anon_end"] = proc_status(srv.pid)[1]
        for x in conns:
            x.close()
        conns.clear()

        # 7. SIGTERM; the cold GETs from a restarted server with no hot tier
        res["exit_seconds"], rc = stop(srv)
        if rc != 0:
            raise Fail("%s the server exited with rc %d on SIGTERM:\n%s" % (tag, rc, tail(slog)))
        res["disk_bytes"] = int(subprocess.run(["du", "-sB1", db], check=True, capture_output=True,
                                               text=True).stdout.split()[0])
        srv2, res["restart_seconds"] = start_seqkv(args, db, sock, cfg, slog,
                                                   ["--cache-bytes", "0"])
        procs.append(srv2)
        c = Resp(sock)
        conns.append(c)
        c.reserve(seq_bytes)
        cold = 0.0
        for i in range(ntotal):
            toks = src.tokens(i)
            t0 = time.perf_counter()
            got = c.call_into("KV.GET", pname, toks, seq_len)
            cold += time.perf_counter() - t0
            check_reply(src, i, got, digests[i], "a cold KV.GET")
        res["get_cold"] = {"bytes": gb, "seconds": cold, "mbps": mb(gb, cold)}
        c.close()
        conns.clear()
        res["exit_seconds_cold"], rc = stop(srv2)
        if rc != 0:
            raise Fail("%s the restarted server exited with rc %d:\n%s" % (tag, rc, tail(slog)))
        log("%s cold GET %.0f MB/s; %s on disk; ratio %.3f; exit %.2f s"
            % (tag, res["get_cold"]["mbps"], fmt_bytes(res["disk_bytes"]), res["store"]["ratio"],
               res["exit_seconds"]))
        res["server_log"] = [ln for ln in tail(slog, 400).splitlines()
                             if re.search(r"calibrat|compaction", ln)]
        return res
    except RespError as e:
        raise Fail("%s server error: %s\n%s" % (tag, e, tail(os.path.join(tmp, "serve.log"))))
    except ConnectionError as e:
        raise Fail("%s %s\n%s" % (tag, e, tail(os.path.join(tmp, "serve.log"))))
    finally:
        for x in conns:
            try:
                x.close()
            except OSError:
                pass
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------
# main

def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="The head of bench/scale.py documents every measurement; the "
                                        "head of\nbench/scale_kv.py the shapes (deepseek-v3's "
                                        "mapping among them) and the synthetic KV.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=None,
                    help="comma-separated, of: %s (default: all)" % ",".join(SHAPES))
    ap.add_argument("--sizes", default=None,
                    help="stored tokens per point, comma-separated, for every shape (default "
                         "1024,8192,32768; --quick: per shape, see there)")
    ap.add_argument("--quick", action="store_true",
                    help="a run of about a minute on 2 CPUs: llama3-8b at 256,512 stored "
                         "tokens in sequences of 256 and stories260k at 1024,2048 in sequences "
                         "of 512, one coded PUT a point, 2 redis reps; most of it is the two 8B "
                         "calibrations. --shapes picks others (a synthetic one runs as llama3-8b "
                         "does); --sizes, --seq-len, --coded-puts, --redis-reps override")
    ap.add_argument("--seq-len", type=int, default=None,
                    help="tokens a sequence, for every shape (default 512; --quick: per shape, "
                         "see there)")
    ap.add_argument("--coded-puts", type=int, default=None,
                    help="sequences put after the calibration (default 2, --quick 1)")
    ap.add_argument("--redis-reps", type=int, default=None,
                    help="timed redis GETs (default 5, --quick 2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-wait", type=int, default=1800,
                    help="seconds to wait for the calibration and compaction (default 1800)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build-release"),
                    help="a release build directory (default build-release)")
    ap.add_argument("--model", default=None,
                    help="stories260K.bin (default $SEQKV_MODEL, "
                         "else ../shared/models/stories260K.bin)")
    ap.add_argument("--threads", type=int, default=0,
                    help="seqkv serve --threads (default its own)")
    ap.add_argument("--tmpdir", default=None,
                    help="where the stores go (default $TMPDIR or /tmp); dd writes there too")
    ap.add_argument("--json", default=None, help="write every figure to this file")
    ap.add_argument("--png", default=None, help="draw the log-log panels into this file")
    args = ap.parse_args()

    if args.quick:
        shapes = args.shapes or "llama3-8b,stories260k"
        args.coded_puts = 1 if args.coded_puts is None else args.coded_puts
        args.redis_reps = 2 if args.redis_reps is None else args.redis_reps
    else:
        shapes = args.shapes or ",".join(SHAPES)
        if args.seq_len is None:
            args.seq_len = DEFAULT_SEQ_LEN
        args.coded_puts = 2 if args.coded_puts is None else args.coded_puts
        args.redis_reps = 5 if args.redis_reps is None else args.redis_reps
    shapes = [s.strip() for s in shapes.split(",") if s.strip()]
    for s in shapes:
        if s not in SHAPES:
            ap.error("unknown shape %r (known: %s)" % (s, ", ".join(SHAPES)))
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()] if args.sizes else None
    except ValueError:
        ap.error("--sizes wants integers")
    plan = []  # (shape, its sizes, its seq-len)
    for s in shapes:
        q_sizes, q_len = (QUICK.get(s, QUICK_SYNTH) if args.quick
                          else (DEFAULT_SIZES, DEFAULT_SEQ_LEN))
        plan.append((s, list(q_sizes) if sizes is None else sizes,
                     q_len if args.seq_len is None else args.seq_len))
    for _, ns, seq_len in plan:
        if seq_len < 1 or any(n < seq_len or n % seq_len for n in ns):
            ap.error("every size must be a positive multiple of --seq-len (%d)" % seq_len)
    if args.coded_puts < 0 or args.redis_reps < 1:
        ap.error("--coded-puts >= 0 and --redis-reps >= 1")

    args.seqkv = os.path.join(args.build, "cli", "seqkv")
    args.encode_mbps = {}
    if not os.access(args.seqkv, os.X_OK):
        sys.exit("scale.py: no %s (build it: meson compile -C %s)" % (args.seqkv, args.build))
    args.redis_server = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(args.redis_server, os.X_OK):
        sys.exit("scale.py: no redis-server (Debian package redis-server)")
    if args.model is None:
        args.model = os.environ.get("SEQKV_MODEL") or os.path.join(ROOT, "..", "shared", "models",
                                                                   "stories260K.bin")
    args.model = os.path.abspath(args.model)
    if "stories260k" in shapes and not os.path.exists(args.model):
        log("scale.py: skipping stories260k: no model file %s (set SEQKV_MODEL)" % args.model)
        shapes.remove("stories260k")
        plan = [p for p in plan if p[0] != "stories260k"]
    if sizes is None:
        sizes = sorted({n for _, ns, _ in plan for n in ns}) if args.quick else list(DEFAULT_SIZES)
    tmp_root = args.tmpdir or tempfile.gettempdir()

    cpu = cpu_name()
    version = subprocess.run([args.seqkv, "--version"], capture_output=True,
                             text=True).stdout.strip()
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    print("seqkv scale bench: %s, %s, %d CPUs, %s memory, stores under %s"
          % (version, cpu, os.cpu_count(), fmt_bytes(mem), tmp_root))
    if len({(tuple(ns), seq_len) for _, ns, seq_len in plan}) <= 1:
        seq_len = plan[0][2] if plan else args.seq_len or DEFAULT_SEQ_LEN
        print("shapes %s; sizes %s tokens; sequences of %d tokens; %d coded PUTs a point"
              % (",".join(shapes), ",".join(map(str, sizes)), seq_len, args.coded_puts))
    else:
        print("shapes %s; %s; %d coded PUTs a point"
              % (",".join(shapes), ", ".join("%s at %s tokens in sequences of %d"
                                             % (s, ",".join(map(str, ns)), seq_len)
                                             for s, ns, seq_len in plan),
                 args.coded_puts))
    sys.stdout.flush()
    results = []
    rc = 0
    t_run = time.perf_counter()
    try:
        for s, ns, seq_len in plan:
            for n in ns:
                results.append(run_point(args, s, n, seq_len, tmp_root))
    except Fail as e:
        log("scale.py: FAIL: %s" % e)
        rc = 1
    except KeyboardInterrupt:
        log("scale.py: interrupted")
        rc = 1
    if results:
        print_tables(results)
    print("\n%d points in %.0f s%s" % (len(results), time.perf_counter() - t_run,
                                        "" if rc == 0 else " (FAILED: see stderr)"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "cpus": os.cpu_count(), "seqkv": version,
                       "date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "args": {k: v for k, v in vars(args).items()}, "shapes": shapes,
                       "sizes": sizes, "ok": rc == 0, "points": results}, f, indent=1)
    if args.png and results:
        draw_png(results, args.png, cpu)
    return rc


if __name__ == "__main__":
    sys.exit(main())
