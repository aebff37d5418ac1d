"""seqkv client: the seqkvd protocol (RESP) from Python, over its Unix
socket or its loopback TCP port (`seqkv serve --port N`).

Standard library only; numpy is used when it is installed (get() then
returns arrays shaped [layers, 2, n, kv_heads, head_dim]). Tokens travel
as little-endian u32, KV as raw bytes in the store layout
[layer][k, v][token][kv_head][head_dim] of the profile's dtype.

    import seqkv
    c = seqkv.Client("/tmp/seqkv.sock")          # or "unix:///tmp/seqkv.sock"
    t = seqkv.Client("tcp://127.0.0.1:6400", auth=("batch", token))  # TCP: AUTH required
    c.profile_set("llama", layers=2, kv_heads=2, head_dim=8, dtype="bf16")
    c.put("llama", tokens, kv)          # -> tokens newly stored
    c.lookup("llama", tokens)           # -> longest cached prefix
    kv = c.get("llama", tokens)         # the KV of that prefix
    for layer in c.get_layers("llama", tokens):   # streamed, one layer at a time
        ...                             # [2, n, kv_heads, head_dim] each
    c.profile_get("llama")              # -> dict (layers, dtype, token_bytes, ...)
    c.stats()                           # -> dict (tokens, raw_bytes, ..., "level.raw": [...])

Addresses: a path (or unix://PATH) is the Unix socket, whose peers the
server knows by uid/gid; tcp://HOST:PORT (tcp://[::1]:PORT for IPv6) is
the loopback TCP port, where every connection must AUTH with a tenant's
token (config `tenant NAME token SECRET`): pass auth=token or
auth=(tenant, token). call_many() pipelines commands (the Redis string
commands of the blob namespace: EXISTS, MGET, MSET, ...) in one round trip.

Errors from the server raise seqkv.Error (its .code is the reply's first
word: NOTFOUND, SHAPE, CORRUPT, TOOLARGE, WRONGPASS, NOPERM, ERR, ...);
get() of a prefix nobody cached raises Error with code NOTFOUND.

The server answers RESP2 unless HELLO 3 was sent: maps (KV.PROFILE GET,
KV.STATS) arrive as flat [key, value, ...] arrays and doubles as bulk
strings; this module turns both into dicts with int/float/str values.
"""
import os
import socket
import struct
from urllib.parse import unquote

from .profile_fields import FIELDS

try:
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is optional
    _np = None

_FIELDS = {f[0]: f for f in FIELDS}

__all__ = ["Client", "Error", "LayerStream", "parse_address"]


class Error(Exception):
    """An error reply (-CODE message) from the server."""

    def __init__(self, line):
        super().__init__(line)
        self.code = line.split(" ", 1)[0] if line else "ERR"


def _tokens_bytes(tokens):
    if isinstance(tokens, (bytes, bytearray, memoryview)):
        return bytes(tokens)
    if _np is not None and isinstance(tokens, _np.ndarray):
        return tokens.astype("<u4", copy=False).tobytes()
    return struct.pack("<%dI" % len(tokens), *tokens)


def _kv_bytes(kv):
    if isinstance(kv, (bytes, bytearray, memoryview)):
        return bytes(kv)
    if _np is not None and isinstance(kv, _np.ndarray):
        if kv.dtype.byteorder == ">":
            kv = kv.astype(kv.dtype.newbyteorder("<"))
        return _np.ascontiguousarray(kv).tobytes()
    raise TypeError("kv must be bytes or a numpy array")


_NP_DTYPES = {"fp32": "<f4", "f32": "<f4", "fp16": "<f2", "f16": "<f2",
              "bf16": "<u2", "fp8": "u1", "f8": "u1", "f8e4m3": "u1"}


