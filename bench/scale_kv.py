"""The KV the scale bench (bench/scale.py) stores: the model shapes, the
synthetic generator of every shape but stories260k, and stories260K's real
KV through `seqkv model kv` (read back with a small safetensors reader).

Shapes (bf16 KV; K after RoPE in the HF half layout unless said):
  llama3-8b    32 layers, 8 kv heads x 128, rope_theta 500000 (128 KiB a token)
  qwen3-8b     36 layers, 8 kv heads x 128, rope_theta 1000000
  llama3-70b   80 layers, 8 kv heads x 128, rope_theta 500000
  qwen3-0.6b   28 layers, 8 kv heads x 128, rope_theta 1000000
  deepseek-v3  MLA: 61 layers, a latent of 576 scalars a token a layer (512
               compressed kv + 64 RoPE'd k_pe), one "head". A seqkv profile
               always has a K and a V, so the latent is mapped onto
               kv_heads 1, head_dim 288: K = latent[0:288], V =
               latent[288:576], rope_dim 0 (the profile knows no RoPE; the
               64 k_pe scalars are generated rotated, theta 10000, in V's
               last 64). The store holds the same 2 x 288 = 576 scalars a
               token a layer as the real cache. A K-only (latent-only)
               profile does not exist yet.
  stories260k  the real KV of ../shared/models/stories260K.bin (or
               $SEQKV_MODEL): `seqkv model sample` sequences of 512 tokens,
               `seqkv model kv --dtype bf16`, profile `model <path>`.
               Skipped, saying so, when the model file is absent.

Synthetic KV (every shape but stories260k; seeded, deterministic, numpy):
  - sequences of --seq-len tokens (512). Token 0 of a sequence is an id of
    its own (a seeded permutation of the vocabulary: no two sequences of a
    point share a prefix, so the prefix trie stores every token, and the
    KV of a prefix is the same whatever follows it, as a model's is); the
    others are drawn from a Zipf-like law (p(rank r) ~ 1/(r + 2.7)^1.1,
    ranks mapped to ids by a seeded permutation) over a 128,256-token
    vocabulary, so tokens repeat as in text.
  - per (layer, k|v, kv_head, channel): a scale s = s0 x exp(U(-ln 2, ln 2))
    (s0 1 for K, 0.5 for V) and an offset o = N(0,1) x 0.3 x s; in K two
    outlier channels per (layer, head) with 25x the scale and an offset of
    +-3x that scale.
  - value[t] = o + s x (0.5 e_tok[t] + 0.85 ar[t]): e_tok is a vector of
    [k|v][kv_head][channel] drawn from a generator seeded by (seed, token
    id), the same in every layer and every sequence (the token's identity,
    which real KV carries from layer 0 up); ar is an AR(1) process along
    positions, correlation 0.6, unit variance, independent per (layer,
    k|v, head, channel), its innovations drawn position by position from a
    generator seeded by (seed, shape, token 0).
  - K is then rotated by RoPE at the position in the sequence (half
    layout: pairs (i, i + D/2), inv_freq_i = theta^(-2i/D)); deepseek-v3
    rotates V's last 64 scalars instead (theta 10000) and not K.
  - rounded to bf16 from the float32 bits (round to nearest even) in the
    store layout [layer][k, v][token][kv_head][head_dim], little-endian,
    exactly what KV.PUT takes (server/README.md, "Data on the wire").

Every source gives, for sequence i, its tokens (u32 [T]) and its KV (u16
bf16 bit patterns [L, 2, T, H, D], the store layout), through tokens(i)
and seq(i), and says what it is (describe()) and the KV.PROFILE SET
arguments that store it (profile_args())."""
import hashlib
import json
import math
import os
import subprocess

import numpy as np

from scale_report import fmt_bytes

VOCAB = 128256          # the synthetic shapes' vocabulary (Llama 3's)
ZIPF_S, ZIPF_Q = 1.1, 2.7
AR_RHO = 0.6

# name -> shape; "latent_rope": scalars at the end of V generated rotated
SHAPES = {
    "llama3-8b": dict(layers=32, kv_heads=8, head_dim=128, rope_theta=500000.0, rope_dim=128),
    "qwen3-8b": dict(layers=36, kv_heads=8, head_dim=128, rope_theta=1000000.0, rope_dim=128),
    "llama3-70b": dict(layers=80, kv_heads=8, head_dim=128, rope_theta=500000.0, rope_dim=128),
    "qwen3-0.6b": dict(layers=28, kv_heads=8, head_dim=128, rope_theta=1000000.0, rope_dim=128),
    "deepseek-v3": dict(layers=61, kv_heads=1, head_dim=288, rope_theta=10000.0, rope_dim=0,
                        latent_rope=64),
    "stories260k": dict(model=True),
}


