#!/usr/bin/python3
"""seqkv.connectors.vllm.SeqkvConnector against a live `seqkv serve`, driven
in the order vLLM drives a v1 KV connector.

vLLM (and torch) cannot be installed here, so this reproduces what vLLM
does around the connector: Scheduler.schedule() asks
get_num_new_matched_tokens for a waiting request, allocates its blocks,
calls update_state_after_alloc, and ends the step with
build_connector_meta; the metadata travels pickled to the worker, whose
model runner calls bind_connector_metadata, start_load_kv, then per
attention layer wait_for_layer_load, the attention (which writes the
step's KV into the paged cache) and save_kv_layer, then wait_for_save,
get_finished, get_block_ids_with_load_errors and clear_connector_metadata;
a finished request goes through request_finished. The paged caches are
numpy arrays in FlashAttention's layout [2, num_blocks, 16, kv_heads,
head_dim], one per layer, named model.layers.{i}.self_attn.attn.

The KV is stories260K's own (seqkv model kv, bf16) when the model is
there, else a synthetic causal stand-in (said so): 5 layers, 4 KV heads
of 8.

  1. A 200-token prompt misses, is prefilled in two chunks (128 + 72) and
     saved at the step that completes it: the store then holds its KV
     bit for bit; a decode step neither loads nor saves.
  2. A prompt sharing 150 tokens with it (then its own continuation), in
     another paged cache with non-contiguous blocks and 2 blocks from
     vLLM's own prefix cache: 112 tokens (7 whole blocks) are loaded,
     layer by layer (layer i is there after wait_for_layer_load(i), the
     later ones not yet), equal to what the first request saved, and no
     other slot of any layer changes; its whole prompt is then saved from
     those blocks.
  3. Prompts nobody cached miss; a fully cached prompt loads all but its
     last block; multimodal prompts are not served.
  4. Errors: wrong cache shapes and configs raise clear errors; a record
     gone between lookup and load, and a server that is down, are misses
     and failed blocks (reported, never an exception).
  5. Imported the way vLLM's KVConnectorFactory imports it (vLLM's base
     module already loaded; a stand-in with the real module path and
     abstract methods here), the classes derive from vLLM's bases.

Usage: vllm_connector_test.py SEQKV_BIN PYTHON_DIR"""
import logging
import os
import pickle
import subprocess
import sys
import types

seqkv_bin, pydir = sys.argv[1], sys.argv[2]
sys.path.insert(0, pydir)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import seqkv  # noqa: E402
from pyfixture import Server, model_kv, model_path, sample  # noqa: E402
from seqkv.connectors.vllm import (KVConnectorRole, LoadSpec,  # noqa: E402
                                   SeqkvConnector, SeqkvConnectorMetadata)

L, H, D, BS = 5, 4, 8, 16           # stories260K: layers, KV heads, head dim; block size
NUM_BLOCKS = 64
PROFILE = "stories"
LAYER = "model.layers.%d.self_attn.attn"
NAMES = [LAYER % i for i in range(L)]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def expect_error(kind, words, fn, what):
    """fn() must raise kind with every one of words in its message."""
    try:
        fn()
    except kind as e:
        msg = str(e)
        check(all(w in msg for w in words), "%s: message %r lacks %s" % (what, msg, words))
        return
    except Exception as e:  # noqa: BLE001 - reported as a failure
        check(False, "%s: raised %s (%s), wanted %s" % (what, type(e).__name__, e,
                                                      kind.__name__))
        return
    check(False, "%s: no error raised" % what)


# -- vLLM's objects, duck-typed ------------------------------------------------
def vllm_config(sock, role="kv_both", **extra):
    cfg = {"socket_path": sock, "profile": PROFILE,
           "profile_fields": {"layers": L, "kv_heads": H, "head_dim": D, "dtype": "bf16"}}
    cfg.update(extra)
    kvt = types.SimpleNamespace(kv_connector="SeqkvConnector",
                                kv_connector_module_path="seqkv.connectors.vllm",
                                kv_role=role, kv_connector_extra_config=cfg)
    return types.SimpleNamespace(kv_transfer_config=kvt,
                                 cache_config=types.SimpleNamespace(block_size=BS))


def request(req_id, tokens, **kw):
    """vllm.v1.request.Request, the fields a connector reads."""
    r = types.SimpleNamespace(request_id=req_id, prompt_token_ids=list(tokens),
                              mm_features=[], lora_request=None, cache_salt=None)
    r.__dict__.update(kw)
    return r


