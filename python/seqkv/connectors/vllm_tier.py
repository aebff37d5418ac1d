"""SeqkvSecondaryTier: a secondary tier of vLLM's tiered KV offloading
(OffloadingConnector + TieringOffloadingSpec) stored in a seqkv server.

vLLM's CPU primary tier keeps offloaded blocks in a shared memory region;
secondary tiers get that region as `primary_kv_view` (a memoryview shaped
[num_blocks, row_bytes]) and copy whole rows to and from their own storage:
a store ("cascade") after a block reaches the CPU tier, a load
("promotion") when a lookup finds a block only here. This tier keeps each
row as one value of the server's blob namespace (the Redis string
commands: MSET, MGET, EXISTS, SET), under a key made of vLLM's OffloadKey
(block hash + KV cache group) and a namespace like vLLM's FileMapper (the
fs tier's): model, KV dtype, tokens per hash, blocks per chunk, parallel
sizes (collapsed when the layout is parallelism-agnostic) and the KV cache
groups, hashed. Values are the exact row bytes; the server dedups and
compresses them, per tenant.

Configuration (vLLM loads the class by its name from `module_path`; every
other key of the tier's dict is a constructor keyword):

    vllm serve MODEL --kv-transfer-config '{
      "kv_connector": "OffloadingConnector",
      "kv_role": "kv_both",
      "kv_connector_extra_config": {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": 10737418240,
        "secondary_tiers": [{
          "type": "SeqkvSecondaryTier",
          "module_path": "seqkv.connectors.vllm_tier",
          "address": "unix:///run/seqkv.sock",
          "auth": ["vllm", "<token>"]
        }]}}'

`address` is the seqkv server: a Unix socket (a path or unix://PATH; the
server knows local peers by uid, so `auth` may be left out) or
tcp://127.0.0.1:PORT (`seqkv serve --port PORT`), where the connection must
AUTH with a tenant's token, config line `tenant vllm token <token>`:
"auth": "<token>" or ["vllm", "<token>"], or "tenant": "vllm" with
"token_env": "SEQKV_TOKEN" to keep the secret out of the command line.
The other keys are in _TIER_KEYS below. Instances sharing a namespace
share blocks only when their block hashes agree (vLLM's NONE_HASH seed is
deterministic by default now; older versions need PYTHONHASHSEED fixed).

How it behaves inside the scheduler (every method runs there, and none may
block or raise):
  lookup        a key this tier stored or saw present is HIT at once; a key
                being stored is RETRY; any other key is RETRY while a probe
                thread (its own connection) asks the server with pipelined
                EXISTS, then HIT or MISS, remembered while a request asks
                for it (released in on_request_finished). A server that
                cannot be reached is a MISS.
  submit_store  queues the job for the I/O threads (each with its own
                connection): the rows of job.block_ids are sent, uncopied,
                with MSET in batches of `batch_bytes`; keys known stored are
                skipped.
  submit_load   queued likewise, ahead of stores: MGET, each value checked
                to be one whole row, then written into its primary row. A
                missing, damaged or short value fails its key only: the job
                reports failure with `successful_keys` (the keys loaded), and
                the failed keys are MISS from then on (no retry livelock).
  get_finished_jobs  every job exactly once, success or failure; a lost
                connection or a stopped server fails the job, never raises.
  drain_jobs    cancels the queued jobs (reported failed) and waits for the
                running ones, so no I/O touches primary memory afterwards.
  has_pending_work  True while a job is queued, running or unreported.

Inside vLLM the class derives from vLLM's SecondaryTierManager (vLLM's
factory asserts it), found in sys.modules where the factory has imported it
before importing this module; this module never imports vllm or torch, and
without vLLM it stands alone on a stand-in base with the same interface.
Older tier interfaces are served too: lookup answers True/False/None where
vLLM has no LookupResult, get_finished() is get_finished_jobs(), and jobs
may carry block_ids or chunk_ids.
"""
import collections
import dataclasses
import enum
import hashlib
import inspect
import json
import logging
import os
import sys
import threading
import time

from .. import client as _client

__all__ = ["SeqkvSecondaryTier", "namespace_fields", "namespace_base"]

logger = logging.getLogger(__name__)

_TIER_BASE_MOD = "vllm.v1.kv_offload.tiering.base"
_OFFLOAD_BASE_MOD = "vllm.v1.kv_offload.base"
_tier_mod = sys.modules.get(_TIER_BASE_MOD)      # present when vLLM's factory imports us
_offload_mod = sys.modules.get(_OFFLOAD_BASE_MOD)


