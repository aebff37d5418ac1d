#!/usr/bin/python3
"""How far a near-duplicate member's KV drifts from its centroid's, and
what of the drift a model-free predictor could recover (issue 25).

usage: bench/neardup_drift.py [BUILD_DIR]   (SEQKV_MODEL: the model,
../shared/models/stories260K.bin by default)

Samples 16 256-token sequences of the model (seed 901) and makes two
members of each, as bench/neardup.sh does: one token inserted at a
position in 8..64, and (the control) the same token substituted there.
Runs a prefill of all with `seqkv model kv` (fp32) and, for every position
after the edit, takes the member's K/V against the centroid's (one
position back after an insertion, K re-rotated by RoPE by one position).
Per layer it prints the drift's spread against the member's own, the
correlation of the drift with the previous position's (what a predictor
carrying the last residual forward could recover), and the bits a scalar
that a linear predictor from the position's earlier channels (K, then V,
fitted on 8 members, measured on the other 8) recovers of the inserted
members' drift."""
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
        members, subs, pos = [], [], []
        for line in filter(None, base):
            t = line.split()
            p = random.randint(8, 64)
            new = str((int(t[p]) + 1 + random.randint(0, 509)) % 512)
            if new == t[p] or new == '1':
                new = str((int(new) + 2) % 512)
            subs.append(' '.join(t[:p] + [new] + t[p + 1:]))
            t.insert(p, new)
            members.append(' '.join(t[:256]))
            pos.append(p)
        for name, lines in (('base', [x for x in base if x]), ('ins', members), ('sub', subs)):
            with open(f'{tmp}/{name}.txt', 'w') as f:
                f.write('\n'.join(lines) + '\n')
            subprocess.run([seqkv, 'model', 'kv', '--model', model, '--tokens',
                            f'{tmp}/{name}.txt', '--dtype', 'fp32', '--out',
                            f'{tmp}/{name}.st', '--quiet'], check=True)
        B, M, S = load(f'{tmp}/base.st'), load(f'{tmp}/ins.st'), load(f'{tmp}/sub.st')
    layers = B['seq0.k'].shape[0]

    def drift(D, shift, i, l, kv):
        """member i's K or V at layer l after the edit minus the centroid's,
        and minus the member's own mean"""
        p = pos[i]
        c = B[f'seq{i}.{kv}'][l][p + 1 - shift:256 - shift]
        if kv == 'k' and shift:
            c = rotate(c, shift)
        m = D[f'seq{i}.{kv}'][l][p + 1:256]
        return (m - c).reshape(len(m), -1), (m - m.mean(0)).reshape(len(m), -1)

    rows = {}
    for kv in 'kv':
        for name, D, shift in (('inserted', M, 1), ('substituted', S, 0)):
            spread, corr = [], []
            for l in range(layers):
                x = [drift(D, shift, i, l, kv) for i in range(len(pos))]
                d = np.concatenate([a[1:] for a, _ in x])
                prev = np.concatenate([a[:-1] for a, _ in x])
                own = np.concatenate([o for _, o in x])
                spread.append(d.std() / own.std())
                corr.append(np.corrcoef(d.ravel(), prev.ravel())[0, 1] if d.std() > 0 else 0.0)
            rows[f'{kv.upper()}: drift / member spread, {name}'] = spread
            if shift:
                rows[f'{kv.upper()}: drift correlation with the previous position, {name}'] = corr
    cross = []
    for l in range(layers):
        both = [np.concatenate([drift(M, 1, i, l, kv)[0] for kv in 'kv'], 1) for i in range(len(pos))]
        fit, test = np.concatenate(both[:len(both) // 2]), np.concatenate(both[len(both) // 2:])
        cov = np.cov(fit.T, bias=True)
        res = test.copy()
        for j in range(1, test.shape[1]):
            w = np.linalg.lstsq(cov[:j, :j], cov[:j, j], rcond=None)[0]
            res[:, j] = test[:, j] - test[:, :j] @ w
        v0, v1 = test.var(0), res.var(0)
        ok = (v0 > 0) & (v1 > 0)
        cross.append(float(np.mean(0.5 * np.log2(v0[ok] / v1[ok]))) if ok.any() else 0.0)
    rows['bits a scalar recovered from the earlier channels, inserted'] = cross
    print('| | ' + ' | '.join(f'layer {l}' for l in range(layers)) + ' |')
    print('|---' * (layers + 1) + '|')
    for name, v in rows.items():
        print(f'| {name} | ' + ' | '.join(f'{x:.2f}' for x in v) + ' |')

if __name__ == '__main__':
    main()