class KVCacheBlocks:
    """vllm.v1.core.kv_cache_manager.KVCacheBlocks: one group of blocks."""

    def __init__(self, block_ids):
        self.blocks = ([types.SimpleNamespace(block_id=b) for b in block_ids],)

    def get_block_ids(self):
        return ([b.block_id for b in self.blocks[0]],)


def scheduler_output(new, cached, num_scheduled):
    """vllm.v1.core.sched.output.SchedulerOutput with NewRequestData and
    CachedRequestData as vLLM fills them."""
    c = types.SimpleNamespace(req_ids=[r for r, _, _ in cached], resumed_req_ids=set(),
                              new_token_ids=[[] for _ in cached],
                              new_block_ids=[b for _, b, _ in cached],
                              num_computed_tokens=[n for _, _, n in cached])
    return types.SimpleNamespace(
        scheduled_new_reqs=[types.SimpleNamespace(req_id=r, prompt_token_ids=t,
                                                  block_ids=(b,), num_computed_tokens=n)
                            for r, t, b, n in new],
        scheduled_cached_reqs=c, num_scheduled_tokens=dict(num_scheduled),
        total_num_scheduled_tokens=sum(num_scheduled.values()),
        finished_req_ids=set(), kv_connector_metadata=None)


class Running:
    """A request vLLM is running: its real KV and the blocks it will get."""

    def __init__(self, req, kv, blocks, computed):
        self.req, self.kv, self.blocks = req, kv, blocks
        self.computed = computed   # tokens with KV in the paged cache
        self.sent = 0              # blocks the scheduler output has named
        self.new = True