def _vllm(name, *mods):
    for m in mods:
        v = getattr(m, name, None) if m is not None else None
        if v is not None:
            return v
    return None


class _LookupResult(enum.Enum):
    """vLLM's LookupResult, for use without vLLM."""
    MISS = 1
    HIT = 2
    HIT_PENDING = 3
    RETRY = 4


@dataclasses.dataclass
class _JobResult:
    """vLLM's JobResult, for use without vLLM."""
    job_id: int
    success: bool
    successful_keys: object = None
    transfer_time: object = None


@dataclasses.dataclass
class _RequestOffloadingContext:
    """vLLM's RequestOffloadingContext (chunk-level policy), without vLLM."""
    policy: str = "chunk_level"


class _StandInTierManager:
    """vLLM's SecondaryTierManager interface (tiering/base.py), for use
    without vLLM: the constructor and the optional hooks' defaults."""

    medium = None

    def __init__(self, offloading_spec, primary_kv_view, tier_type):
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self.locality = None

    def has_pending_work(self):
        return False

    def take_events(self):
        return ()

    def touch(self, keys, req_context):
        return

    def on_request_finished(self, req_context):
        return

    def on_schedule_end(self, context):
        return

    def shutdown(self):
        return

    def get_stats(self):
        return None


_TierBase = _vllm("SecondaryTierManager", _tier_mod) or _StandInTierManager
_VLLM_LOOKUP = _vllm("LookupResult", _offload_mod, _tier_mod)
# a vLLM whose tiers still answer lookup() with True / False / None
_LEGACY_LOOKUP = _tier_mod is not None and _VLLM_LOOKUP is None
LookupResult = _VLLM_LOOKUP or _LookupResult
JobResult = _vllm("JobResult", _tier_mod) or _JobResult
RequestOffloadingContext = (_vllm("RequestOffloadingContext", _offload_mod, _tier_mod)
                            or _RequestOffloadingContext)
_Medium = _vllm("Medium", _offload_mod)
_Locality = _vllm("Locality", _offload_mod)
_OffloadingEvent = _vllm("OffloadingEvent", _offload_mod)
try:
    _RESULT_FIELDS = {f.name for f in dataclasses.fields(JobResult)}
except TypeError:   # not a dataclass: ask its constructor
    _RESULT_FIELDS = set(inspect.signature(JobResult).parameters)

_TIER_KEYS = {
    "address": "the seqkv server: a Unix socket path, unix://PATH or tcp://HOST:PORT (required)",
    "auth": "a token, or [tenant, token], for AUTH (required over TCP)",
    "tenant": "the tenant to AUTH as with token_env",
    "token_env": "an environment variable holding the token",
    "key_prefix": "prefix of every key (default 'vllm/')",
    "model": "the model name in the namespace (default: vLLM's)",
    "dtype": "the KV dtype in the namespace (default: vLLM's)",
    "io_threads": "threads (and connections) moving rows (default 2)",
    "timeout_s": "socket timeout in seconds (default 30)",
    "batch_bytes": "most row bytes in one MSET or MGET (default 64 MiB)",
    "index_keys": "most keys remembered as stored, for instant hits (default 262144)",
    "enable_kv_events": "emit vLLM KV events for stored blocks (default false)",
    "locality": "LOCAL or REMOTE, for vLLM's per-request tier filters",
}

_MAX_PAIRS = 500            # MSET key/value pairs (the server's max-args is 1024)
_MAX_PROBE = 1024           # keys one EXISTS pipeline asks for


# ---- the namespace (vLLM's FileMapper, vllm/v1/kv_offload/file_mapper.py) --------

