"""SeqkvConnector: vLLM's v1 KV connector interface on a seqkv server.

vLLM loads it with

    --kv-transfer-config '{"kv_connector": "SeqkvConnector",
        "kv_connector_module_path": "seqkv.connectors.vllm",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"socket_path": "/run/seqkv.sock",
                                      "profile": "llama3-8b"}}'

and makes two instances: one in the scheduler (role SCHEDULER), one in
each worker (role WORKER). Both talk to seqkvd over its Unix socket.

Scheduler side (no numpy needed):
  get_num_new_matched_tokens  KV.LOOKUP of the prompt; the cached prefix
      beyond what vLLM has computed, in whole blocks, never the whole
      prompt (vLLM computes at least one token). A server it cannot reach
      is a miss (0, logged), never an exception.
  update_state_after_alloc    notes how many tokens to load (and whether
      the prompt should be saved: the store did not hold all of it).
  build_connector_meta        a SeqkvConnectorMetadata for the step: the
      loads (tokens, block ids, the token range to write) and the saves
      (the prompt, its block ids) of the requests scheduled in it.
  request_finished            forgets the request; (False, None): saves
      finish within the step, so vLLM frees the blocks at once.

Worker side (numpy; the paged caches are numpy arrays per layer,
[2, num_blocks, block_size, kv_heads, head_dim]):
  register_kv_caches   checks every layer against the profile.
  start_load_kv        sends one KV.GET ... LAYERS per load (a connection
      each), reading nothing yet.
  wait_for_layer_load  reads that layer of every load off its socket and
      writes it into the request's blocks: layer i is usable as soon as
      it has arrived, while the server still decodes the later ones.
  save_kv_layer        copies the layer of each prompt to save out of its
      blocks (gather).
  wait_for_save        finishes the loads, then KV.PUTs each saved prompt.
  get_block_ids_with_load_errors  the blocks of loads that failed (server
      gone, record evicted or damaged), for vLLM to recompute.

Requests with multimodal inputs, prompt embeddings, a LoRA adapter or a
cache salt are neither looked up nor saved: their KV is not a function of
the token ids alone. One KV cache group (no hybrid allocator), one rank
holding all KV heads (tensor parallel 1), FlashAttention's layout.

Inside vLLM the classes derive from vLLM's KVConnectorBase_V1 and
KVConnectorMetadata, which vLLM has imported before it imports this module;
this module itself never imports vllm or torch, and without vLLM the
classes stand alone (the test drives them with duck-typed objects).
"""
import enum
import inspect
import logging
import re
import sys

from .. import client as _client
from . import _paged

__all__ = ["SeqkvConnector", "SeqkvConnectorMetadata", "LoadSpec", "SaveSpec",
           "KVConnectorRole"]

logger = logging.getLogger(__name__)

_VLLM_BASE = "vllm.distributed.kv_transfer.kv_connector.v1.base"
_base_mod = sys.modules.get(_VLLM_BASE)   # present when vLLM is the importer
_ConnectorBase = getattr(_base_mod, "KVConnectorBase_V1", object)
_MetadataBase = getattr(_base_mod, "KVConnectorMetadata", object)
KVConnectorRole = getattr(_base_mod, "KVConnectorRole", None)
if KVConnectorRole is None:
    class KVConnectorRole(enum.Enum):
        """vLLM's roles, for use without vLLM."""
        SCHEDULER = 0
        WORKER = 1

_EXTRA_KEYS = {
    "socket_path": "the seqkvd Unix socket (required)",
    "auth": "a token, or [tenant, token], for AUTH",
    "profile": "the seqkv profile of the model's KV (default 'vllm')",
    "profile_fields": "KV.PROFILE SET fields to create the profile when missing",
    "block_size": "tokens per block (default: vLLM's cache_config.block_size, else 16)",
    "timeout_s": "socket timeout in seconds (default 30)",
}


class LoadSpec:
    """Load tokens [start, end) of token_ids[:end] into block_ids (the
    request's blocks from its first token); start and end are whole blocks."""

    def __init__(self, req_id, token_ids, block_ids, start, end):
        self.req_id = req_id
        self.token_ids = list(token_ids)
        self.block_ids = list(block_ids)
        self.start = start
        self.end = end

    @property
    def num_tokens(self):
        return self.end - self.start

    def __repr__(self):
        return "LoadSpec(%r, tokens [%d, %d), %d blocks)" % (
            self.req_id, self.start, self.end, len(self.block_ids))


