#!/usr/bin/python3
"""How far an inserted member's KV drifts from its centroid's, and whether
the drift at one position predicts the next (issue 25).

usage: bench/neardup_drift.py [BUILD_DIR]   (SEQKV_MODEL: the model,
../shared/models/stories260K.bin by default)

Samples 16 256-token sequences of the model (seed 901), inserts one token
at a position in 8..64 of each (as bench/neardup.sh does), runs a prefill
of both with `seqkv model kv` (fp32), and for every position after the
insertion takes the member's K/V against the centroid's one position back
(K re-rotated by RoPE by one position). Per layer it prints the drift's
spread against the member's own, and the correlation of the drift with the
previous position's (what a predictor carrying the last residual forward
could recover: log2 of the spread it leaves)."""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np


def load(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == '__metadata__':
            continue
        s, e = t['data_offsets']
        dt = {'F32': np.float32, 'I32': np.int32}[t['dtype']]
        out[name] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt).reshape(t['shape'])
    return out


def rotate(k, steps, theta=10000.0):
    """K [..., head_dim] rotated by RoPE by `steps` positions (pairs 2i, 2i+1)"""
    hd = k.shape[-1]
    out = k.copy()
    for j in range(0, hd, 2):
        a = steps / theta ** (j / hd)
        c, s = np.cos(a), np.sin(a)
        out[..., j] = k[..., j] * c - k[..., j + 1] * s
        out[..., j + 1] = k[..., j] * s + k[..., j + 1] * c
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else 'build'
    seqkv = os.path.join(build, 'cli', 'seqkv')
    model = os.environ.get('SEQKV_MODEL', '../shared/models/stories260K.bin')
    if not os.path.exists(model):
        sys.exit(f'neardup_drift: no model at {model} (set SEQKV_MODEL)')
    with tempfile.TemporaryDirectory() as tmp:
        base = subprocess.run([seqkv, 'model', 'sample', '--model', model, '--n-seq', '16',
                               '--len', '256', '--seed', '901'], check=True,
                              capture_output=True, text=True).stdout.split('\n')
        random.seed(7)
        members, pos = [], []
        for line in filter(None, base):
            t = line.split()
            p = random.randint(8, 64)
            new = str((int(t[p]) + 1 + random.randint(0, 509)) % 512)
            if new == t[p] or new == '1':
                new = str((int(new) + 2) % 512)
            t.insert(p, new)
            members.append(' '.join(t[:256]))
            pos.append(p)
        for name, lines in (('base', [x for x in base if x]), ('ins', members)):
            with open(f'{tmp}/{name}.txt', 'w') as f:
                f.write('\n'.join(lines) + '\n')
            subprocess.run([seqkv, 'model', 'kv', '--model', model, '--tokens',
                            f'{tmp}/{name}.txt', '--dtype', 'fp32', '--out',
                            f'{tmp}/{name}.st', '--quiet'], check=True)
        B, M = load(f'{tmp}/base.st'), load(f'{tmp}/ins.st')
    layers = B['seq0.k'].shape[0]
    print('| | ' + ' | '.join(f'layer {l}' for l in range(layers)) + ' |')
    print('|---' * (layers + 1) + '|')
    for kv in 'kv':
        spread, corr = [], []
        for l in range(layers):
            d, prev, own = [], [], []
            for i, p in enumerate(pos):
                c = B[f'seq{i}.{kv}'][l][p:255]
                if kv == 'k':
                    c = rotate(c, 1)
                m = M[f'seq{i}.{kv}'][l][p + 1:256]
                x = (m - c).reshape(len(m), -1)
                d.append(x[1:])
                prev.append(x[:-1])
                own.append((m - m.mean(0)).reshape(len(m), -1))
            d, prev, own = np.concatenate(d), np.concatenate(prev), np.concatenate(own)
            spread.append(d.std() / own.std())
            corr.append(np.corrcoef(d.ravel(), prev.ravel())[0, 1] if d.std() > 0 else 0.0)
        print(f'| {kv.upper()}: drift / member spread | ' +
              ' | '.join(f'{x:.2f}' for x in spread) + ' |')
        print(f'| {kv.upper()}: drift correlation with the previous position | ' +
              ' | '.join(f'{x:.2f}' for x in corr) + ' |')


if __name__ == '__main__':
    main()