def namespace_fields(offloading_spec, model=None, dtype=None):
    """(fields, rank): what vLLM's FileMapper.from_offloading_spec(...,
    parallel_agnostic=True) hashes into a tier's base path, read from the
    spec (its normalized `config`; older vLLMs: its `vllm_config`)."""
    cfg = getattr(offloading_spec, "config", None)
    if cfg is not None and hasattr(cfg, "model") and hasattr(cfg, "parallel"):
        par = cfg.parallel
        fields = {
            "model_name": str(cfg.model.name),
            "tokens_per_hash": int(cfg.cache.tokens_per_hash),
            "blocks_per_file": int(getattr(cfg.cache, "blocks_per_chunk", 1)),
            "tp_size": int(par.tp_size),
            "pp_size": int(par.pp_size),
            "pcp_size": int(par.pcp_size),
            "dcp_size": int(par.dcp_size),
            "dtype": str(cfg.model.dtype),
            "kv_cache_groups": [{"tokens_per_block": int(g.tokens_per_block),
                                 "layer_names": list(g.layer_names)} for g in cfg.groups],
            "inference_engine": "vllm",
        }
        rank = int(par.rank)
        agnostic = bool(getattr(par, "is_parallelism_agnostic", False))
    else:
        vc = getattr(offloading_spec, "vllm_config", None)
        if vc is None:
            raise ValueError("SeqkvSecondaryTier: the offloading spec has neither a "
                             "config nor a vllm_config to name the namespace from")
        pc, cc, mc = vc.parallel_config, vc.cache_config, vc.model_config
        kv_dtype = str(getattr(cc, "cache_dtype", "auto"))
        if kv_dtype == "auto":
            kv_dtype = str(getattr(mc, "dtype", "auto"))
        fields = {
            "model_name": str(mc.model),
            "tokens_per_hash": int(getattr(cc, "block_size", 16)),
            "blocks_per_file": int(getattr(offloading_spec, "block_size_factor", 1)),
            "tp_size": int(getattr(pc, "tensor_parallel_size", 1)),
            "pp_size": int(getattr(pc, "pipeline_parallel_size", 1)),
            "pcp_size": int(getattr(pc, "prefill_context_parallel_size", 1)),
            "dcp_size": int(getattr(pc, "decode_context_parallel_size", 1)),
            "dtype": kv_dtype.replace("torch.", ""),
            "kv_cache_groups": [],
            "inference_engine": "vllm",
        }
        rank = int(getattr(pc, "rank", 0))
        agnostic = False
    if agnostic:
        fields.update(tp_size=1, pp_size=1, pcp_size=1, dcp_size=1)
        rank = 0
    if model is not None:
        fields["model_name"] = str(model)
    if dtype is not None:
        fields["dtype"] = str(dtype)
    return fields, rank


def namespace_base(fields):
    """FileMapper's base name: <model with '/' as '_'>_<12 hex of the
    sha256 of the fields' canonical JSON> (the model part cut to 200
    characters: a key is at most 495 bytes)."""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
    return "%s_%s" % (fields["model_name"].replace("/", "_")[:200], digest)


# ---- jobs ---------------------------------------------------------------------

class _Job:
    __slots__ = ("job_id", "load", "keys", "rows", "req_id", "started", "skip", "counted")

    def __init__(self, job_id, load, keys, rows, req_id):
        self.job_id = job_id
        self.load = load
        self.keys = keys          # OffloadKey bytes
        self.rows = rows          # primary rows, parallel to keys
        self.req_id = req_id
        self.started = None
        self.skip = ()            # stores: keys already stored (not sent)
        self.counted = ()         # stores: keys counted in _storing


class _Probe:
    __slots__ = ("result", "reqs")

    def __init__(self):
        self.result = None        # None: asked, not answered; True / False
        self.reqs = set()


def _job_rows(job):
    ids = getattr(job, "block_ids", None)
    if ids is None:
        ids = getattr(job, "chunk_ids", None)
    if ids is None:
        raise ValueError("job %r has neither block_ids nor chunk_ids" % (job,))
    return [int(b) for b in ids]