def bf16_store_layout(x, out):
    """float32 [T, L, 2, H, D] -> bf16 bit patterns [L, 2, T, H, D] in out,
    rounded to nearest even from the float32 bits; x is clobbered"""
    u = x.view(np.uint32)
    L = x.shape[1]
    for layer in range(L):
        for kv in range(2):
            s = u[:, layer, kv]
            r = s >> 16
            r &= 1
            r += 0x7FFF
            r += s
            r >>= 16
            np.copyto(out[layer, kv], r, casting="unsafe")


def rope_half_rows(x, pos0, theta, rot, block=64):
    """RoPE, half layout, of the last axis's first rot scalars of x [T, ...,
    D] in place (pairs (i, i + rot/2), inv_freq = theta^(-2i/rot)), in
    blocks of positions to keep the temporaries small"""
    half = rot // 2
    inv = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / rot)
    T = x.shape[0]
    extra = (1,) * (x.ndim - 2)
    for t0 in range(0, T, block):
        t1 = min(T, t0 + block)
        ang = np.arange(pos0 + t0, pos0 + t1, dtype=np.float64)[:, None] * inv[None, :]
        c = np.cos(ang).astype(np.float32).reshape((t1 - t0,) + extra + (half,))
        s = np.sin(ang).astype(np.float32).reshape((t1 - t0,) + extra + (half,))
        x1 = x[t0:t1, ..., :half]
        x2 = x[t0:t1, ..., half:rot]
        a = x1 * c
        a -= x2 * s
        np.multiply(x2, c, out=x2)
        x1 *= s
        x2 += x1
        x1[...] = a


class SynthSource:
    """Deterministic synthetic KV of one shape (header: "Synthetic KV")"""

    def __init__(self, name, shape, seed, seq_len):
        self.name = name
        self.L, self.H, self.D = shape["layers"], shape["kv_heads"], shape["head_dim"]
        self.theta, self.rope_dim = shape["rope_theta"], shape["rope_dim"]
        self.latent_rope = shape.get("latent_rope", 0)
        self.seed, self.T = seed, seq_len
        self.sid = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "little")
        self.token_bytes = self.L * 2 * self.H * self.D * 2
        g = np.random.Generator(np.random.SFC64([seed, self.sid, 1]))
        L, H, D = self.L, self.H, self.D
        scale = np.exp(g.uniform(-math.log(2), math.log(2), (L, 2, H, D)))
        scale[:, 1] *= 0.5
        off = g.standard_normal((L, 2, H, D)) * 0.3 * scale
        for layer in range(L):            # two outlier channels per K head
            for h in range(H):
                for ch in g.choice(D, 2, replace=False):
                    scale[layer, 0, h, ch] *= 25.0
                    sign = 1 if g.random() < 0.5 else -1
                    off[layer, 0, h, ch] = sign * 3.0 * scale[layer, 0, h, ch]
        self.scale = scale.astype(np.float32)
        self.off = off.astype(np.float32)
        ranks = np.arange(VOCAB, dtype=np.float64)
        p = 1.0 / (ranks + ZIPF_Q) ** ZIPF_S
        self.cdf = np.cumsum(p / p.sum())
        gv = np.random.Generator(np.random.SFC64([seed, 2]))
        self.rank_to_id = gv.permutation(VOCAB).astype(np.uint32)
        gf = np.random.Generator(np.random.SFC64([seed, 3]))
        self.first_ids = gf.permutation(VOCAB).astype(np.uint32)
        self.etok = {}
        self.buf = None

    def describe(self):
        return ("%d layers x %d kv heads x %d, bf16, %s a token (synthetic)"
                % (self.L, self.H, self.D, fmt_bytes(self.token_bytes)))

    def profile_args(self, autocal):
        return ["layers", self.L, "kv_heads", self.H, "head_dim", self.D, "dtype", "bf16",
                "level", "ctx", "rope_theta", "%g" % self.theta, "rope_dim", self.rope_dim,
                "rope_half", 1, "chunk", 256, "auto-calibrate", autocal]

    def tokens(self, i):
        g = np.random.Generator(np.random.SFC64([self.seed, 4, i]))
        u = g.random(self.T - 1)
        r = np.minimum(np.searchsorted(self.cdf, u), VOCAB - 1)
        t = np.empty(self.T, np.uint32)
        t[0] = self.first_ids[i % VOCAB]
        t[1:] = self.rank_to_id[r]
        return t

    def _e(self, tok):
        e = self.etok.get(tok)
        if e is None:
            g = np.random.Generator(np.random.SFC64([self.seed, 5, int(tok)]))
            e = g.standard_normal((2, self.H, self.D), dtype=np.float32) * np.float32(0.5)
            self.etok[tok] = e
        return e

    def seq(self, i):
        """(tokens u32 [T], kv u16 [L, 2, T, H, D]); the kv array is reused by
        the next call"""
        toks = self.tokens(i)
        T, L, H, D = self.T, self.L, self.H, self.D
        g = np.random.Generator(np.random.SFC64([self.seed, self.sid, 6, int(toks[0])]))
        x = g.standard_normal((T, L, 2, H, D), dtype=np.float32)
        c = np.float32(math.sqrt(1 - AR_RHO * AR_RHO))
        tmp = np.empty((L, 2, H, D), np.float32)
        for t in range(1, T):
            np.multiply(x[t - 1], np.float32(AR_RHO), out=tmp)
            x[t] *= c
            x[t] += tmp
        x *= np.float32(0.85)
        e = np.stack([self._e(int(tk)) for tk in toks])           # [T, 2, H, D]
        x += e[:, None]
        x *= self.scale
        x += self.off
        if self.rope_dim:
            rope_half_rows(x[:, :, 0], 0, self.theta, self.rope_dim)
        if self.latent_rope:
            rope_half_rows(x[:, :, 1, :, D - self.latent_rope:], 0, self.theta, self.latent_rope)
        if self.buf is None:
            self.buf = np.empty((L, 2, T, H, D), np.uint16)
        bf16_store_layout(x, self.buf)
        return toks, self.buf


