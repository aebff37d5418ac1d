#!/usr/bin/python3
"""seqkv.connectors.vllm_tier.SeqkvSecondaryTier against a live `seqkv
serve`, driven the way vLLM's TieringOffloadingManager drives a secondary
tier (vllm/v1/kv_offload/tiering/manager.py).

vLLM cannot be installed here, so FakeTiering below reproduces the
manager's calls: on_new_request per new request; lookup of each chunk in
prefix order, polling the tier's get_finished_jobs() once per step first,
a tier HIT reserving a primary row and queueing a promotion (answered
HIT_PENDING), RETRY asked again next step; complete_store (after the
worker's GPU->CPU copy into the primary rows) cascading one submit_store
per request; on_schedule_end flushing the queued promotions as one
submit_load per request and calling the tier's on_schedule_end;
has_pending_work and take_events every tick; on_request_finished;
reset_cache = drain_jobs then every job accounted for; shutdown. The CPU
primary tier is a numpy int8 array [rows, row_bytes], handed to the tier
as memoryview (SharedOffloadRegion.create_kv_memoryview's shape). Keys are
vLLM OffloadKeys: a chained sha256 block hash + the group index as 4
big-endian bytes.

A row is one 16-token block of stories260K's KV (seqkv model kv, bf16:
5 layers x K,V x 16 tokens x 4 heads x 8 dims) plus 256 bytes of row
padding, or random bytes without the model (said so).

  1. Stores: a request's 8 blocks cascade to the tier; the server holds
     each row bit for bit under <prefix><model>_<digest>_r0/g<group>/<hash>.
  2. Another tier instance (an empty index, as another vLLM would be):
     RETRY while it asks the server, then every block is promoted into
     other, scattered primary rows, bit for bit, no other row touched;
     lookup never blocks.
  3. Misses: unknown blocks are MISS after one RETRY; a shared prefix hits
     up to where it diverges.
  4. Namespaces: another model, another KV dtype, other parallel sizes do
     not see the blocks (a parallelism-agnostic layout does, as with vLLM's
     FileMapper).
  5. drain_jobs while a store runs: it finishes (its blocks on the
     server), the queued ones are cancelled and reported failed, every job
     exactly once.
  6. Damaged values: a row of the wrong size fails its key only
     (successful_keys), and that key is a MISS afterwards (no livelock).
  7. The server dies in the middle of a load (kill -9 between two MGETs),
     then is stopped: jobs report failure with the keys that did load,
     lookups are misses, nothing raises.
  8. Imported the way vLLM's SecondaryTierFactory imports module_path
     (stand-in vLLM modules with the real paths), the class derives from
     vLLM's SecondaryTierManager, takes its extra base keyword, answers
     with vLLM's LookupResult, JobResult and OffloadingEvent (KV events of
     stored blocks), and moves rows of TransferJob's chunk_ids.
  9. TCP (when this seqkv serves --port): the client over tcp:// with AUTH,
     and the tier over TCP in a token tenant's namespace.

Usage: vllm_tier_test.py SEQKV_BIN PYTHON_DIR"""
import dataclasses
import hashlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import types

seqkv_bin, pydir = sys.argv[1], sys.argv[2]
sys.path.insert(0, pydir)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import seqkv  # noqa: E402
from pyfixture import Server, model_kv, model_path, sample  # noqa: E402
from seqkv.connectors.vllm_tier import LookupResult, SeqkvSecondaryTier  # noqa: E402

L, H, D, BS = 5, 4, 8, 16            # stories260K: layers, KV heads, head dim; block tokens
KV_ROW = L * 2 * BS * H * D * 2      # bf16 bytes of one block
ROW = KV_ROW + 256                   # the primary row: padded, as SharedOffloadRegion's
NUM_ROWS = 64
MODEL = "karpathy/stories260K"
HIT, MISS, RETRY = LookupResult.HIT, LookupResult.MISS, LookupResult.RETRY
HIT_PENDING = LookupResult.HIT_PENDING
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


# ---- vLLM's types, as vllm/v1/kv_offload/base.py and tiering/base.py define them ----

@dataclasses.dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: dict = None


@dataclasses.dataclass
class JobMetadata:
    job_id: int
    keys: list
    block_ids: np.ndarray
    is_promotion: bool
    req_context: ReqContext


def make_offload_key(block_hash, group_idx=0):
    return block_hash + group_idx.to_bytes(4, "big", signed=False)


