#!/usr/bin/env bash
# Near-duplicates as issue 25 defines them: 16 sampled 256-token sequences
# of stories260K, and for each one member with one token substituted (or,
# second pass, inserted) at a position in 8..64. The members' bytes in a
# store at ctx -- the bases put first, then the members, with the
# probabilistic trie (coded against the centroid) and without it (coded
# alone) -- and their ratio; a third pass puts both members of each base
# in one store (the issue's clusters: one token substituted or inserted).
# usage: bench/neardup.sh [BUILD_DIR]   (NEARDUP_SEED: the bases' sample
# seed, 901 by default; the edits' seed follows it; NEARDUP_LEVEL: the
# profile's level, ctx by default -- spec and full run the model at GET)
set -euo pipefail
build=${1:-build}
seqkv=$build/cli/seqkv
model=${SEQKV_MODEL:-../shared/models/stories260K.bin}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$seqkv" model sample --model "$model" --n-seq 32 --len 256 --seed 100 > "$tmp/cal.txt"
seed=${NEARDUP_SEED:-901}
level=${NEARDUP_LEVEL:-ctx}
"$seqkv" model sample --model "$model" --n-seq 16 --len 256 --seed "$seed" > "$tmp/base.txt"
for kind in sub ins mix; do
    [ "$kind" = mix ] && cat "$tmp/sub.txt" "$tmp/ins.txt" > "$tmp/mix.txt"
    [ "$kind" = mix ] || "$py" - "$tmp/base.txt" "$tmp/$kind.txt" "$kind" "$seed" <<'PY'
import random, sys
random.seed(7 if sys.argv[4] == '901' else int(sys.argv[4]))
out = []
for line in open(sys.argv[1]):
    t = line.split()
    p = random.randint(8, 64)
    new = str((int(t[p]) + 1 + random.randint(0, 509)) % 512)
    if new == t[p] or new == '1':
        new = str((int(new) + 2) % 512)
    if sys.argv[3] == 'sub':
        t[p] = new
    else:
        t.insert(p, new)
        t = t[:256]
    out.append(' '.join(t))
open(sys.argv[2], 'w').write('\n'.join(out) + '\n')
PY
    for mode in centroid alone; do
        db="$tmp/db-$kind-$mode"
        flag=()
        [ "$mode" = alone ] && flag=(--no-centroids)
        # 32 x 256 tokens: the profile calibrates itself (ctx) at the last one
        "$seqkv" put --db "$db" --model "$model" --tokens "$tmp/cal.txt" --tenant cal --quiet --level "$level"
        "$seqkv" put --db "$db" --model "$model" --tokens "$tmp/base.txt" --tenant t --quiet
        b0=$("$seqkv" stats --db "$db" --tenant t --json | "$py" -c 'import json,sys; print(json.load(sys.stdin)["stored_bytes"])')
        "$seqkv" put --db "$db" --model "$model" --tokens "$tmp/$kind.txt" --tenant t --quiet "${flag[@]}"
        b1=$("$seqkv" stats --db "$db" --tenant t --json | "$py" -c 'import json,sys; print(json.load(sys.stdin)["stored_bytes"])')
        echo "$kind $mode $((b1 - b0))" >> "$tmp/res.txt"
    done
done
"$py" - "$tmp/res.txt" <<'PY'
import sys
r = {}
for line in open(sys.argv[1]):
    k, m, b = line.split()
    r[(k, m)] = int(b)
for k, name in (('sub', 'one token substituted'), ('ins', 'one token inserted'),
                ('mix', 'both, in one store')):
    c, a = r[(k, 'centroid')], r[(k, 'alone')]
    print(f"{name:24s} members: {c} bytes against the centroid, {a} coded alone: {100.0 * (c - a) / a:+.1f}%")
PY
