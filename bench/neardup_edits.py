#!/usr/bin/python3
"""Near-duplicates wherever the edit is (issue 44): 16 sampled 256-token
sessions of stories260K stored at ctx (after 32 others that calibrate the
profile), then one edited copy of each, put with centroids (the prefix
rule and the content index) and without (--no-centroids, coded alone);
the copies' bytes and how much smaller they are against a centroid.

Edits, at positions 0, 1, 4, 16, 64 and 192 of the prompt (counted after
its BOS token, which is the model's and never a user's to edit):
  sub   one token substituted
  ins   one token inserted (the session cut back to 256)
  del   one token deleted
  span  32 tokens replaced by 32 of another stored session's (the same
        positions of another story: a swapped passage)
  swap  32 tokens replaced by 24 of another session's (a span of another
        length)
and a control: 16 sessions with nothing similar stored, with the index
and without it (must cost the same to within 0.5%).

usage: bench/neardup_edits.py [BUILD_DIR] [--positions 0,1,4,16,64,192]
       [--kinds sub,ins,del,span,swap] (SEQKV_MODEL: the model, else
       ../shared/models/stories260K.bin)"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build-release")
ap.add_argument("--positions", default="0,1,4,16,64,192")
ap.add_argument("--kinds", default="sub,ins,del,span,swap")
ap.add_argument("--seed", type=int, default=901)
a = ap.parse_args()
seqkv = os.path.join(a.build, "cli", "seqkv")
model = os.environ.get("SEQKV_MODEL", "../shared/models/stories260K.bin")
if not os.path.exists(model):
    sys.exit("neardup_edits: no model at %s (set SEQKV_MODEL)" % model)
tmp = tempfile.mkdtemp(prefix="seqkv-neardup-")


def run(*args):
    return subprocess.run([seqkv] + list(args), check=True, capture_output=True, text=True).stdout


def sample(n, seed):
    out = run("model", "sample", "--model", model, "--n-seq", str(n), "--len", "256",
              "--seed", str(seed))
    return [line.split() for line in out.splitlines() if line.strip()]


def write(path, seqs):
    with open(path, "w") as f:
        f.write("\n".join(" ".join(s) for s in seqs) + "\n")


def stored(db):
    return json.loads(run("stats", "--db", db, "--tenant", "t", "--json"))["stored_bytes"]


def put(db, path, alone):
    run("put", "--db", db, "--model", model, "--tokens", path, "--tenant", "t", "--quiet",
        *(["--no-centroids"] if alone else []))


def edit(kind, s, other, p, rng):
    t = list(s)
    p += 1  # (after BOS)
    new = str((int(t[p]) + 1 + rng.randint(0, 509)) % 512)
    if new in (t[p], "1"):
        new = str((int(new) + 2) % 512)
    if kind == "sub":
        t[p] = new
    elif kind == "ins":
        t.insert(p, new)
    elif kind == "del":
        del t[p]
    elif kind == "span":
        t[p:p + 32] = other[p:p + 32]
    elif kind == "swap":
        t[p:p + 32] = other[p:p + 24]
        t += s[256 - 8:]  # (the session stays 256 tokens long)
    return t[:256]


try:
    cal = sample(32, 100)
    bases = sample(16, a.seed)
    others = sample(16, a.seed + 1000)
    fresh = sample(16, a.seed + 2000)
    write(os.path.join(tmp, "cal.txt"), cal)
    write(os.path.join(tmp, "base.txt"), bases)
    write(os.path.join(tmp, "fresh.txt"), fresh)
    seed_db = os.path.join(tmp, "seed")
    run("put", "--db", seed_db, "--model", model, "--tokens", os.path.join(tmp, "cal.txt"),
        "--tenant", "cal", "--quiet", "--level", "ctx")
    run("put", "--db", seed_db, "--model", model, "--tokens", os.path.join(tmp, "base.txt"),
        "--tenant", "t", "--quiet")

    def cost(path, alone):
        db = os.path.join(tmp, "db")
        shutil.rmtree(db, ignore_errors=True)
        shutil.copytree(seed_db, db)
        b0 = stored(db)
        put(db, path, alone)
        return stored(db) - b0

    print("# bench/neardup_edits.py: 16 x 256-token stories260K sessions at ctx, one edited "
          "copy each; bytes of the copies")
    print("%-5s %5s %12s %12s %8s" % ("edit", "pos", "centroid", "alone", "saved"))
    fails = 0
    for kind in a.kinds.split(","):
        for p in [int(x) for x in a.positions.split(",")]:
            rng = random.Random(a.seed * 1000 + p * 7 + len(kind))
            members = [edit(kind, s, o, p, rng) for s, o in zip(bases, others)]
            path = os.path.join(tmp, "m.txt")
            write(path, members)
            c, al = cost(path, False), cost(path, True)
            print("%-5s %5d %12d %12d %7.1f%%" % (kind, p, c, al, 100.0 * (al - c) / al))
            sys.stdout.flush()
    fp = os.path.join(tmp, "fresh.txt")
    c, al = cost(fp, False), cost(fp, True)
    print("%-5s %5s %12d %12d %7.2f%%  (nothing similar stored)" % ("none", "-", c, al,
                                                                   100.0 * (al - c) / al))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