def block_keys(tokens, group_idx=0, seed=b"none"):
    """OffloadKeys of the whole blocks of tokens: a chained hash, parent first."""
    keys, parent = [], hashlib.sha256(seed).digest()
    for i in range(0, len(tokens) - len(tokens) % BS, BS):
        blk = np.asarray(tokens[i:i + BS], dtype="<u4").tobytes()
        parent = hashlib.sha256(parent + blk).digest()
        keys.append(make_offload_key(parent, group_idx))
    return keys


def spec(model=MODEL, dtype="bfloat16", tp=1, agnostic=True, events=True):
    """An OffloadingSpec as the tier reads it (vllm/v1/kv_offload/config.py)."""
    par = types.SimpleNamespace(rank=0, world_size=tp, tp_size=tp, pp_size=1, pcp_size=1,
                                dcp_size=1, data_parallel_index=0,
                                is_parallelism_agnostic=agnostic)
    groups = (types.SimpleNamespace(
        tokens_per_block=BS,
        layer_names=tuple("model.layers.%d.self_attn.attn" % i for i in range(L))),)
    cfg = types.SimpleNamespace(
        groups=groups, worker_kv_bytes_per_block=KV_ROW, enable_kv_cache_events=events,
        extra_config={}, engine_id="e0",
        model=types.SimpleNamespace(name=model, dtype=dtype),
        cache=types.SimpleNamespace(tokens_per_hash=BS, blocks_per_chunk=1),
        parallel=par)
    return types.SimpleNamespace(
        config=cfg, extra_config={}, blocks_per_chunk=1,
        kv_events_config=types.SimpleNamespace(enable_kv_cache_events=events,
                                               self_describing_kv_events=False))


class FakeTiering:
    """TieringOffloadingManager's side of the calls, one secondary tier."""

    def __init__(self, address, fill=0, spec_kw=None, **tier_kw):
        self.primary = np.full((NUM_ROWS, ROW), fill, dtype=np.int8)
        self.view = memoryview(self.primary)
        self.tier = SeqkvSecondaryTier(offloading_spec=spec(**(spec_kw or {})),
                                       primary_kv_view=self.view,
                                       tier_type="SeqkvSecondaryTier",
                                       address=address, **tier_kw)
        self.slots = {}                  # key -> [row, ready]
        self.free = list(range(NUM_ROWS - 1, -1, -1))
        self.jobs = {}                   # job id -> JobMetadata
        self.results = {}                # job id -> JobResult
        self.reported = []               # every job id get_finished_jobs gave
        self.next_id = 100
        self.processed = False
        self.promotions = {}             # req_id -> (ctx, keys, rows)
        self.events = []

    def _alloc(self):
        return self.free.pop()

    def process_finished(self):
        for r in self.tier.get_finished_jobs():
            self.reported.append(r.job_id)
            jm = self.jobs.pop(r.job_id, None)
            check(jm is not None, "finished job %r unknown or reported twice" % r.job_id)
            if jm is None:
                continue
            self.results[r.job_id] = r
            if jm.is_promotion:
                ok = set(jm.keys) if r.success else set(r.successful_keys or ())
                for k in jm.keys:
                    if k in ok:
                        self.slots[k][1] = True          # complete_write(success)
                    else:
                        self.free.append(self.slots.pop(k)[0])

    def maybe_process(self):
        if not self.processed:
            self.processed = True
            self.process_finished()

    def on_new_request(self, ctx):
        r = self.tier.on_new_request(ctx)
        check(r is not None, "on_new_request returned None")

    def lookup(self, key, ctx):
        self.maybe_process()
        s = self.slots.get(key)
        if s is not None:
            return HIT if s[1] else HIT_PENDING
        r = self.tier.lookup(key, ctx)
        if r is HIT:
            if not self.free:
                return MISS
            row = self._alloc()
            self.slots[key] = [row, False]              # prepare_write: in flight
            p = self.promotions.setdefault(ctx.req_id, (ctx, [], []))
            p[1].append(key)
            p[2].append(row)
            return HIT_PENDING
        return r

    def store(self, keys, rows, ctx):
        """prepare_store, the worker's GPU->CPU copy, complete_store (cascade)."""
        self.maybe_process()
        slots = []
        for k, data in zip(keys, rows):
            row = self._alloc()
            self.primary[row] = np.frombuffer(data, dtype=np.int8)
            self.slots[k] = [row, True]
            slots.append(row)
        return self.submit_store(keys, slots, ctx)

    def submit_store(self, keys, slots, ctx):
        jm = JobMetadata(self.next_id, list(keys), np.array(slots, dtype=np.int64), False, ctx)
        self.next_id += 1
        self.jobs[jm.job_id] = jm
        self.tier.submit_store(jm)
        return jm.job_id

    def submit_load(self, keys, slots, ctx):
        for k, row in zip(keys, slots):
            if k not in self.slots:                     # prepare_write
                self.slots[k] = [row, False]
                if row in self.free:
                    self.free.remove(row)
        jm = JobMetadata(self.next_id, list(keys), np.array(slots, dtype=np.int64), True, ctx)
        self.next_id += 1
        self.jobs[jm.job_id] = jm
        self.tier.submit_load(jm)
        return jm.job_id

    def on_schedule_end(self):
        self.maybe_process()
        ids = []
        for ctx, keys, rows in self.promotions.values():
            ids.append(self.submit_load(keys, rows, ctx))
        self.promotions.clear()
        self.tier.on_schedule_end(types.SimpleNamespace(new_req_ids=(), preempted_req_ids=()))
        self.processed = False
        self.tick()
        return ids

    def tick(self):
        self.tier.has_pending_work()
        self.events.extend(self.tier.take_events())

    def evict(self, keys):
        for k in keys:
            s = self.slots.pop(k, None)
            if s is not None:
                self.free.append(s[0])

    def run_until_idle(self, timeout=30):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.on_schedule_end()
            if not self.jobs and not self.tier.has_pending_work():
                return True
            time.sleep(0.002)
        return False

    def match(self, keys, ctx, steps=400):
        """The scheduler's prefix lookup, step after step until settled:
        (blocks found, first answer of the first step, its seconds)."""
        first = None
        for _ in range(steps):
            n, pending = 0, False
            for k in keys:
                t0 = time.monotonic()
                r = self.lookup(k, ctx)
                if first is None:
                    first = (r, time.monotonic() - t0)
                if r is HIT:
                    n += 1
                    continue
                pending = r is not MISS
                break
            if not pending:
                return n, first
            self.on_schedule_end()
            time.sleep(0.002)
        return -1, first

    def reset_cache(self):
        self.tier.drain_jobs()
        self.process_finished()
        check(not self.jobs, "reset_cache: jobs %s unaccounted for after drain_jobs"
              % sorted(self.jobs))

    def shutdown(self):
        self.tier.shutdown()