class SaveSpec:
    """Save the KV of token_ids (a prompt) from block_ids."""

    def __init__(self, req_id, token_ids, block_ids):
        self.req_id = req_id
        self.token_ids = list(token_ids)
        self.block_ids = list(block_ids)

    @property
    def num_tokens(self):
        return len(self.token_ids)

    def __repr__(self):
        return "SaveSpec(%r, %d tokens, %d blocks)" % (
            self.req_id, len(self.token_ids), len(self.block_ids))


class SeqkvConnectorMetadata(_MetadataBase):
    """What the workers do in one step: loads, then saves."""

    def __init__(self):
        self.loads = []
        self.saves = []

    def __repr__(self):
        return "SeqkvConnectorMetadata(loads=%r, saves=%r)" % (self.loads, self.saves)


class _Request:
    """Scheduler-side state of a request the connector serves."""

    def __init__(self, tokens, save):
        self.tokens = tokens
        self.save = save           # the prompt still has to be put
        self.load = 0              # external tokens to load when next scheduled
        self.block_ids = []


class _Load:
    """A load in progress on the worker: its stream and the next layer."""

    def __init__(self, spec, client, stream):
        self.spec = spec
        self.client = client
        self.stream = stream
        self.next_layer = 0


def _role_name(role):
    name = getattr(role, "name", role)
    if isinstance(name, int):
        name = {0: "SCHEDULER", 1: "WORKER"}.get(name, name)
    name = str(name).upper()
    if name not in ("SCHEDULER", "WORKER"):
        raise ValueError("SeqkvConnector: unknown role %r (SCHEDULER or WORKER)" % (role,))
    return name


def _nonempty(x):
    return x is not None and len(x) > 0


def _group0(block_ids):
    """The block ids of the one KV cache group (vLLM sends one list a group)."""
    if block_ids and isinstance(block_ids[0], (list, tuple)):
        if len(block_ids) != 1:
            raise ValueError("SeqkvConnector: %d KV cache groups; it handles one "
                             "(run vLLM with --disable-hybrid-kv-cache-manager)"
                             % len(block_ids))
        return list(block_ids[0])
    return list(block_ids)


def _layer_order(names):
    """Layer names in model order: by the one integer in each name
    (model.layers.7.self_attn.attn), else in the order given."""
    nums = [re.findall(r"\d+", n) for n in names]
    if all(len(x) == 1 for x in nums) and len({x[0] for x in nums}) == len(names):
        return [n for _, n in sorted(zip((int(x[0]) for x in nums), names))]
    return list(names)