class SeqkvSecondaryTier(_TierBase):
    """vLLM secondary tier on a seqkv server (see the module docstring)."""

    medium = getattr(_Medium, "STORAGE", None)

    def __init__(self, offloading_spec, primary_kv_view, tier_type="SeqkvSecondaryTier",
                 **config):
        base_params = {}
        if _TierBase is not _StandInTierManager:
            params = inspect.signature(_TierBase.__init__).parameters
            # keywords vLLM's own base takes (e.g. backpressure_detector)
            for k in list(config):
                if k not in _TIER_KEYS and k in params:
                    base_params[k] = config.pop(k)
            args = {}
            if "offloading_spec" in params:
                args["offloading_spec"] = offloading_spec
            elif "vllm_config" in params:
                args["vllm_config"] = getattr(offloading_spec, "vllm_config", offloading_spec)
            if "primary_kv_view" in params:
                args["primary_kv_view"] = primary_kv_view
            if "tier_type" in params:
                args["tier_type"] = tier_type
            args.update(base_params)
            _TierBase.__init__(self, **args)
        else:
            _StandInTierManager.__init__(self, offloading_spec, primary_kv_view, tier_type)
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self._read_config(config)

        if primary_kv_view.strides is None or len(primary_kv_view.shape) != 2:
            raise ValueError("SeqkvSecondaryTier: primary_kv_view must be a 2-D memoryview "
                             "[num_blocks, row_bytes], got shape %r"
                             % (primary_kv_view.shape,))
        self._row_bytes = int(primary_kv_view.strides[0])
        self._num_rows = int(primary_kv_view.shape[0])
        self._flat = primary_kv_view.cast("B")   # rows as bytes (fs tier: buffer.cast("B"))
        if self._flat.nbytes < self._num_rows * self._row_bytes:
            raise ValueError("SeqkvSecondaryTier: primary_kv_view is not contiguous rows")

        self.fields, self.rank = namespace_fields(offloading_spec, self._model, self._dtype)
        self.namespace = "%s%s_r%d/" % (self._prefix, namespace_base(self.fields), self.rank)
        self._ns = self.namespace.encode()
        if len(self._ns) + 80 > 495:
            raise ValueError("SeqkvSecondaryTier: key_prefix too long (%d bytes of key)"
                             % len(self._ns))

        kv_events = getattr(offloading_spec, "kv_events_config", None)
        self.events = None
        if self._enable_events:
            if _OffloadingEvent is not None and getattr(kv_events, "enable_kv_cache_events",
                                                        False):
                self.events = []
            else:
                logger.warning("SeqkvSecondaryTier: enable_kv_events is set but KV cache "
                               "events are disabled globally (or vLLM is absent): none")

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)      # jobs queued / finished
        self._loads = collections.deque()
        self._stores = collections.deque()
        self._jobs = {}                   # job id -> _Job, queued or running
        self._running = 0
        self._done = []                   # JobResults not yet reported
        self._stored = collections.OrderedDict()   # keys known present (LRU, bounded)
        self._storing = collections.Counter()      # keys in queued/running stores
        self._probes = {}                 # key -> _Probe
        self._req_keys = {}               # req_id -> keys it probed
        self._probe_q = collections.deque()
        self._probe_cond = threading.Condition(self._lock)
        self._threads = []
        self._started = False
        self._stopping = False
        self._config_written = False

    # ---- configuration ----------------------------------------------------------

    def _read_config(self, config):
        unknown = sorted(set(config) - set(_TIER_KEYS))
        if unknown:
            raise ValueError("SeqkvSecondaryTier: unknown secondary tier keys %s; known: %s"
                             % (unknown, ", ".join("%s (%s)" % kv for kv in _TIER_KEYS.items())))
        address = config.get("address")
        if not address:
            raise ValueError("SeqkvSecondaryTier: the tier config needs 'address': "
                             "unix:///run/seqkv.sock or tcp://127.0.0.1:PORT")
        _client.parse_address(address)              # a bad address fails here, at start
        self._address = address
        auth = config.get("auth")
        env = config.get("token_env")
        if env is not None:
            if auth is not None:
                raise ValueError("SeqkvSecondaryTier: give 'auth' or 'token_env', not both")
            token = os.environ.get(str(env))
            if not token:
                raise ValueError("SeqkvSecondaryTier: token_env %r is not set" % env)
            tenant = config.get("tenant")
            auth = (str(tenant), token) if tenant else token
        elif config.get("tenant") is not None:
            raise ValueError("SeqkvSecondaryTier: 'tenant' goes with 'token_env' "
                             "(else give auth: [tenant, token])")
        self._auth = tuple(auth) if isinstance(auth, (list, tuple)) else auth
        self._prefix = str(config.get("key_prefix", "vllm/"))
        self._model = config.get("model")
        self._dtype = config.get("dtype")
        self._io_threads = int(config.get("io_threads", 2))
        self._timeout = float(config.get("timeout_s", 30))
        self._batch_bytes = int(config.get("batch_bytes", 64 << 20))
        self._index_max = int(config.get("index_keys", 1 << 18))
        self._enable_events = bool(config.get("enable_kv_events", False))
        if self._io_threads < 1 or self._timeout <= 0 or self._batch_bytes < 1:
            raise ValueError("SeqkvSecondaryTier: io_threads, timeout_s and batch_bytes "
                             "must be positive")
        loc = config.get("locality")
        if loc is not None:
            self.locality = _Locality(str(loc).upper()) if _Locality is not None else str(loc)

    def key_of(self, key):
        """The server key of an OffloadKey: <namespace>g<group>/<block hash hex>."""
        key = bytes(key)
        return self._ns + b"g%d/" % int.from_bytes(key[-4:], "big") + key[:-4].hex().encode()

    # ---- threads and connections ------------------------------------------------

    def _connect(self):
        return _client.Client(self._address, auth=self._auth, timeout=self._timeout)

    def _start(self):
        """Start the threads at the first call that needs them (not in
        __init__: vLLM builds the manager before the engine runs)."""
        if self._started or self._stopping:
            return
        self._started = True
        t = threading.Thread(target=self._probe_loop, name="seqkv_tier_probe", daemon=True)
        self._threads.append(t)
        for i in range(self._io_threads):
            self._threads.append(threading.Thread(target=self._io_loop,
                                                  name="seqkv_tier_io%d" % i, daemon=True))
        for t in self._threads:
            t.start()

    # ---- results -----------------------------------------------------------------

    def _result(self, job_id, success, ok_keys=None):
        kw = {"job_id": job_id, "success": bool(success)}
        if not success and ok_keys and "successful_keys" in _RESULT_FIELDS:
            kw["successful_keys"] = tuple(ok_keys)
        return JobResult(**kw)

    def _finish_locked(self, job, success, ok_keys=(), cancelled=False):
        """Report job (lock held): its result queued for get_finished_jobs.
        A load's keys that did not load are misses from now on, unless the
        job was only cancelled."""
        self._jobs.pop(job.job_id, None)
        if not job.load:
            for k in job.counted:
                self._storing[k] -= 1
                if self._storing[k] <= 0:
                    del self._storing[k]
            if success:
                for k in job.keys:
                    self._remember_locked(k)
                if self.events is not None:
                    self.events.append(_OffloadingEvent(keys=list(job.keys),
                                                        medium=self.medium, removed=False,
                                                        **self._event_locality()))
        else:
            ok = set(ok_keys) if not success else set(job.keys)
            for k in job.keys:
                if k in ok:
                    self._remember_locked(k)
                elif not cancelled:
                    self._forget_locked(k, job.req_id)
        self._done.append(self._result(job.job_id, success, ok_keys))
        self._cond.notify_all()

    def _event_locality(self):
        if _OffloadingEvent is None:
            return {}
        try:
            names = {f.name for f in dataclasses.fields(_OffloadingEvent)}
        except TypeError:
            names = set()
        return {"locality": self.locality} if "locality" in names else {}

    def _remember_locked(self, k):
        self._stored[k] = None
        self._stored.move_to_end(k)
        while len(self._stored) > self._index_max:
            self._stored.popitem(last=False)

    def _forget_locked(self, k, req_id):
        """A key that failed to load: a MISS from now on for this request
        (else vLLM would promote it again and again)."""
        self._stored.pop(k, None)
        p = self._probes.get(k)
        if p is None:
            p = self._probes[k] = _Probe()
        p.result = False
        if req_id is not None:
            p.reqs.add(req_id)
            self._req_keys.setdefault(req_id, set()).add(k)

    # ---- vLLM's SecondaryTierManager interface ----------------------------------

    @staticmethod
    def get_tier_type():
        """The tier's type name (vLLM's first tier interface asked for it)."""
        return "SeqkvSecondaryTier"

    def on_new_request(self, req_context):
        """Chunk-level offloading: only newly computed chunks are cascaded."""
        return RequestOffloadingContext()

    get_request_offloading_context = on_new_request   # its name before the rename

    def lookup(self, key, req_context):
        """HIT, MISS or RETRY (True, False, None on older vLLMs); never blocks."""
        try:
            k = bytes(key)
            req_id = getattr(req_context, "req_id", None)
            with self._lock:
                if k in self._stored:
                    self._stored.move_to_end(k)
                    return self._answer(True)
                if k in self._storing:
                    return self._answer(None)
                p = self._probes.get(k)
                if p is None:
                    if self._stopping:
                        return self._answer(False)
                    p = self._probes[k] = _Probe()
                    self._probe_q.append(k)
                    self._probe_cond.notify()
                    self._start()
                if req_id is not None:
                    p.reqs.add(req_id)
                    self._req_keys.setdefault(req_id, set()).add(k)
                return self._answer(p.result)
        except Exception:
            logger.exception("SeqkvSecondaryTier: lookup failed (a miss)")
            return self._answer(False)

    @staticmethod
    def _answer(found):
        if _LEGACY_LOOKUP:
            return found
        if found is None:
            return LookupResult.RETRY
        return LookupResult.HIT if found else LookupResult.MISS

    def submit_store(self, job_metadata):
        self._submit(job_metadata, load=False)

    def submit_load(self, job_metadata):
        self._submit(job_metadata, load=True)

    def _submit(self, jm, load):
        job_id = getattr(jm, "job_id", None)
        try:
            keys = [bytes(k) for k in jm.keys]
            rows = _job_rows(jm)
            if len(rows) != len(keys):
                raise ValueError("%d keys but %d rows" % (len(keys), len(rows)))
            bad = [r for r in rows if not 0 <= r < self._num_rows]
            if bad:
                raise ValueError("rows %s outside the primary tier's %d"
                                 % (bad[:4], self._num_rows))
            rc = getattr(jm, "req_context", None)
            job = _Job(job_id, load, keys, rows, getattr(rc, "req_id", None))
            with self._lock:
                if job_id in self._jobs:
                    raise ValueError("job id %r is already in flight" % (job_id,))
                if self._stopping:
                    self._finish_locked(job, False, cancelled=True)
                    return
                if not load:
                    job.skip = {k for k in keys if k in self._stored}
                    if len(job.skip) == len(keys):
                        self._finish_locked(job, True)     # all there already
                        return
                self._start()
                if not load:
                    job.counted = [k for k in keys if k not in job.skip]
                    self._storing.update(job.counted)
                self._jobs[job_id] = job
                (self._loads if load else self._stores).append(job)
                self._cond.notify_all()
        except Exception as e:
            logger.error("SeqkvSecondaryTier: %s job %r refused (reported failed): %s",
                         "load" if load else "store", job_id, e,
                         exc_info=not isinstance(e, ValueError))
            with self._lock:
                self._done.append(self._result(job_id, False))

    def get_finished_jobs(self):
        with self._lock:
            done, self._done = self._done, []
        return done

    get_finished = get_finished_jobs      # the name before vLLM's rename

    def has_pending_work(self):
        with self._lock:
            return bool(self._jobs or self._done)

    def take_events(self):
        if self.events is None:
            return ()
        with self._lock:
            ev, self.events = self.events, []
        return ev

    def touch(self, keys, req_context):
        try:
            with self._lock:
                for k in keys:
                    k = bytes(k)
                    if k in self._stored:
                        self._stored.move_to_end(k)
        except Exception:
            logger.exception("SeqkvSecondaryTier: touch failed")

    def on_request_finished(self, req_context):
        try:
            req_id = getattr(req_context, "req_id", None)
            with self._lock:
                for k in self._req_keys.pop(req_id, ()):
                    p = self._probes.get(k)
                    if p is None:
                        continue
                    p.reqs.discard(req_id)
                    if not p.reqs and p.result is not None:
                        del self._probes[k]     # one still being asked goes when answered
        except Exception:
            logger.exception("SeqkvSecondaryTier: on_request_finished failed")

    request_finished = on_request_finished

    def on_schedule_end(self, context):
        return      # probes go out as lookups ask; nothing is deferred to the step's end

    def drain_jobs(self):
        """Cancel the queued jobs (reported failed) and wait for the running
        ones: afterwards no I/O touches primary memory, and every job's
        result is in get_finished_jobs()."""
        try:
            with self._lock:
                self._cancel_queued_locked()
                while self._running:
                    self._cond.wait(1.0)
        except Exception:
            logger.exception("SeqkvSecondaryTier: drain_jobs failed")

    def _cancel_queued_locked(self):
        for q in (self._loads, self._stores):
            while q:
                self._finish_locked(q.popleft(), False, cancelled=True)

    def shutdown(self):
        try:
            with self._lock:
                self._stopping = True
                self._cancel_queued_locked()
                for p in self._probes.values():
                    if p.result is None:
                        p.result = False
                self._probe_q.clear()
                self._cond.notify_all()
                self._probe_cond.notify_all()
            for t in self._threads:
                t.join(self._timeout + 5)
            self._threads = []
        except Exception:
            logger.exception("SeqkvSecondaryTier: shutdown failed")

    def get_stats(self):
        return None

    # ---- the probe thread: EXISTS for keys nobody here knows --------------------

    def _probe_loop(self):
        conn = None
        while True:
            with self._lock:
                while not self._probe_q and not self._stopping:
                    self._probe_cond.wait()
                if self._stopping:
                    break
                batch = []
                while self._probe_q and len(batch) < _MAX_PROBE:
                    batch.append(self._probe_q.popleft())
            found = [False] * len(batch)
            try:
                if conn is None:
                    conn = self._connect()
                replies = conn.call_many([("EXISTS", self.key_of(k)) for k in batch])
                found = [r == 1 for r in replies]
            except Exception as e:
                logger.warning("SeqkvSecondaryTier: EXISTS of %d keys failed (misses): %s",
                               len(batch), e)
                conn = self._drop(conn)
            with self._lock:
                for k, hit in zip(batch, found):
                    if hit:
                        self._remember_locked(k)
                    p = self._probes.get(k)
                    if p is None or p.result is not None:
                        continue
                    if not p.reqs:
                        del self._probes[k]
                    else:
                        p.result = hit
        self._drop(conn)

    @staticmethod
    def _drop(conn):
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
        return None

    # ---- the I/O threads: loads first, then stores ------------------------------

    def _io_loop(self):
        conn = None
        while True:
            with self._lock:
                while not self._loads and not self._stores and not self._stopping:
                    self._cond.wait()
                if self._stopping and not self._loads and not self._stores:
                    break
                job = (self._loads or self._stores).popleft()
                job.started = time.monotonic()
                self._running += 1
            ok_keys = ()
            try:
                if conn is None:
                    conn = self._connect()
                if job.load:
                    success, ok_keys = self._do_load(conn, job)
                else:
                    success = self._do_store(conn, job)
            except Exception as e:
                logger.warning("SeqkvSecondaryTier: %s job %r failed: %s",
                               "load" if job.load else "store", job.job_id, e)
                success = False
                if job.load:
                    ok_keys = getattr(e, "seqkv_loaded", ())
                conn = self._drop(conn)
            with self._lock:
                self._running -= 1
                self._finish_locked(job, success, ok_keys)
        self._drop(conn)

    def _row(self, r):
        return self._flat[r * self._row_bytes:(r + 1) * self._row_bytes]

    def _write_config(self, conn):
        if self._config_written:
            return
        doc = json.dumps(dict(self.fields, row_bytes=self._row_bytes), sort_keys=True)
        conn.call("SET", self._ns + b"config.json", doc, "NX")
        self._config_written = True

    def _do_store(self, conn, job):
        self._write_config(conn)
        pairs = [(k, r) for k, r in zip(job.keys, job.rows) if k not in job.skip]
        i = 0
        while i < len(pairs):
            args = ["MSET"]
            size = 0
            while i < len(pairs) and (size == 0 or size + self._row_bytes <= self._batch_bytes) \
                    and len(args) < 2 * _MAX_PAIRS:
                k, r = pairs[i]
                args += [self.key_of(k), self._row(r)]
                size += self._row_bytes
                i += 1
            reply = conn.call(*args)
            if reply != "OK":
                raise _client.Error("ERR MSET answered %r" % (reply,))
        return True

    def _do_load(self, conn, job):
        per = max(1, min(_MAX_PAIRS, self._batch_bytes // max(1, self._row_bytes)))
        loaded = []
        failed = 0
        try:
            for i in range(0, len(job.keys), per):
                keys = job.keys[i:i + per]
                values = conn.call("MGET", *[self.key_of(k) for k in keys])
                if not isinstance(values, list) or len(values) != len(keys):
                    raise _client.Error("ERR MGET answered %d values for %d keys"
                                        % (len(values) if isinstance(values, list) else -1,
                                           len(keys)))
                for k, r, v in zip(keys, job.rows[i:i + per], values):
                    if v is None or len(v) != self._row_bytes:
                        if v is not None:
                            logger.warning("SeqkvSecondaryTier: %r holds %d bytes, not a "
                                           "%d-byte row (miss)", self.key_of(k), len(v),
                                           self._row_bytes)
                        failed += 1
                        continue
                    self._row(r)[:] = v
                    loaded.append(k)
        except Exception as e:
            e.seqkv_loaded = tuple(loaded)
            raise
        return failed == 0, loaded