# ---- data --------------------------------------------------------------------

def rows_of(k, v):
    """Primary rows of a sequence's KV (k, v: [L, T, H, D] uint16): one per
    16-token block, layer-major K then V, plus the row padding."""
    rng = np.random.default_rng(int(k.sum()) & 0xFFFF)
    out = []
    for c in range(k.shape[1] // BS):
        parts = []
        for layer in range(L):
            parts.append(k[layer, c * BS:(c + 1) * BS].astype("<u2").tobytes())
            parts.append(v[layer, c * BS:(c + 1) * BS].astype("<u2").tobytes())
        out.append(b"".join(parts) + rng.bytes(ROW - KV_ROW))
    return out


def sequences():
    mp = model_path()
    if mp is None:
        print("no stories260K model (../shared/models or $SEQKV_MODEL): the real-model "
              "part is skipped, rows are random bytes")
        rng = np.random.default_rng(7)
        seqs = [rng.integers(1, 500, 128).tolist() for _ in range(2)]
        return seqs, [[rng.bytes(ROW) for _ in range(8)] for _ in seqs]
    seqs = sample(seqkv_bin, 2, 128, 11)
    kvs = model_kv(seqkv_bin, seqs, dtype="bf16")
    for (tok, k, v), s in zip(kvs, seqs):
        assert list(tok) == s and k.shape == (L, 128, H, D), k.shape
    print("stories260K KV (%s): 2 sequences of 128 tokens, %d-byte rows" % (mp, ROW))
    return seqs, [rows_of(k, v) for _, k, v in kvs]


# ---- the checks --------------------------------------------------------------

def stores(srv, keys, rows):
    m = FakeTiering(srv.sock)
    ctx = ReqContext("req-store")
    m.on_new_request(ctx)
    job = m.store(keys, rows, ctx)
    check(m.run_until_idle(), "store job did not finish")
    r = m.results.get(job)
    check(r is not None and r.success, "store job failed: %r" % (r,))
    check(type(r).__name__ in ("JobResult", "_JobResult"), "result type %r" % type(r))
    check(not m.tier.has_pending_work(), "has_pending_work after the store was reported")
    check(len(m.events) == 1 and list(m.events[0].keys) == keys if m.events
          else m.tier.events is None, "stored-blocks events %r" % (m.events[:1],))
    ns = m.tier.namespace
    check(ns.startswith("vllm/karpathy_stories260K_") and ns.endswith("_r0/"),
          "namespace %r" % ns)
    with seqkv.Client(srv.sock, timeout=30) as c:
        names = [m.tier.key_of(k) for k in keys]
        check(names[0] == ("%sg0/%s" % (ns, keys[0][:-4].hex())).encode(),
              "key name %r" % names[0])
        vals = c.call("MGET", *names)
        check(vals == rows, "the server's rows differ from the primary rows")
        cfg = c.call("GET", ns + "config.json")
        check(cfg is not None and b'"model_name":"karpathy/stories260K"'
              in cfg.replace(b" ", b""), "config.json %r" % (cfg,))
    # the same tier knows them: HIT at once, no server round trip
    m.evict(keys)
    n, first = m.match(keys, ReqContext("req-again"))
    check(first[0] is HIT_PENDING and n == len(keys),
          "known keys: first answer %s, %d hits" % (first[0], n))
    check(m.run_until_idle(), "promotions from the known index did not finish")
    # storing what is there already is a success without traffic
    job = m.submit_store(keys[:2], [m.slots[k][0] for k in keys[:2]], ctx)
    check(m.run_until_idle() and m.results[job].success, "re-store of present keys")
    # jobs the tier cannot do are reported failed, not raised
    j1 = m.submit_store([make_offload_key(b"\3" * 32)], [NUM_ROWS + 5], ctx)
    j2 = m.submit_load(keys[:2], [1], ctx)
    m.process_finished()
    check(not m.results[j1].success and not m.results[j2].success,
          "a row outside the primary tier, or keys without rows, not failed")
    m.tier.on_request_finished(ctx)
    m.shutdown()


def loads(srv, keys, rows, other_keys):
    m = FakeTiering(srv.sock, fill=0x55)
    m.free = [3, 60, 17, 41, 8, 29, 50, 12, 33, 2, 7, 44][::-1]   # scattered rows
    ctx = ReqContext("req-load")
    m.on_new_request(ctx)
    n, first = m.match(keys, ctx)
    check(first[0] is RETRY, "an unknown key first answers %s, not RETRY" % (first[0],))
    check(first[1] < 0.5, "lookup took %.3f s" % first[1])
    check(n == len(keys), "promoted %d of %d blocks" % (n, len(keys)))
    check(m.run_until_idle(), "loads did not finish")
    check(all(r.success for r in m.results.values()), "a load failed: %r" % (m.results,))
    used = set()
    for k, data in zip(keys, rows):
        row = m.slots[k][0]
        used.add(row)
        check(m.primary[row].tobytes() == data, "row %d differs from what was stored" % row)
    others = [r for r in range(NUM_ROWS) if r not in used]
    check(all((m.primary[r] == 0x55).all() for r in others), "a row not loaded into changed")
    m.tier.on_request_finished(ctx)

    # misses: nobody's blocks; a prefix shared for 4 blocks, then a new branch
    ctx3 = ReqContext("req-miss")
    m.on_new_request(ctx3)
    n, first = m.match(other_keys, ctx3)
    check(first[0] is RETRY and n == 0, "unknown blocks: first %s, %d hits" % (first[0], n))
    ctx4 = ReqContext("req-prefix")
    m.on_new_request(ctx4)
    branch = keys[:4] + other_keys[4:]
    n, _ = m.match(branch, ctx4)
    check(n == 4, "a 4-block shared prefix: %d hits" % n)
    for c in (ctx3, ctx4):
        m.tier.on_request_finished(c)
    check(not m.tier._probes and not m.tier._req_keys,
          "probe state left after every request finished: %d" % len(m.tier._probes))
    m.shutdown()


def namespaces(srv, keys):
    ns = set()
    for kw, hit in ((dict(model="other/model"), False), (dict(dtype="float16"), False),
                    (dict(tp=2, agnostic=False), False), (dict(tp=2, agnostic=True), True)):
        m = FakeTiering(srv.sock, spec_kw=kw)
        ctx = ReqContext("req-ns")
        m.on_new_request(ctx)
        n, _ = m.match(keys[:3], ctx)
        check(n == (3 if hit else 0), "namespace %s: %d of 3 blocks found" % (kw, n))
        ns.add(m.tier.namespace)
        m.run_until_idle()
        m.shutdown()
    base = FakeTiering(srv.sock)
    check(len(ns) == 4 and base.tier.namespace in ns, "namespaces %s" % sorted(ns))
    base.shutdown()
    # the same namespace through the tier config's overrides
    m = FakeTiering(srv.sock, spec_kw=dict(model="x"), model=MODEL)
    check(m.tier.namespace == FakeTiering(srv.sock).tier.namespace, "model override")
    m.shutdown()


class SlowWrites:
    """A connection whose MSETs take 0.3 s (a job stays running a while)."""

    def __init__(self, conn):
        self.conn = conn

    def call(self, *args):
        if args[0] == "MSET":
            time.sleep(0.3)
        return self.conn.call(*args)

    def call_many(self, cmds):
        return self.conn.call_many(cmds)

    def close(self):
        self.conn.close()


def drain(srv):
    m = FakeTiering(srv.sock, io_threads=1)
    real = m.tier._connect
    m.tier._connect = lambda: SlowWrites(real())
    ctx = ReqContext("req-drain")
    m.on_new_request(ctx)
    rng = np.random.default_rng(3)
    ids, keys = [], []
    for j in range(6):
        ks = [make_offload_key(rng.bytes(32)) for _ in range(3)]
        keys.append(ks)
        ids.append(m.store(ks, [rng.bytes(ROW) for _ in ks], ctx))
    end = time.monotonic() + 10
    while m.tier._running == 0 and time.monotonic() < end:
        time.sleep(0.005)
    check(m.tier._running == 1, "no store job running before drain")
    m.reset_cache()
    check(sorted(m.reported) == sorted(ids), "drain: reported %s of %s"
          % (sorted(m.reported), ids))
    check(not m.tier.has_pending_work() and m.tier._running == 0, "work left after drain")
    ok = [i for i in ids if m.results[i].success]
    check(ok == ids[:1], "drain_jobs: jobs %s succeeded, want the running one %d only"
          % (ok, ids[0]))
    with seqkv.Client(srv.sock, timeout=30) as c:
        there = [c.call("EXISTS", *[m.tier.key_of(k) for k in ks]) for ks in keys]
    check(there == [3, 0, 0, 0, 0, 0], "drain: blocks on the server %s" % there)
    check(m.tier.get_finished_jobs() == [], "results reported after drain twice")
    # cancelled stores are not misses: the keys are unknown, asked again
    m.evict(keys[1])
    check(m.tier.lookup(keys[1][0], ctx) is RETRY, "a cancelled store's key")
    m.tier.on_request_finished(ctx)
    m.shutdown()


def damaged(srv, keys, rows):
    m0 = FakeTiering(srv.sock)
    with seqkv.Client(srv.sock, timeout=30) as c:
        c.call("SET", m0.tier.key_of(keys[5]), b"short")
    m0.shutdown()
    m = FakeTiering(srv.sock)
    ctx = ReqContext("req-damaged")
    m.on_new_request(ctx)
    n, _ = m.match(keys[4:7], ctx)
    check(n == 1, "damaged row: %d blocks promoted before the damage (want 1)" % n)
    m.run_until_idle()
    bad = [r for r in m.results.values() if not r.success]
    check(len(bad) == 1 and bad[0].successful_keys is None and keys[5] not in m.slots,
          "the damaged block's promotion: %r" % (bad,))
    check(m.primary[m.slots[keys[4]][0]].tobytes() == rows[4], "the block before it")
    check(m.tier.lookup(keys[5], ctx) is MISS, "a failed key is not a MISS afterwards")
    # one job of three rows, the middle one damaged: it alone fails
    m.evict([keys[4]])
    job = m.submit_load(keys[4:7], [20, 21, 22], ctx)
    m.run_until_idle()
    r = m.results.get(job)
    check(r is not None and not r.success and list(r.successful_keys or ()) ==
          [keys[4], keys[6]], "a job with a damaged row: %r" % (r,))
    check(m.primary[20].tobytes() == rows[4] and m.primary[22].tobytes() == rows[6],
          "the good rows of a job that failed")
    m.tier.on_request_finished(ctx)
    m.shutdown()


class KillAfter:
    """A connection that kills the server (-9) before its second MGET."""

    def __init__(self, conn, srv):
        self.conn, self.srv, self.mgets = conn, srv, 0

    def call(self, *args):
        if args[0] == "MGET":
            self.mgets += 1
            if self.mgets == 2:
                self.srv.kill()
        return self.conn.call(*args)

    def call_many(self, cmds):
        return self.conn.call_many(cmds)

    def close(self):
        self.conn.close()


def server_death(keys, rows):
    with Server(seqkv_bin) as srv:
        m = FakeTiering(srv.sock)
        ctx = ReqContext("req-death")
        m.on_new_request(ctx)
        m.store(keys, rows, ctx)
        check(m.run_until_idle(), "store before the kill")
        m.shutdown()

        m = FakeTiering(srv.sock, batch_bytes=2 * ROW, io_threads=1)
        real = m.tier._connect
        m.tier._connect = lambda: KillAfter(real(), srv)
        job = m.submit_load(keys, list(range(len(keys))), ctx)
        check(m.run_until_idle(), "a load across the server's death was not reported")
        r = m.results.get(job)
        check(r is not None and not r.success and list(r.successful_keys or ()) == keys[:2],
              "load across the kill: %r" % (r,))
        for i in range(2):
            check(m.primary[i].tobytes() == rows[i], "row %d loaded before the kill" % i)
        check(m.tier.lookup(keys[3], ctx) is MISS, "a key whose load died is not a MISS")

        t0 = time.monotonic()
        j1 = m.submit_store([make_offload_key(b"\1" * 32)], [40], ctx)
        j2 = m.submit_load([keys[7]], [41], ctx)
        check(time.monotonic() - t0 < 0.5, "submits blocked on a dead server")
        n, first = m.match([make_offload_key(b"\2" * 32)], ctx)
        check(first[0] is RETRY and first[1] < 0.5 and n == 0,
              "lookup with the server gone: %s in %.3f s, %d" % (first[0], first[1], n))
        check(m.run_until_idle(), "jobs on a dead server were not reported")
        check(not m.results[j1].success and not m.results[j2].success,
              "jobs on a dead server succeeded")
        m.reset_cache()
        threads = list(m.tier._threads)
        m.shutdown()
        check(threads and not any(t.is_alive() for t in threads),
              "threads alive after shutdown")
        # after shutdown: still no exception, jobs reported failed
        j3 = m.submit_load([keys[0]], [42], ctx)
        m.process_finished()
        check(j3 in m.results and not m.results[j3].success, "a job after shutdown")


# a stand-in for vLLM with its module paths: kv_offload/base.py's types,
# tiering/base.py's SecondaryTierManager (its abstract methods and
# __init__), and the factory's steps for a tier given by module_path
# (SecondaryTierFactory.get_tier_class / create_secondary_tier)
_AS_VLLM = r"""
import abc, dataclasses, enum, importlib, sys, time, types
import numpy as np
for n in ["vllm", "vllm.v1", "vllm.v1.kv_offload", "vllm.v1.kv_offload.tiering"]:
    sys.modules[n] = types.ModuleType(n)
ob = sys.modules["vllm.v1.kv_offload.base"] = types.ModuleType("vllm.v1.kv_offload.base")
tb = sys.modules["vllm.v1.kv_offload.tiering.base"] = types.ModuleType(
    "vllm.v1.kv_offload.tiering.base")
class LookupResult(enum.Enum):
    MISS = enum.auto(); HIT = enum.auto(); HIT_PENDING = enum.auto(); RETRY = enum.auto()
class Medium(enum.Enum):
    CPU = "CPU"; STORAGE = "STORAGE"
class Locality(enum.Enum):
    LOCAL = "LOCAL"; REMOTE = "REMOTE"
@dataclasses.dataclass
class RequestOffloadingContext:
    policy: str = "chunk_level"
@dataclasses.dataclass
class OffloadingEvent:
    keys: list; medium: object; removed: bool; locality: object = None
ob.LookupResult, ob.Medium, ob.Locality = LookupResult, Medium, Locality
ob.RequestOffloadingContext, ob.OffloadingEvent = RequestOffloadingContext, OffloadingEvent
@dataclasses.dataclass
class JobResult:
    job_id: int
    success: bool
    successful_keys: object = None
    transfer_time: object = None
class SecondaryTierManager(abc.ABC):
    medium = None
    def __init__(self, offloading_spec, primary_kv_view, tier_type, backpressure_detector=None):
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self.locality = None
        self.bp = backpressure_detector
    @abc.abstractmethod
    def lookup(self, key, req_context): ...
    @abc.abstractmethod
    def submit_store(self, job_metadata): ...
    @abc.abstractmethod
    def submit_load(self, job_metadata): ...
    @abc.abstractmethod
    def get_finished_jobs(self): ...
    @abc.abstractmethod
    def on_new_request(self, req_context): ...
    @abc.abstractmethod
    def drain_jobs(self): ...
    def has_pending_work(self): return False
    def take_events(self): return ()
    def on_request_finished(self, req_context): return
    def on_schedule_end(self, context): return
    def shutdown(self): return
tb.SecondaryTierManager, tb.JobResult = SecondaryTierManager, JobResult
# the factory, out of tree: type = the class name in module_path
tier_config = {"type": "SeqkvSecondaryTier", "module_path": "seqkv.connectors.vllm_tier",
               "address": "unix:///nonexistent/seqkv.sock", "timeout_s": 2,
               "locality": "local"}
module = importlib.import_module(tier_config["module_path"])
tier_cls = getattr(module, tier_config["type"])
assert issubclass(tier_cls, SecondaryTierManager), "not a SecondaryTierManager"
config = dict(tier_config)
tier_type = config.pop("type"); config.pop("module_path", None)
spec = types.SimpleNamespace(vllm_config=types.SimpleNamespace(
    model_config=types.SimpleNamespace(model="m", dtype="bfloat16"),
    cache_config=types.SimpleNamespace(block_size=16, cache_dtype="auto"),
    parallel_config=types.SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1,
                                          rank=0)))
view = memoryview(np.zeros((4, 64), dtype=np.int8))
tier = tier_cls(offloading_spec=spec, primary_kv_view=view, tier_type=tier_type,
                backpressure_detector="bp", **config)
assert tier.bp == "bp" and tier.tier_type == "SeqkvSecondaryTier", "base __init__"
assert tier.medium is Medium.STORAGE and tier.locality is Locality.LOCAL, "medium, locality"
ctx = types.SimpleNamespace(req_id="r")
assert isinstance(tier.on_new_request(ctx), RequestOffloadingContext), "on_new_request"
key = b"\x07" * 32 + (0).to_bytes(4, "big")
assert tier.lookup(key, ctx) is LookupResult.RETRY, "first lookup"
for _ in range(200):
    r = tier.lookup(key, ctx)
    if r is not LookupResult.RETRY:
        break
    time.sleep(0.01)
assert r is LookupResult.MISS, "unreachable server: %r" % (r,)
job = types.SimpleNamespace(job_id=5, keys=[key], chunk_ids=np.array([1], dtype=np.int32),
                            is_promotion=True, req_context=ctx)
tier.submit_load(job)
tier.drain_jobs()
res = list(tier.get_finished_jobs())
assert len(res) == 1 and type(res[0]) is JobResult and res[0].job_id == 5 \
    and not res[0].success, "result %r" % (res,)
tier.shutdown()
# the tier's first non-empty get_finished_jobs(), polled for up to 5 s
def finished(t):
    for _ in range(500):
        res = list(t.get_finished_jobs())
        if res:
            return res
        time.sleep(0.01)
    return []
# against the live server: KV events of stored blocks, vLLM's HIT, a load
# (the tip's TransferJob: chunk_ids)
config.update(address=sys.argv[1], enable_kv_events=True)
spec.kv_events_config = types.SimpleNamespace(enable_kv_cache_events=True)
prim = np.arange(4 * 64, dtype=np.int64).astype(np.int8).reshape(4, 64)
tier = tier_cls(offloading_spec=spec, primary_kv_view=memoryview(prim), tier_type=tier_type,
                **config)
keys = [bytes([i]) * 32 + (0).to_bytes(4, "big") for i in (1, 2)]
tier.submit_store(types.SimpleNamespace(job_id=7, keys=keys,
                  chunk_ids=np.array([2, 3], dtype=np.int32), is_promotion=False,
                  req_context=ctx))
res = finished(tier)
assert [(r.job_id, r.success) for r in res] == [(7, True)], "store %r" % (res,)
ev = list(tier.take_events())
assert len(ev) == 1 and type(ev[0]) is OffloadingEvent and ev[0].keys == keys \
    and ev[0].medium is Medium.STORAGE and ev[0].locality is Locality.LOCAL \
    and not ev[0].removed, "events %r" % (ev,)
assert list(tier.take_events()) == [], "events taken twice"
assert tier.lookup(keys[1], ctx) is LookupResult.HIT, "lookup of a stored key"
tier.submit_load(types.SimpleNamespace(job_id=8, keys=keys[::-1],
                 chunk_ids=np.array([0, 1], dtype=np.int32), is_promotion=True,
                 req_context=ctx))
res = finished(tier)
assert [(r.job_id, r.success) for r in res] == [(8, True)], "load %r" % (res,)
assert (prim[0] == prim[3]).all() and (prim[1] == prim[2]).all(), "rows loaded"
tier.on_request_finished(ctx)
tier.shutdown()
assert "torch" not in sys.modules and "vllm.v1.kv_offload.tiering.factory" not in sys.modules
print("as-vllm ok")
"""


def as_vllm(srv):
    r = subprocess.run([sys.executable, "-c", _AS_VLLM, srv.sock], capture_output=True,
                       text=True,
                       env=dict(os.environ, PYTHONPATH=pydir), timeout=120)
    check(r.returncode == 0 and r.stdout.strip() == "as-vllm ok",
          "imported under vLLM's modules: rc %d %s%s" % (r.returncode, r.stdout,
                                                        r.stderr[-1500:]))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tcp(keys, rows):
    helptext = subprocess.run([seqkv_bin, "serve", "--help"], capture_output=True,
                              text=True).stdout + ""
    if "--port" not in helptext:
        print("this seqkv serves no TCP (--port): the TCP part is skipped")
        return
    port = free_port()
    token = "tier-test-" + os.urandom(8).hex()
    config = "tenant owner uid %d\ntenant owner admin\ntenant vllm token %s\n" % (
        os.getuid(), token)
    with Server(seqkv_bin, config=config, extra=["--port", str(port)]) as srv:
        addr = "tcp://127.0.0.1:%d" % port
        with seqkv.Client(addr, timeout=10) as c:
            check(c.ping() == "PONG", "PING over TCP before AUTH")
            try:
                c.call("GET", "x")
                check(False, "GET over TCP without AUTH answered")
            except seqkv.Error as e:
                check(e.code == "NOAUTH", "GET before AUTH: %s" % e)
        try:
            seqkv.Client(addr, auth=("vllm", "wrong"), timeout=10)
            check(False, "a wrong token was accepted")
        except seqkv.Error as e:
            check(e.code == "WRONGPASS", "wrong token: %s" % e)
        with seqkv.Client(addr, auth=("vllm", token), timeout=10) as c:
            r = c.call_many([("SET", "a", b"1"), ("GET", "a"), ("INCR", "a"),
                             ("EXISTS", "a", "b")])
            check(r[:2] == ["OK", b"1"] and isinstance(r[2], seqkv.Error) and r[3] == 1,
                  "call_many over TCP: %r" % (r,))
        os.environ["SEQKV_TIER_TEST_TOKEN"] = token
        m = FakeTiering(addr, tenant="vllm", token_env="SEQKV_TIER_TEST_TOKEN")
        ctx = ReqContext("req-tcp")
        m.on_new_request(ctx)
        m.store(keys, rows, ctx)
        check(m.run_until_idle() and all(r.success for r in m.results.values()),
              "store over TCP")
        m.shutdown()
        m = FakeTiering(addr, auth=["vllm", token])
        m.on_new_request(ctx)
        n, _ = m.match(keys, ctx)
        check(n == len(keys) and m.run_until_idle(), "load over TCP: %d blocks" % n)
        check(all(m.primary[m.slots[k][0]].tobytes() == d for k, d in zip(keys, rows)),
              "rows loaded over TCP differ")
        m.shutdown()
        # the Unix socket's tenant (by uid) has its own namespace
        m = FakeTiering(srv.sock)
        m.on_new_request(ctx)
        n, _ = m.match(keys, ctx)
        check(n == 0, "another tenant sees %d of the token tenant's blocks" % n)
        m.shutdown()
        print("tcp: client and tier over %s with AUTH" % addr)


def main():
    logging.basicConfig(level=logging.ERROR)
    # the failures provoked here are logged by the tier; the checks judge them
    logging.getLogger("seqkv.connectors.vllm_tier").setLevel(logging.CRITICAL)
    seqs, rows = sequences()
    keys = block_keys(seqs[0])
    other = block_keys(seqs[1], seed=b"other")
    check(len(keys) == 8 and len(rows[0]) == 8, "8 blocks a sequence")
    with Server(seqkv_bin) as srv:
        stores(srv, keys, rows[0])
        loads(srv, keys, rows[0], other)
        namespaces(srv, keys)
        drain(srv)
        damaged(srv, keys, rows[0])
        as_vllm(srv)
    server_death(other, rows[1])
    tcp(keys, rows[0])
    left = [t.name for t in threading.enumerate() if t.name.startswith("seqkv_tier")]
    check(not left, "tier threads left running: %s" % left)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("vllm tier: all checks passed")


if __name__ == "__main__":
    main()