class Engine:
    """One vLLM instance: the scheduler's connector, a worker's connector
    and its paged cache (random bits before anything is written)."""

    def __init__(self, sock, seed, **extra):
        cfg = vllm_config(sock, **extra)
        self.sched = SeqkvConnector(cfg, KVConnectorRole.SCHEDULER, None)
        self.worker = SeqkvConnector(cfg, KVConnectorRole.WORKER, None)
        rng = np.random.default_rng(seed)
        self.caches = {n: rng.integers(0, 1 << 16, size=(2, NUM_BLOCKS, BS, H, D),
                                       dtype=np.uint16) for n in NAMES}
        # registered in reverse: the connector orders layers by their index
        self.worker.register_kv_caches({n: self.caches[n] for n in reversed(NAMES)})

    def schedule(self, req_id, tokens, kv, blocks, local=0, **kw):
        """A waiting request is scheduled: (Running, external tokens)."""
        req = request(req_id, tokens, **kw)
        ext, is_async = self.sched.get_num_new_matched_tokens(req, local)
        check(is_async is False, "%s: loads are synchronous" % req_id)
        self.sched.update_state_after_alloc(req, KVCacheBlocks(blocks), ext)
        return Running(req, kv, blocks, local + ext), ext

    def step(self, batch, after_load=None):
        """One engine step: batch is [(Running, tokens computed now)].
        after_load(i) runs right after wait_for_layer_load of layer i."""
        new, cached, num = [], [], {}
        for r, n in batch:
            need = -(-(r.computed + n) // BS)
            rid = r.req.request_id
            if r.new:
                new.append((rid, r.req.prompt_token_ids, r.blocks[:need], r.computed))
                r.new = False
            else:
                ids = r.blocks[r.sent:need]
                cached.append((rid, (ids,) if ids else None, r.computed))
            r.sent = need
            num[rid] = n
        out = scheduler_output(new, cached, num)
        meta = self.sched.build_connector_meta(out)
        out.kv_connector_metadata = meta
        sent = pickle.loads(pickle.dumps(meta))     # to the worker process
        w = self.worker
        attn = {n: object() for n in NAMES}
        w.bind_connector_metadata(sent)
        w.start_load_kv(types.SimpleNamespace(attn_metadata=attn, virtual_engine=0,
                                              no_compile_layers={}))
        for i, name in enumerate(NAMES):
            w.wait_for_layer_load(name)
            if after_load is not None:
                after_load(i)
            for r, n in batch:            # the attention writes the step's KV
                write_kv(self.caches[name], r.blocks, r.kv[i], r.computed, r.computed + n)
            w.save_kv_layer(name, self.caches[name], attn[name])
        w.wait_for_save()
        check(w.get_finished(set()) == (None, None), "get_finished: nothing asynchronous")
        errors = w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        for r, n in batch:
            r.computed += n
        return meta, errors

    def finish(self, r):
        got = self.sched.request_finished(r.req, r.blocks[:r.sent])
        check(got == (False, None), "request_finished %s: %r" % (r.req.request_id, got))


def write_kv(cache, blocks, kv_layer, start, end):
    """Tokens [start, end) of kv_layer ([2, T, H, D]) into their slots."""
    t = np.arange(start, end)
    b = np.asarray(blocks)[t // BS]
    cache[:, b, t % BS] = kv_layer[:, start:end]


def blocks_of(cache, blocks):
    """[2, tokens, H, D] held by blocks, in order."""
    return cache[:, list(blocks)].reshape(2, len(blocks) * BS, H, D)


# -- KV -------------------------------------------------------------------------
def synthetic_kv(seqs):
    """Causal stand-in for the model: token t's KV depends on tokens[:t+1]."""
    out = []
    for s in seqs:
        kv = np.empty((L, 2, len(s), H, D), dtype=np.uint16)
        h = 17
        for t, tok in enumerate(s):
            h = (h * 1000003 + tok + 1) & 0xFFFFFFFF
            kv[:, :, t] = np.random.default_rng(h).integers(0, 1 << 16, size=(L, 2, H, D),
                                                            dtype=np.uint16)
        out.append(kv)
    return out


def sequences():
    """(seq1, seq2, seq3, [L, 2, T, H, D] KV of each): seq1 201 tokens, seq2
    its first 150 then 61 of its own, seq3 a prefix nobody shares."""
    mp = model_path()
    if mp is not None:
        a, b, c = sample(seqkv_bin, 3, 211, 7)
    else:
        print("no stories260K model (../shared/models or $SEQKV_MODEL): the real-model "
              "KV is skipped, synthetic KV is used")
        rng = np.random.default_rng(7)
        a, b, c = ([1] + [int(x) for x in rng.integers(2, 512, 210)] for _ in range(3))
    seq1 = a[:201]
    cont = b[150:211]
    if cont[0] == a[150]:
        cont[0] = cont[0] % 511 + 1
    seq2 = a[:150] + cont
    seq3 = c[1:101]                              # no BOS: nothing shares a token with it
    if mp is not None:
        kvs = [np.stack([k, v], axis=1) for _, k, v in model_kv(seqkv_bin, [seq1, seq2, seq3])]
        print("stories260K KV (%s): %d, %d and %d tokens" % (mp, len(seq1), len(seq2),
                                                             len(seq3)))
    else:
        kvs = synthetic_kv([seq1, seq2, seq3])
    check(np.array_equal(kvs[0][:, :, :150], kvs[1][:, :, :150]),
          "the two sequences' KV agrees on their shared 150 tokens (causal model)")
    check(seq2[150] != seq1[150], "the continuation differs at token 150")
    check(seq3[0] != seq1[0], "the third sequence shares no prefix with the first")
    return seq1, seq2, seq3, kvs


# -- the scenarios ---------------------------------------------------------------
def first_request(srv, seq1, kv1):
    """Miss, chunked prefill, save at the completing step, decode."""
    e = Engine(srv.sock, seed=1)
    prompt = seq1[:200]
    blocks = list(range(3, 3 + 14))          # 13 for the prompt, 1 more for decoding
    r, ext = e.schedule("req-1", prompt, kv1, blocks)
    check(ext == 0, "req-1 misses: %d external tokens" % ext)
    meta, errors = e.step([(r, 128)])
    check(not meta.loads and not meta.saves, "req-1 chunk 1 of 2: nothing to do, %r" % meta)
    meta, errors = e.step([(r, 72)])
    check(not meta.loads and len(meta.saves) == 1, "req-1 chunk 2: one save, %r" % meta)
    if meta.saves:
        s = meta.saves[0]
        check(s.req_id == "req-1" and s.token_ids == prompt and s.block_ids == blocks[:13],
              "req-1 save spec: %r" % s)
    check(not errors, "req-1: no load errors")
    with seqkv.Client(srv.sock, timeout=30) as c:
        check(c.lookup(PROFILE, prompt) == 200, "the store holds req-1's 200 tokens")
        got = c.get(PROFILE, prompt)
        check(got.shape == (L, 2, 200, H, D) and np.array_equal(got, kv1[:, :, :200]),
              "the store's KV of req-1 is its KV, bit for bit")
    meta, errors = e.step([(r, 1)])             # decode: token 200 computed
    check(not meta.loads and not meta.saves, "req-1 decode step: nothing to do, %r" % meta)
    e.finish(r)
    return e, blocks


def second_request(srv, seq1, seq2, kv2, e1, blocks1):
    """A hit loaded layer by layer into other, non-contiguous blocks."""
    e = Engine(srv.sock, seed=2)
    prompt = seq2[:210]
    blocks = [40, 3, 17, 58, 9, 22, 31, 5, 50, 12, 44, 27, 36, 60]
    req = request("req-2", prompt)
    for local, want in ((0, 144), (32, 112), (144, 0), (160, 0)):
        got = e.sched.get_num_new_matched_tokens(req, local)
        check(got == (want, False), "req-2 matched beyond %d local tokens: %r, wanted %r"
              % (local, got, (want, False)))
    # the first 2 blocks are vLLM's own prefix cache; they hold a marker
    # until the load is checked (the same KV as the store's would hide a
    # write into them), then their KV, before the layer's attention reads it
    marker = np.full((2, 2, BS, H, D), 0x7FC1, np.uint16)
    for n in NAMES:
        e.caches[n][:, blocks[:2]] = marker
    before = {n: e.caches[n].copy() for n in NAMES}
    with seqkv.Client(srv.sock, timeout=30) as c:
        saved = c.get(PROFILE, seq1[:200])       # what req-1 saved
    r, ext = e.schedule("req-2", prompt, kv2, blocks, local=32)
    check(ext == 112, "req-2 loads 112 tokens beyond vLLM's 32: %d" % ext)
    load = blocks[2:9]                           # tokens [32, 144)

    def after_load(i):
        cache = e.caches[NAMES[i]]
        got = blocks_of(cache, load)
        check(np.array_equal(got, saved[i, :, 32:144]),
              "layer %d: the loaded blocks equal what req-1 saved, bit for bit" % i)
        check(np.array_equal(got, blocks_of(e1.caches[NAMES[i]], blocks1[2:9])),
              "layer %d: the loaded blocks equal req-1's paged blocks" % i)
        others = [b for b in range(NUM_BLOCKS) if b not in load]
        check(np.array_equal(cache[:, others], before[NAMES[i]][:, others]),
              "layer %d: no block outside the 7 loaded ones changed" % i)
        for j in range(i + 1, L):
            check(np.array_equal(e.caches[NAMES[j]], before[NAMES[j]]),
                  "layer %d untouched when only layer %d was waited for" % (j, i))
        write_kv(cache, blocks, kv2[i], 0, 32)   # vLLM's cached blocks, really

    meta, errors = e.step([(r, len(prompt) - 144)], after_load=after_load)
    want = LoadSpec("req-2", prompt[:144], blocks[:9], 32, 144)
    check(len(meta.loads) == 1 and vars(meta.loads[0]) == vars(want),
          "req-2 load spec %r, wanted %r" % (meta.loads, want))
    check(len(meta.saves) == 1 and meta.saves[0].block_ids == blocks[:14],
          "req-2 is saved (the store had 150 of its 210 tokens): %r" % meta.saves)
    check(not errors, "req-2: no load errors (%r)" % errors)
    others = [b for b in range(NUM_BLOCKS) if b not in blocks]
    for n in NAMES:
        check(np.array_equal(e.caches[n][:, others], before[n][:, others]),
              "%s: blocks of no request are unchanged after the step" % n)
    with seqkv.Client(srv.sock, timeout=30) as c:
        check(c.lookup(PROFILE, prompt) == 210, "the store holds req-2's 210 tokens")
        check(np.array_equal(c.get(PROFILE, prompt), kv2[:, :, :210]),
              "req-2's KV, gathered from non-contiguous blocks, stored bit for bit")
    e.finish(r)
    return e


def other_requests(srv, seq1, seq3, kvs, e):
    """Misses, a fully cached prompt, a multimodal prompt."""
    s = e.sched
    check(s.get_num_new_matched_tokens(request("req-3", seq3[:100]), 0) == (0, False),
          "req-3 (a prefix nobody cached) misses")
    check(s.get_num_new_matched_tokens(request("req-3b", [1] + seq3[:99]), 0) == (0, False),
          "req-3b (only the BOS token cached) misses: less than a block")
    got = s.get_num_new_matched_tokens(request("req-4", seq1[:161]), 0)
    check(got == (160, False), "req-4 (161 tokens, all cached): 160, %r" % (got,))
    got = s.get_num_new_matched_tokens(request("req-mm", seq1[:100], mm_features=["img"]), 0)
    check(got == (0, False), "a multimodal prompt is not served: %r" % (got,))
    # a prompt the store holds whole: all but the last block loaded, not saved again
    blocks = [61, 2, 33, 48, 20, 7, 55, 29, 14, 38]
    r, ext = e.schedule("req-5", seq1[:160], kvs[0], blocks)
    check(ext == 144, "req-5 (160 tokens, all cached) loads 144, computes 16: %d" % ext)
    meta, errors = e.step([(r, 16)])
    check(len(meta.loads) == 1 and not meta.saves and not errors,
          "req-5: one load, no save: %r %r" % (meta, errors))
    for i, n in enumerate(NAMES):
        check(np.array_equal(blocks_of(e.caches[n], blocks[:10]), kvs[0][i, :, :160]),
              "req-5 %s: the 9 loaded blocks and the computed one hold the prompt's KV" % n)
    e.finish(r)
    # producer only: lookups but no loads; consumer only: loads but no saves
    p = SeqkvConnector(vllm_config(srv.sock, role="kv_producer"), KVConnectorRole.SCHEDULER)
    check(p.get_num_new_matched_tokens(request("p", seq1[:100]), 0) == (0, False),
          "kv_producer loads nothing")
    q = SeqkvConnector(vllm_config(srv.sock, role="kv_consumer"), KVConnectorRole.SCHEDULER)
    rq = request("q", seq3[:50])
    check(q.get_num_new_matched_tokens(rq, 0) == (0, False), "kv_consumer: req misses")
    q.update_state_after_alloc(rq, KVCacheBlocks([1, 2, 3, 4]), 0)
    meta = q.build_connector_meta(scheduler_output([("q", rq.prompt_token_ids, [1, 2, 3, 4], 0)],
                                                   [], {"q": 50}))
    check(not meta.saves and not meta.loads, "kv_consumer saves nothing: %r" % meta)


def shape_errors(srv):
    cfg = vllm_config(srv.sock)
    ok = (2, NUM_BLOCKS, BS, H, D)

    def register(shape, dtype=np.uint16, layers=L, wrap=None):
        w = SeqkvConnector(cfg, KVConnectorRole.WORKER)
        caches = {LAYER % i: np.zeros(shape, dtype=dtype) for i in range(layers)}
        if wrap is not None:
            caches = {k: wrap(v) for k, v in caches.items()}
        w.register_kv_caches(caches)

    expect_error(ValueError, ["KV heads", "16", "8"], lambda: register((2, 8, BS, H, 16)),
                 "head_dim 16 against the profile's 8")
    expect_error(ValueError, ["2 KV heads", "profile"], lambda: register((2, 8, BS, 2, D)),
                 "2 KV heads against the profile's 4")
    expect_error(ValueError, ["4 attention layers", "5"], lambda: register(ok, layers=4),
                 "4 layers against the profile's 5")
    expect_error(ValueError, ["blocks of 32 tokens", "16"], lambda: register((2, 8, 32, H, D)),
                 "blocks of 32")
    expect_error(ValueError, ["[2, num_blocks, block_size"], lambda: register((8, BS, H, D)),
                 "a 4-D cache")
    expect_error(ValueError, ["uint8", "bf16"], lambda: register(ok, dtype=np.uint8),
                 "1-byte elements against bf16")
    expect_error(TypeError, ["numpy", "list"], lambda: register(ok, wrap=lambda a: a.tolist()),
                 "a cache that is not a numpy array")
    w = SeqkvConnector(cfg, KVConnectorRole.WORKER)
    caches = {n: np.zeros(ok, dtype=np.uint16) for n in NAMES}
    w.register_kv_caches(caches)
    meta = SeqkvConnectorMetadata()
    meta.saves.append(pickle.loads(pickle.dumps(
        types.SimpleNamespace(req_id="x", token_ids=[1] * 20, block_ids=[0, 1],
                              num_tokens=20))))
    w.bind_connector_metadata(meta)
    expect_error(ValueError, ["shape", "registered"],
                 lambda: w.save_kv_layer(NAMES[0], np.zeros((2, 8, BS, H, D), np.uint16), None),
                 "save_kv_layer with a layer of another shape")
    expect_error(ValueError, ["did not name"],
                 lambda: w.save_kv_layer("model.layers.9.self_attn.attn", caches[NAMES[0]], None),
                 "save_kv_layer of an unknown layer")
    # configs
    expect_error(ValueError, ["socket_path"],
                 lambda: SeqkvConnector(vllm_config(""), KVConnectorRole.SCHEDULER),
                 "no socket_path")
    expect_error(ValueError, ["unknown", "sock_path"],
                 lambda: SeqkvConnector(vllm_config(srv.sock, sock_path="x"), "SCHEDULER"),
                 "a misspelt key")
    expect_error(ValueError, ["block_size 32", "16"],
                 lambda: SeqkvConnector(vllm_config(srv.sock, block_size=32), "WORKER"),
                 "block_size against vLLM's cache_config")
    nofields = vllm_config(srv.sock, profile="nosuch")
    del nofields.kv_transfer_config.kv_connector_extra_config["profile_fields"]
    w = SeqkvConnector(nofields, KVConnectorRole.WORKER)
    expect_error(ValueError, ["nosuch", "profile_fields"], lambda: w.register_kv_caches(caches),
                 "a missing profile and no profile_fields")


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


def failures_as_misses(srv, seq1, seq2, kvs, e):
    """A record deleted between lookup and load; then the server down."""
    log = Records()
    logger = logging.getLogger("seqkv.connectors.vllm")
    logger.addHandler(log)
    logger.setLevel(logging.INFO)
    logger.propagate = False                 # the test reads the records itself
    prompt = seq2[:210] + seq1[200:201] + [5, 6, 7, 8, 9, 10]
    blocks = [1, 4, 6, 8, 10, 11, 13, 15, 16, 18, 19, 21, 23, 24]
    fake = np.zeros((L, 2, len(prompt), H, D), np.uint16)
    r, ext = e.schedule("req-6", prompt, fake, blocks)
    check(ext == 208, "req-6 would load 208 tokens: %d" % ext)
    with seqkv.Client(srv.sock, timeout=30) as c:
        check(c.delete(PROFILE, seq2[:210]) == 60, "KV.DEL of req-2's own 60 tokens")
    before = {n: e.caches[n].copy() for n in NAMES}
    meta, errors = e.step([(r, len(prompt) - 208)])
    check(len(meta.loads) == 1 and len(meta.saves) == 1, "req-6: a load and a save, %r" % meta)
    check(errors == set(blocks[:13]), "req-6: the 13 blocks of the failed load are "
                                      "reported, %r" % sorted(errors))
    untouched = [b for b in range(NUM_BLOCKS) if b != blocks[13]]   # 13: the computed tokens
    check(all(np.array_equal(e.caches[n][:, untouched], before[n][:, untouched])
              for n in NAMES), "req-6: a failed load writes nothing")
    check(any("req-6" in rec.getMessage() and rec.levelno == logging.ERROR
              for rec in log.records), "req-6: the failed load is logged")
    with seqkv.Client(srv.sock, timeout=30) as c:
        check(c.lookup(PROFILE, prompt) == 150,
              "req-6 was not saved (its load failed): the store has 150 of it")
    e.finish(r)

    srv.stop()
    log.records.clear()
    req = request("req-7", seq1[:200])
    check(e.sched.get_num_new_matched_tokens(req, 0) == (0, False),
          "server down: the scheduler sees a miss")
    check(e.sched.get_num_new_matched_tokens(req, 0) == (0, False),
          "server down: still a miss")
    warned = [rec for rec in log.records if rec.levelno == logging.WARNING]
    check(len(warned) == 1 and "KV.LOOKUP" in warned[0].getMessage(),
          "server down: one warning for the outage, %r" % [x.getMessage() for x in warned])
    meta = SeqkvConnectorMetadata()
    meta.loads.append(LoadSpec("req-8", seq1[:64], [30, 31, 32, 33], 0, 64))
    w = e.worker                             # its connections are to the dead server
    w.bind_connector_metadata(meta)
    before = {n: e.caches[n].copy() for n in NAMES}
    w.start_load_kv(None)
    for n in NAMES:
        w.wait_for_layer_load(n)
    w.wait_for_save()
    check(w.get_block_ids_with_load_errors() == {30, 31, 32, 33},
          "server down: the load's blocks are reported as failed")
    check(w.get_block_ids_with_load_errors() == set(), "load errors are reported once")
    check(all(np.array_equal(e.caches[n], before[n]) for n in NAMES),
          "server down: the cache is untouched")
    w.clear_connector_metadata()
    meta = SeqkvConnectorMetadata()
    meta.saves.append(types.SimpleNamespace(req_id="req-9", token_ids=seq1[:20],
                                            block_ids=[30, 31], num_tokens=20))
    w.bind_connector_metadata(meta)
    for n in NAMES:
        w.save_kv_layer(n, e.caches[n], None)
    w.wait_for_save()
    check(any("req-9" in rec.getMessage() and rec.levelno == logging.ERROR
              for rec in log.records), "server down: the failed save is logged, not raised")
    w.clear_connector_metadata()
    logger.removeHandler(log)
    logger.propagate = True


# a stand-in for vLLM's base module: its path, its abstract methods and
# __init__(vllm_config, role, kv_cache_config); then the factory's steps
_AS_VLLM = r"""
import abc, enum, importlib, inspect, sys, types
names = ["vllm", "vllm.distributed", "vllm.distributed.kv_transfer",
         "vllm.distributed.kv_transfer.kv_connector",
         "vllm.distributed.kv_transfer.kv_connector.v1"]
for n in names:
    sys.modules[n] = types.ModuleType(n)
base = types.ModuleType(names[-1] + ".base")
sys.modules[base.__name__] = base
class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1
class KVConnectorMetadata(abc.ABC):
    pass
class KVConnectorBase_V1(abc.ABC):
    def __init__(self, vllm_config, role, kv_cache_config):
        self.base_init = (role, kv_cache_config)
    @abc.abstractmethod
    def start_load_kv(self, forward_context, **kwargs): ...
    @abc.abstractmethod
    def wait_for_layer_load(self, layer_name): ...
    @abc.abstractmethod
    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs): ...
    @abc.abstractmethod
    def wait_for_save(self): ...
    @abc.abstractmethod
    def get_num_new_matched_tokens(self, request, num_computed_tokens): ...
    @abc.abstractmethod
    def update_state_after_alloc(self, request, blocks, num_external_tokens): ...
    @abc.abstractmethod
    def build_connector_meta(self, scheduler_output): ...
base.KVConnectorRole, base.KVConnectorMetadata = KVConnectorRole, KVConnectorMetadata
base.KVConnectorBase_V1 = KVConnectorBase_V1
cls = getattr(importlib.import_module("seqkv.connectors.vllm"), "SeqkvConnector")
assert "kv_cache_config" in inspect.signature(cls).parameters, "signature"
kvt = types.SimpleNamespace(kv_role="kv_both",
                            kv_connector_extra_config={"socket_path": "/nonexistent"})
c = cls(types.SimpleNamespace(kv_transfer_config=kvt), KVConnectorRole.WORKER, "kvcc")
assert isinstance(c, KVConnectorBase_V1), "not a KVConnectorBase_V1"
assert c.base_init == (KVConnectorRole.WORKER, "kvcc"), "base __init__ %r" % (c.base_init,)
meta = sys.modules["seqkv.connectors.vllm"].SeqkvConnectorMetadata()
assert isinstance(meta, KVConnectorMetadata), "metadata base"
assert "torch" not in sys.modules, "torch imported"
print("as-vllm ok")
"""


def as_vllm():
    r = subprocess.run([sys.executable, "-c", _AS_VLLM], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=pydir))
    check(r.returncode == 0 and r.stdout.strip() == "as-vllm ok",
          "imported under vLLM's base module: rc %d %s%s" % (r.returncode, r.stdout,
                                                              r.stderr[-800:]))


def main():
    logging.basicConfig(level=logging.WARNING)
    seq1, seq2, seq3, kvs = sequences()
    with Server(seqkv_bin) as srv:
        e1, blocks1 = first_request(srv, seq1, kvs[0])
        e2 = second_request(srv, seq1, seq2, kvs[1], e1, blocks1)
        other_requests(srv, seq1, seq3, kvs, e2)
        shape_errors(srv)
        failures_as_misses(srv, seq1, seq2, kvs, e2)
    as_vllm()
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("vllm connector: all checks passed")


if __name__ == "__main__":
    main()
