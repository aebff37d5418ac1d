#!/usr/bin/env python3
"""Two builds of seqkv, before and after a change, on the same machine and
inputs, run alternately (A B A B ...): `seqkv codec bench --level all` on
bench/codec_bench.sh's stories260K set (bits must be equal; speed, best of
the runs, after/before), then `bench_server` (each row's ops/s over
redis-server GET's of the same run, mean of the runs, after/before, and
their geometric mean). What a redesign shows to keep speed (issue 42).

usage: bench/compare_builds.py BEFORE_BUILD AFTER_BUILD [--runs N]
           [--seconds S] [--model PATH] [--only codec|server]
(release builds: meson setup B --buildtype=release -Dtests=false)"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def cpu():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        name = re.search(r"model name\s*:\s*(.*)", info).group(1)
        fam = re.search(r"cpu family\s*:\s*(\d+)", info).group(1)
        model = re.search(r"^model\s*:\s*(\d+)", info, re.M).group(1)
        return "%s (family %s, model %s%s), %d CPUs" % (
            name, fam, model, ", AVX-512" if "avx512f" in info else "", os.cpu_count())
    except (OSError, AttributeError):
        return "CPU unknown"


def codec_rows(text):
    """level -> its JSON line, baselines left out"""
    out = {}
    for line in text.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            if not d.get("baseline"):
                out[d["level"]] = d
    return out


ROW = re.compile(r"^(seqkv KV\.\S+(?: \(\w+\))?|KV\.GET LAYERS 1st layer ?\(\w+\)|redis GET)"
                 r"\s+(\d+)\s+[\d.]+\s+[\d.]+\s+(\d+)")


def server_rows(text):
    """(section, row, clients) -> ops/s over redis GET's of the same run"""
    sec, rows, redis = None, {}, {}
    for line in text.splitlines():
        if line.startswith("hot:"):
            sec = "hot"
        elif line.startswith("cold:"):
            sec = "cold"
        m = ROW.match(line)
        if m and sec:
            name, clients, ops = m.group(1), int(m.group(2)), int(m.group(3))
            if name == "redis GET":
                redis[(sec, clients)] = ops
            else:
                rows[(sec, name, clients)] = ops
    return {k: v / (redis.get((k[0], k[2])) or redis[("hot", k[2])]) for k, v in rows.items()}


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--model", default=os.environ.get("SEQKV_MODEL", "../shared/models/stories260K.bin"))
    ap.add_argument("--only", choices=("codec", "server"))
    a = ap.parse_args()
    builds = {"before": a.before, "after": a.after}
    print("compare_builds: %s; before %s, after %s, %d alternating runs each" %
          (cpu(), a.before, a.after, a.runs))
    with tempfile.TemporaryDirectory() as tmp:
        sk = os.path.join(a.before, "cli", "seqkv")
        for name, seed in (("cal", 100), ("test", 200)):
            toks = run([sk, "model", "sample", "--model", a.model, "--n-seq", "32", "--len", "256",
                        "--seed", str(seed)])
            with open(os.path.join(tmp, name + ".txt"), "w") as f:
                f.write(toks)
            run([sk, "model", "kv", "--model", a.model, "--tokens", os.path.join(tmp, name + ".txt"),
                 "--dtype", "bf16", "--out", os.path.join(tmp, name + ".safetensors"), "--quiet"])
        codec = {v: [] for v in builds}
        server = {v: [] for v in builds}
        for _ in range(a.runs if a.only != "server" else 0):
            for v, b in builds.items():
                codec[v].append(codec_rows(run([
                    os.path.join(b, "cli", "seqkv"), "codec", "bench", "--calib",
                    os.path.join(tmp, "cal.safetensors"), "--test",
                    os.path.join(tmp, "test.safetensors"), "--model", a.model, "--level", "all",
                    "--reps", "5", "--json"])))
        for _ in range(a.runs if a.only != "codec" else 0):
            for v, b in builds.items():
                server[v].append(server_rows(run([
                    os.path.join(b, "bench", "bench_server"), "--model", a.model, "--seqkv",
                    os.path.join(b, "cli", "seqkv"), "--seconds", str(a.seconds)])))
    same = True
    if a.only != "server":
        same = print_codec(codec, builds)
    if a.only != "codec":
        print_server(server, a.seconds)
    return 0 if same else 1


def print_codec(codec, builds):
    print("\nseqkv codec bench --level all --reps 5 (speed: best of the runs, after/before)")
    print("%-26s %12s %14s %14s" % ("level", "bits", "encode", "decode"))
    same = True
    for lvl, d in codec["before"][0].items():
        bits = {r[lvl]["bits_per_scalar"] for v in builds for r in codec[v]}
        same &= len(bits) == 1
        ratio = []
        for key in (("encode_msps", "encode_mbps"), ("decode_msps", "decode_mbps")):
            k = key[0] if key[0] in d else key[1]
            b = max(r[lvl].get(k, 0) for r in codec["before"])
            n = max(r[lvl].get(k, 0) for r in codec["after"])
            ratio.append("%.3f" % (n / b) if b else "-")
        print("%-26s %12s %14s %14s" % (lvl, "equal" if len(bits) == 1 else "DIFFER", *ratio))
    return same


def print_server(server, seconds):
    print("\nbench_server --seconds %g (ops/s over redis GET's of the same run, mean of the runs)" %
          seconds)
    ratios = []
    for k in sorted(server["before"][0]):
        b = statistics.mean(r[k] for r in server["before"])
        n = statistics.mean(r[k] for r in server["after"])
        ratios.append(n / b)
        print("%-5s %-32s %3d clients  before %.3f  after %.3f  after/before %.3f" % (*k, b, n, n / b))
    print("geometric mean after/before over %d rows: %.3f (rows %.2f .. %.2f)" %
          (len(ratios), statistics.geometric_mean(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    sys.exit(main())