def _text(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def _as_dict(r):
    """A map reply (RESP3 dict, or RESP2 flat array) as a dict of str keys;
    bulk values decoded to str, nested arrays kept as lists."""
    if isinstance(r, list):
        r = {r[i]: r[i + 1] for i in range(0, len(r) - 1, 2)}
    out = {}
    for k, v in r.items():
        if isinstance(v, list):
            v = [_text(x) for x in v]
        out[_text(k)] = _text(v)
    return out


def parse_address(address):
    """(socket family, connect() address) of a seqkvd address: a path or
    unix://PATH (AF_UNIX), tcp://HOST:PORT or tcp://[IPV6]:PORT."""
    if isinstance(address, os.PathLike):
        address = os.fspath(address)
    if not isinstance(address, str) or not address:
        raise ValueError("seqkv address must be a non-empty string, got %r" % (address,))
    if address.startswith("unix://"):
        path = unquote(address[len("unix://"):])
        if not path:
            raise ValueError("seqkv address %r: no socket path" % address)
        return socket.AF_UNIX, path
    if address.startswith("tcp://"):
        rest = address[len("tcp://"):].rstrip("/")
        if rest.startswith("["):
            host, sep, port = rest[1:].partition("]:")
            family = socket.AF_INET6
        else:
            host, sep, port = rest.rpartition(":")
            family = socket.AF_INET
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("seqkv address %r: expected tcp://HOST:PORT "
                             "(tcp://[IPV6]:PORT)" % address)
        if host == "localhost":
            host = "127.0.0.1"
        return family, (host, int(port))
    if "://" in address:
        raise ValueError("seqkv address %r: unix://PATH, tcp://HOST:PORT or a "
                         "socket path" % address)
    return socket.AF_UNIX, address


class Client:
    """A blocking connection to seqkvd."""

    def __init__(self, path, auth=None, timeout=None):
        """path: the Unix socket (a path, or unix://PATH) or tcp://HOST:PORT
        (see the module); auth: a token, or (tenant, token) -- required over
        TCP; timeout: seconds for connect and for each socket operation."""
        family, addr = parse_address(path)
        self.address = path
        self._s = socket.socket(family, socket.SOCK_STREAM)
        try:
            if timeout is not None:
                self._s.settimeout(timeout)
            self._s.connect(addr)
            if family != socket.AF_UNIX:
                self._s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            self._s.close()
            raise
        self._buf = bytearray()
        self._profiles = {}
        self._stream = None     # the LayerStream being read, if any
        if auth is not None:
            try:
                if isinstance(auth, (tuple, list)):
                    self.call("AUTH", *auth)
                else:
                    self.call("AUTH", auth)
            except BaseException:
                self._s.close()
                raise

    def close(self):
        self._stream = None
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- RESP ------------------------------------------------------------
    def _send(self, args):
        self._send_many([args])

    def _fill(self, n):
        while len(self._buf) < n:
            chunk = self._s.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise ConnectionError("seqkvd closed the connection")
            self._buf += chunk

    def _line(self):
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 2]
                return line
            self._fill(len(self._buf) + 1)

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise Error(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t in (b"$", b"="):
            n = int(rest)
            if n < 0:
                return None
            self._fill(n + 2)
            data = bytes(self._buf[:n])
            del self._buf[: n + 2]
            return data
        if t in (b"*", b"~", b">"):
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        if t == b"%":
            n = int(rest)
            out = {}
            for _ in range(n):
                k = self._reply()
                out[k.decode() if isinstance(k, bytes) else k] = self._reply()
            return out
        if t == b"_":
            return None
        if t == b",":
            return float(rest)
        if t == b"#":
            return rest == b"t"
        raise Error("ERR unexpected reply type %r" % t)

    def call(self, *args):
        """Send one command, return its reply (raises Error on -ERR)."""
        self._idle()
        self._send(args)
        return self._reply()

    def call_many(self, commands):
        """Pipeline commands (each a sequence of arguments): send them all,
        then read every reply, in order. An error reply comes back as an
        Error instance in its place (not raised), so one bad command does
        not hide the others' replies; a lost connection raises."""
        self._idle()
        commands = list(commands)
        out = []

        def read_one():
            try:
                out.append(self._reply())
            except Error as e:
                out.append(e)

        # in windows: at most 256 replies outstanding, so neither side's
        # buffers fill while the other waits
        for i in range(0, len(commands), 64):
            self._send_many(commands[i:i + 64])
            while i + 64 - len(out) > 256:
                read_one()
        while len(out) < len(commands):
            read_one()
        return out

    def _send_many(self, commands):
        # small arguments are joined into one write; a big one (a KV bulk, a
        # block of vLLM's CPU cache) goes out from its own buffer, uncopied
        out = []
        for args in commands:
            out.append(b"*%d\r\n" % len(args))
            for a in args:
                if isinstance(a, str):
                    a = a.encode()
                elif isinstance(a, int):
                    a = str(a).encode()
                n = a.nbytes if isinstance(a, memoryview) else len(a)
                out.append(b"$%d\r\n" % n)
                if n >= 65536:
                    self._s.sendall(b"".join(out))
                    out = []
                    self._s.sendall(a)
                else:
                    out.append(bytes(a))
                out.append(b"\r\n")
        self._s.sendall(b"".join(out))

    def _idle(self):
        if self._stream is not None:
            raise RuntimeError("seqkv.Client: a streamed KV.GET ... LAYERS reply is "
                               "still being read on this connection; read it to the "
                               "end or close() it first")

    # -- commands ----------------------------------------------------------
    def ping(self):
        return self.call("PING")

    def profile_set(self, name, **fields):
        """Create profile name, or change one: fields are the profile
        table's (profile_fields.FIELDS; '-' and '_' alike), values in their
        text form or as numbers."""
        args = ["KV.PROFILE", "SET", name]
        for k, v in fields.items():
            f = _FIELDS.get(k.replace("-", "_"))
            if f is None or "store" in f[2] or f[0] == "name":
                settable = ", ".join(x[0] for x in FIELDS[1:] if "store" not in x[2])
                raise ValueError("%r is not a profile field to set (%s)" % (k, settable))
            args += [f[0], str(v)]
        self._profiles.pop(name, None)
        return self.call(*args)

    def profile_get(self, name):
        """The profile as a dict of the profile table's fields
        (profile_fields.FIELDS), integers as int, rope_theta as float."""
        out = _as_dict(self.call("KV.PROFILE", "GET", name))
        for k, v in out.items():
            kind = _FIELDS[k][1] if k in _FIELDS else None
            if kind == "float":
                out[k] = float(v)
            elif kind == "int" and not isinstance(v, int):
                out[k] = int(v)
        return out

    def put(self, profile, tokens, kv):
        """Store the KV of tokens (bytes or a numpy array in the store
        layout); returns the positions the server newly stored. Only the
        part after the longest cached prefix is stored, but a new record
        starts at a chunk boundary, so a shared start of a chunk counts
        again."""
        return self.call("KV.PUT", profile, _tokens_bytes(tokens), _kv_bytes(kv))

    def lookup(self, profile, tokens):
        """Longest cached prefix of tokens, in tokens."""
        return self.call("KV.LOOKUP", profile, _tokens_bytes(tokens))

    def _layout(self, profile):
        """(numpy dtype, layers, kv_heads, head_dim) of a profile, cached."""
        p = self._profiles.get(profile)
        if p is None:
            p = self._profiles[profile] = self.profile_get(profile)
        dt = _np.dtype(_NP_DTYPES[str(p["dtype"]).lower()])
        return dt, int(p["layers"]), int(p["kv_heads"]), int(p["head_dim"])

    def get(self, profile, tokens, n=None, raw=False, lossy=False):
        """KV of the first n tokens (default: the longest cached prefix):
        a numpy array [layers, 2, n, kv_heads, head_dim] when numpy exists
        (bf16 as uint16 bit patterns, fp8 as uint8), else bytes. A prefix
        the profile's opt-in lossy tier stored is Error (NOTFOUND, saying
        so) unless lossy=True: then it is the lossy reconstruction."""
        args = ["KV.GET", profile, _tokens_bytes(tokens)]
        if n is not None:
            args.append(int(n))
        if lossy:
            args.append("LOSSY")
        data = self.call(*args)
        if raw or _np is None:
            return data
        dt, L, H, D = self._layout(profile)
        per = L * 2 * H * D * dt.itemsize
        return _np.frombuffer(data, dtype=dt).reshape(L, 2, len(data) // per, H, D)

    def get_layers(self, profile, tokens, n=None, raw=False, lossy=False):
        """KV.GET ... LAYERS: the KV of the first n tokens (default: the
        longest cached prefix) as a LayerStream, an iterator that yields
        each layer as it comes off the socket -- a numpy array [2, n,
        kv_heads, head_dim] when numpy exists (else, or with raw, bytes in
        the layout [k, v][token][kv_head][head_dim]).

        The command is sent and the reply's header read here, so a miss
        raises Error (NOTFOUND) at once. The server sends layer i as soon
        as it is decoded; it sends the last one only after every checksum
        matched, and when a check fails after layers went out it closes
        the connection: next() then raises ConnectionError and the layers
        already yielded must be dropped. Until the stream is read to the
        end or closed, this connection takes no other command."""
        if not raw and _np is not None:
            layout = self._layout(profile)      # before the command goes out
        else:
            layout = None
        self._idle()
        args = ["KV.GET", profile, _tokens_bytes(tokens)]
        if n is not None:
            args.append(int(n))
        args.append("LAYERS")
        if lossy:
            args.append("LOSSY")
        self._send(args)
        line = self._line()
        if line[:1] == b"-":
            raise Error(line[1:].decode(errors="replace"))
        if line[:1] != b"*":
            raise Error("ERR KV.GET LAYERS: expected an array, got %r" % line[:32])
        stream = LayerStream(self, int(line[1:]), layout)
        self._stream = stream if stream.layers > 0 else None
        return stream

    def delete(self, profile, tokens):
        """Delete what only this sequence uses; returns tokens removed."""
        return self.call("KV.DEL", profile, _tokens_bytes(tokens))

    def calibrate(self, profile, max_seq=None):
        """Learn the profile's calibration from stored sequences (admin)."""
        if max_seq is None:
            return self.call("KV.CALIBRATE", profile)
        return self.call("KV.CALIBRATE", profile, int(max_seq))

    def stats(self):
        """This tenant's store statistics as a dict (ratio a float,
        "level.<name>" a [tokens, raw_bytes, stored_bytes] list)."""
        out = _as_dict(self.call("KV.STATS"))
        if "ratio" in out:
            out["ratio"] = float(out["ratio"])
        return out

    def info(self, section=None):
        r = self.call("INFO", section) if section else self.call("INFO")
        return r.decode() if isinstance(r, bytes) else r


class LayerStream:
    """The reply of Client.get_layers(): iterate it for the layers, in
    order (`layers` of them; `received` so far). close() reads and drops
    what is left so the connection can be used again; when the connection
    failed mid-reply, the Client is closed too (it cannot be resynced)."""

    def __init__(self, client, layers, layout):
        self._c = client
        self.layers = layers
        self.received = 0
        self._layout = layout

    def __iter__(self):
        return self

    def __next__(self):
        if self.received >= self.layers:
            raise StopIteration
        c = self._c
        try:
            data = c._reply()
            if not isinstance(data, bytes):
                raise Error("ERR KV.GET LAYERS: layer %d is not a bulk string"
                            % self.received)
        except BaseException:
            # a reply cut short (the server closes the connection when a
            # check fails after layers went out) or out of step: this
            # connection cannot be used again
            self.received = self.layers
            c._stream = None
            c.close()
            raise
        self.received += 1
        if self.received == self.layers:
            c._stream = None
        if self._layout is None:
            return data
        dt, _L, H, D = self._layout
        per = 2 * H * D * dt.itemsize
        return _np.frombuffer(data, dtype=dt).reshape(2, len(data) // per, H, D)

    def close(self):
        """Read and drop the layers not yet read."""
        while self.received < self.layers:
            next(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._c._stream is self:
            try:
                self.close()
            except (OSError, ConnectionError, Error):
                pass