class SeqkvConnector(_ConnectorBase):
    """vLLM v1 KV connector storing prompts' KV in seqkvd (see the module)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        if _ConnectorBase is not object:
            self._init_vllm_base(vllm_config, role, kv_cache_config)
        self._connector_metadata = None
        self._vllm_config = vllm_config
        self._role = role
        self._role_name = _role_name(role)
        kvt = getattr(vllm_config, "kv_transfer_config", None)
        if kvt is None:
            raise ValueError("SeqkvConnector: vllm_config.kv_transfer_config is not set")
        self._kv_transfer_config = kvt
        self._read_config(vllm_config, kvt)
        self._profile_info = None
        # scheduler side
        self._client = None
        self._down = False
        self._hits = {}            # req_id -> tokens KV.LOOKUP found
        self._reqs = {}            # req_id -> _Request
        # worker side
        self._layers = None        # layer names in model order
        self._index = {}           # layer name -> layer index
        self._caches = []          # the paged caches, by layer index
        self._dtype = None
        self._save_client = None
        self._idle_clients = []
        self._loads = []
        self._saving = {}          # req_id -> (SaveSpec, [L, 2, n, H, D] array, layers done)
        self._load_errors = set()
        self._failed_reqs = set()  # requests whose load failed in this step

    def _init_vllm_base(self, vllm_config, role, kv_cache_config):
        params = inspect.signature(_ConnectorBase.__init__).parameters
        if "kv_cache_config" in params:
            _ConnectorBase.__init__(self, vllm_config, role, kv_cache_config)
        else:
            _ConnectorBase.__init__(self, vllm_config, role)

    def _read_config(self, vllm_config, kvt):
        extra = getattr(kvt, "kv_connector_extra_config", None) or {}
        unknown = sorted(set(extra) - set(_EXTRA_KEYS))
        if unknown:
            raise ValueError("SeqkvConnector: unknown kv_connector_extra_config keys %s; "
                             "known: %s" % (unknown, ", ".join(
                                 "%s (%s)" % kv for kv in _EXTRA_KEYS.items())))
        if not extra.get("socket_path"):
            raise ValueError("SeqkvConnector: kv_connector_extra_config needs "
                             "'socket_path', the seqkvd Unix socket")
        self._socket = str(extra["socket_path"])
        auth = extra.get("auth")
        self._auth = tuple(auth) if isinstance(auth, (list, tuple)) else auth
        self._profile = str(extra.get("profile", "vllm"))
        fields = extra.get("profile_fields")
        if fields is not None and not isinstance(fields, dict):
            raise ValueError("SeqkvConnector: profile_fields must be a dict of "
                             "KV.PROFILE SET fields, got %r" % (fields,))
        self._profile_fields = fields
        self._timeout = float(extra.get("timeout_s", 30))
        cache_bs = getattr(getattr(vllm_config, "cache_config", None), "block_size", None)
        bs = extra.get("block_size", cache_bs if cache_bs is not None else 16)
        bs = int(bs)
        if cache_bs is not None and int(cache_bs) != bs:
            raise ValueError("SeqkvConnector: block_size %d in kv_connector_extra_config "
                             "but vLLM's cache_config.block_size is %d" % (bs, cache_bs))
        if bs <= 0:
            raise ValueError("SeqkvConnector: block_size must be positive, got %d" % bs)
        self._block_size = bs
        kv_role = getattr(kvt, "kv_role", None) or "kv_both"
        if kv_role not in ("kv_producer", "kv_consumer", "kv_both"):
            raise ValueError("SeqkvConnector: kv_role %r (kv_producer, kv_consumer or "
                             "kv_both)" % (kv_role,))
        self._saves_kv = kv_role in ("kv_producer", "kv_both")
        self._loads_kv = kv_role in ("kv_consumer", "kv_both")

    # -- base-class plumbing (vLLM's KVConnectorBase_V1 does the same) ----
    @property
    def role(self):
        return self._role

    def bind_connector_metadata(self, connector_metadata):
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self):
        self._connector_metadata = None

    def has_connector_metadata(self):
        return self._connector_metadata is not None

    def _get_connector_metadata(self):
        assert self._connector_metadata is not None, "no connector metadata bound"
        return self._connector_metadata

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config):
        # wait_for_layer_load and save_kv_layer run inside the forward: a
        # full CUDA graph replay would skip them
        return True

    # -- connections -------------------------------------------------------
    def _connect(self):
        """A new authenticated connection; the profile checked (created
        from profile_fields when missing) on the first one."""
        c = _client.Client(self._socket, auth=self._auth, timeout=self._timeout)
        try:
            if self._profile_info is None:
                info = self._ensure_profile(c)
                if self._layers is not None:
                    self._check_caches(info)
                self._profile_info = info
        except BaseException:
            c.close()
            raise
        if self._down:
            logger.info("seqkv: the server at %s answers again", self._socket)
            self._down = False
        return c

    def _ensure_profile(self, c):
        try:
            return c.profile_get(self._profile)
        except _client.Error as e:
            if e.code != "NOTFOUND":
                raise
            if not self._profile_fields:
                raise ValueError(
                    "SeqkvConnector: profile %r does not exist on the server and "
                    "kv_connector_extra_config has no profile_fields to create it"
                    % self._profile) from None
        c.profile_set(self._profile, **self._profile_fields)
        logger.info("seqkv: created profile %s (%s)", self._profile, self._profile_fields)
        return c.profile_get(self._profile)

    def _server_down(self, what, e):
        if not self._down:
            logger.warning("seqkv: %s failed (%s: %s); treating it as a miss until "
                           "the server at %s answers", what, type(e).__name__, e,
                           self._socket)
        self._down = True

    def shutdown(self):
        for c in [self._client, self._save_client] + self._idle_clients + [
                ld.client for ld in self._loads]:
            if c is not None:
                c.close()
        self._client = self._save_client = None
        self._idle_clients = []
        self._loads = []

    # ======================================================================
    # Scheduler side
    # ======================================================================
    def _prompt(self, request):
        """The request's prompt token ids when its KV is a function of them
        alone, else None."""
        tokens = getattr(request, "prompt_token_ids", None)
        if not _nonempty(tokens):
            return None
        for attr in ("mm_features", "mm_positions", "mm_hashes"):
            if _nonempty(getattr(request, attr, None)):
                return None
        if getattr(request, "prompt_embeds", None) is not None:
            return None
        if getattr(request, "lora_request", None) is not None:
            return None
        if getattr(request, "cache_salt", None):
            return None
        return [int(t) for t in tokens]

    def _lookup(self, tokens):
        """KV.LOOKUP of tokens, or None when the server cannot answer."""
        try:
            if self._client is None:
                self._client = self._connect()
            hit = self._client.lookup(self._profile, tokens)
        except (OSError, _client.Error, ValueError) as e:
            if self._client is not None:
                self._client.close()
                self._client = None
            self._server_down("KV.LOOKUP", e)
            return None
        return hit

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens of the prompt beyond num_computed_tokens whose KV the store
        holds, in whole blocks, at most all but the last token: (n, False)
        (loads are synchronous). 0 on a miss or when the server is down."""
        tokens = self._prompt(request)
        if tokens is None:
            return 0, False
        hit = self._lookup(tokens)
        if hit is None:
            return 0, False
        self._hits[request.request_id] = hit
        if not self._loads_kv:
            return 0, False
        bs = self._block_size
        usable = min(hit, len(tokens) - 1) // bs * bs
        if usable <= num_computed_tokens:
            return 0, False
        return usable - num_computed_tokens, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        """Note the load of num_external_tokens (0: none) and whether the
        prompt is to be saved. The block ids come with the step's
        scheduler output (build_connector_meta), as the workers see them."""
        tokens = self._prompt(request)
        if tokens is None:
            return
        rid = request.request_id
        st = self._reqs.get(rid)
        if st is None:
            hit = self._hits.get(rid, 0)
            st = self._reqs[rid] = _Request(tokens, self._saves_kv and hit < len(tokens))
        if num_external_tokens % self._block_size:
            raise ValueError("SeqkvConnector: %d external tokens for %s are not whole "
                             "blocks of %d" % (num_external_tokens, rid, self._block_size))
        st.load = num_external_tokens

    def build_connector_meta(self, scheduler_output):
        """The loads and saves of this step's scheduled requests."""
        meta = SeqkvConnectorMetadata()
        scheduled = getattr(scheduler_output, "num_scheduled_tokens", {}) or {}
        for new in getattr(scheduler_output, "scheduled_new_reqs", ()) or ():
            st = self._reqs.get(new.req_id)
            if st is not None:
                st.block_ids = _group0(new.block_ids)
                self._plan(meta, new.req_id, st, new.num_computed_tokens,
                           scheduled.get(new.req_id, 0))
        cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
        if cached is not None:
            resumed = getattr(cached, "resumed_req_ids", None)
            if resumed is None:   # older vLLM: a list of flags
                flags = getattr(cached, "resumed_from_preemption", ()) or ()
                resumed = {r for r, f in zip(cached.req_ids, flags) if f}
            for i, rid in enumerate(cached.req_ids):
                st = self._reqs.get(rid)
                if st is None:
                    continue
                new_ids = cached.new_block_ids[i]
                if new_ids is not None:
                    ids = _group0(new_ids)
                    st.block_ids = ids if rid in resumed else st.block_ids + ids
                self._plan(meta, rid, st, cached.num_computed_tokens[i],
                           scheduled.get(rid, 0))
        return meta

    def _plan(self, meta, rid, st, computed, scheduled):
        """computed: the request's tokens with KV before this step (vLLM's
        own prefix cache, then the external ones); scheduled: computed now."""
        bs = self._block_size
        if st.load:
            end = computed
            start = end - st.load
            meta.loads.append(LoadSpec(rid, st.tokens[:end], st.block_ids[:end // bs],
                                       start, end))
            st.load = 0
        n = len(st.tokens)
        if st.save and computed + scheduled >= n:
            meta.saves.append(SaveSpec(rid, st.tokens, st.block_ids[:-(-n // bs)]))
            st.save = False

    def request_finished(self, request, block_ids):
        """Forget the request; (False, None): nothing is in flight after a
        step, so its blocks can be freed now."""
        self._reqs.pop(request.request_id, None)
        self._hits.pop(request.request_id, None)
        return False, None

    # ======================================================================
    # Worker side
    # ======================================================================
    def register_kv_caches(self, kv_caches):
        """kv_caches: {layer name: [2, num_blocks, block_size, kv_heads,
        head_dim] numpy array}. Checked against each other now, against
        the profile once the server answers (now, when it does)."""
        if not kv_caches:
            raise ValueError("SeqkvConnector: register_kv_caches got no KV caches")
        shapes = {name: _paged.check_layer(name, kv, self._block_size)
                  for name, kv in kv_caches.items()}
        first = next(iter(kv_caches))
        for name, kv in kv_caches.items():
            if shapes[name] != shapes[first] or kv.dtype != kv_caches[first].dtype:
                raise ValueError("SeqkvConnector: layer %s is %s %s, layer %s is %s %s; "
                                 "all layers must match"
                                 % (name, shapes[name], kv.dtype, first, shapes[first],
                                    kv_caches[first].dtype))
        self._layers = _layer_order(list(kv_caches))
        self._index = {name: i for i, name in enumerate(self._layers)}
        self._caches = [kv_caches[name] for name in self._layers]
        if self._profile_info is None:
            try:
                self._save_client = self._connect()
            except OSError as e:
                logger.warning("seqkv: the server at %s does not answer (%s); the KV "
                               "caches are checked against profile %s when it does",
                               self._socket, e, self._profile)
        else:
            self._check_caches(self._profile_info)

    def _check_caches(self, p):
        """The registered caches against profile p (a KV.PROFILE GET dict)."""
        np = _paged.numpy()
        dt = np.dtype(_client._NP_DTYPES[str(p["dtype"]).lower()])
        L, H, D = int(p["layers"]), int(p["kv_heads"]), int(p["head_dim"])
        cache = self._caches[0]
        if len(self._caches) != L:
            raise ValueError("SeqkvConnector: vLLM has %d attention layers, profile %s "
                             "has %d" % (len(self._caches), self._profile, L))
        if cache.shape[3:] != (H, D):
            raise ValueError("SeqkvConnector: the paged caches hold %d KV heads of %d, "
                             "profile %s has %d of %d (tensor parallel > 1 is not "
                             "supported)" % (cache.shape[3], cache.shape[4],
                                             self._profile, H, D))
        if cache.dtype.itemsize != dt.itemsize:
            raise ValueError("SeqkvConnector: the paged caches are %s (%d bytes), profile "
                             "%s stores %s (%d bytes)" % (cache.dtype, cache.dtype.itemsize,
                                                          self._profile, p["dtype"],
                                                          dt.itemsize))
        self._dtype = dt
        self._shape = (L, H, D)

    def _ready(self):
        """True when the caches are registered and checked against the
        profile (connecting to check them if needed)."""
        if self._layers is None:
            raise RuntimeError("SeqkvConnector: register_kv_caches was not called")
        if self._dtype is None:
            try:
                self._save_client = self._connect()
            except OSError as e:
                self._server_down("connecting", e)
                return False
        return True

    def _take_client(self):
        if self._idle_clients:
            return self._idle_clients.pop()
        return self._connect()

    def start_load_kv(self, forward_context, **kwargs):
        """Send a KV.GET ... LAYERS for every load of the step, one
        connection each; the layers are read by wait_for_layer_load."""
        self._finish_loads()
        meta = self._get_connector_metadata()
        if not meta.loads or not self._ready():
            for spec in meta.loads:
                self._fail_load(spec, "no server")
            return
        for spec in meta.loads:
            client = None
            try:
                client = self._take_client()
                stream = client.get_layers(self._profile, spec.token_ids, spec.end,
                                           raw=True)
                if stream.layers != len(self._caches):
                    stream.close()
                    raise _client.Error("ERR %d layers in the reply, %d expected"
                                        % (stream.layers, len(self._caches)))
                self._loads.append(_Load(spec, client, stream))
            except _client.Error as e:      # an error reply: the connection is fine
                if client is not None:
                    self._idle_clients.append(client)
                self._fail_load(spec, e)
            except OSError as e:
                if client is not None:
                    client.close()
                self._fail_load(spec, e)

    def _fail_load(self, spec, why):
        bs = self._block_size
        blocks = spec.block_ids[spec.start // bs:spec.end // bs]
        self._load_errors.update(blocks)
        self._failed_reqs.add(spec.req_id)
        logger.error("seqkv: loading %d tokens of %s failed (%s); its %d blocks are "
                     "reported for recomputation", spec.num_tokens, spec.req_id, why,
                     len(blocks))

    def _advance(self, ld, upto):
        """Read the load's layers up to upto and write them into its blocks."""
        L, H, D = self._shape
        spec = ld.spec
        while ld.stream is not None and ld.next_layer <= min(upto, L - 1):
            i = ld.next_layer
            try:
                data = next(ld.stream)
                layer = _paged.layer_from_bytes(data, self._dtype, H, D, spec.end)
            except (OSError, _client.Error, StopIteration, ValueError) as e:
                ld.client.close()
                ld.stream = ld.client = None
                self._fail_load(spec, "layer %d: %s" % (i, e))
                return
            _paged.scatter(self._caches[i], spec.block_ids, layer, spec.start, spec.end,
                           self._dtype)
            ld.next_layer = i + 1
        if ld.stream is not None and ld.next_layer == L:
            self._idle_clients.append(ld.client)
            ld.stream = ld.client = None

    def wait_for_layer_load(self, layer_name):
        """Block until this layer of every load of the step is in the paged
        cache (it is read off the socket as the server streams it)."""
        i = self._index.get(layer_name)
        if i is None:
            return
        for ld in self._loads:
            self._advance(ld, i)

    def _finish_loads(self):
        for ld in self._loads:
            self._advance(ld, len(self._caches) - 1)
        self._loads = []

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        """Copy this layer of every prompt saved in this step out of its
        blocks (kv_layer: the layer's paged cache, as registered)."""
        meta = self._get_connector_metadata()
        if not meta.saves:
            return
        i = self._index.get(layer_name)
        if i is None:
            raise ValueError("SeqkvConnector: save_kv_layer for %r, which "
                             "register_kv_caches did not name" % (layer_name,))
        _paged.check_layer(layer_name, kv_layer, self._block_size)
        if kv_layer.shape != self._caches[i].shape:
            raise ValueError("SeqkvConnector: save_kv_layer got %s of shape %s, "
                             "registered as %s" % (layer_name, kv_layer.shape,
                                                   self._caches[i].shape))
        if not self._ready():
            return
        np = _paged.numpy()
        L, H, D = self._shape
        for spec in meta.saves:
            entry = self._saving.get(spec.req_id)
            if entry is None:
                buf = np.empty((L, 2, spec.num_tokens, H, D), dtype=self._dtype)
                entry = self._saving[spec.req_id] = (spec, buf, set())
            entry[1][i] = _paged.gather(kv_layer, spec.block_ids, spec.num_tokens,
                                        self._dtype)
            entry[2].add(i)

    def wait_for_save(self):
        """Finish the step's loads, then KV.PUT every prompt gathered in it
        (not one whose load failed: its blocks hold no valid KV). A put
        that fails is logged and dropped (a later request misses)."""
        self._finish_loads()
        saving, self._saving = self._saving, {}
        failed, self._failed_reqs = self._failed_reqs, set()
        for spec, buf, done in saving.values():
            if spec.req_id in failed:
                logger.error("seqkv: %s not saved: its load failed", spec.req_id)
                continue
            if len(done) != len(self._caches):
                logger.error("seqkv: %s: save_kv_layer saw %d of %d layers; not saved",
                             spec.req_id, len(done), len(self._caches))
                continue
            try:
                if self._save_client is None:
                    self._save_client = self._connect()
                self._save_client.put(self._profile, spec.token_ids, buf)
            except (OSError, _client.Error) as e:
                if self._save_client is not None:
                    self._save_client.close()
                    self._save_client = None
                logger.error("seqkv: saving %d tokens of %s failed (%s: %s)",
                             spec.num_tokens, spec.req_id, type(e).__name__, e)

    def get_finished(self, finished_req_ids):
        """Nothing is asynchronous: (None, None)."""
        return None, None

    def get_block_ids_with_load_errors(self):
        """Blocks whose load failed since the last call (vLLM recomputes them)."""
        out, self._load_errors = self._load_errors, set()
        return out