def write_kvfile(path, seqs, max_tokens=None):
    """a KV file (tensor/kvfile.c: seq<i>.tokens I32 [T], seq<i>.k and
    seq<i>.v BF16 [layers, T, kv_heads, head_dim]) of the (tokens, kv in the
    store layout) pairs that the callables in seqs return, each cut to its
    first max_tokens tokens; written one sequence at a time"""
    metas, blobs, off = {}, [], 0
    for j, get in enumerate(seqs):
        toks, kv = get()
        t = len(toks) if max_tokens is None else min(len(toks), max_tokens)
        parts = [("tokens", "I32", [t], toks[:t].astype(np.int32).tobytes())]
        for which, name in ((0, "k"), (1, "v")):
            a = np.ascontiguousarray(kv[:, which, :t])
            parts.append((name, "BF16", list(a.shape), a.tobytes()))
        for name, dtype, shape, data in parts:
            metas["seq%d.%s" % (j, name)] = {"dtype": dtype, "shape": shape,
                                             "data_offsets": [off, off + len(data)]}
            off += len(data)
            blobs.append(data)
    head = json.dumps(metas).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """{name: numpy array} of a safetensors file: an 8-byte little-endian
    header length, a JSON header (name -> dtype, shape, data_offsets), the
    raw data"""
    dt = {"BF16": np.uint16, "F16": np.uint16, "F32": np.float32, "I32": np.int32,
          "U32": np.uint32, "F8_E4M3": np.uint8}
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    head = json.loads(data[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        d = np.dtype(dt[t["dtype"]])
        out[name] = np.frombuffer(data, d, (b - a) // d.itemsize, 8 + n + a).reshape(t["shape"])
    return out


class StoriesSource:
    """The real bf16 KV of stories260K: sampled sequences through `seqkv
    model kv` (tensors seq<i>.tokens, seq<i>.k, seq<i>.v; k, v [layers, T,
    kv_heads, head_dim])"""

    def __init__(self, seqkv, model, tmp, nseq, seq_len, seed):
        self.name = "stories260k"
        self.model = model
        tf = os.path.join(tmp, "toks.txt")
        with open(tf, "w") as f:
            subprocess.run([seqkv, "model", "sample", "--model", model, "--n-seq", str(nseq),
                            "--len", str(seq_len), "--seed", str(seed)], check=True, stdout=f)
        out = os.path.join(tmp, "kv.safetensors")
        subprocess.run([seqkv, "model", "kv", "--model", model, "--tokens", tf, "--dtype", "bf16",
                        "--out", out, "--quiet"], check=True)
        t = read_safetensors(out)
        os.unlink(out)
        os.unlink(tf)
        self.seqs = []
        for i in range(nseq):
            k, v = t["seq%d.k" % i], t["seq%d.v" % i]
            kv = np.ascontiguousarray(np.stack([k, v], axis=1))
            self.seqs.append((t["seq%d.tokens" % i].astype(np.uint32), kv))
        k = t["seq0.k"]
        self.L, self.T, self.H, self.D = k.shape
        self.token_bytes = self.L * 2 * self.H * self.D * 2

    def describe(self):
        return ("%d layers x %d kv heads x %d, bf16, %s a token (real KV of %s)"
                % (self.L, self.H, self.D, fmt_bytes(self.token_bytes),
                   os.path.basename(self.model)))

    def profile_args(self, autocal):
        return ["model", self.model, "dtype", "bf16", "level", "ctx", "chunk", 256,
                "auto-calibrate", autocal]

    def tokens(self, i):
        return self.seqs[i][0]

    def seq(self, i):
        return self.seqs[i]


def positions_held(seqs):
    """token positions a store holds after putting these token sequences:
    each adds its length past its longest common prefix with an earlier one"""
    total = 0
    for i, s in enumerate(seqs):
        best = 0
        for p in seqs[:i]:
            n = min(len(s), len(p))
            d = np.nonzero(s[:n] != p[:n])[0]
            best = max(best, n if len(d) == 0 else int(d[0]))
        total += len(s) - best
    return total
