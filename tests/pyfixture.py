"""Shared by the Python tests: a `seqkv serve` in a temporary directory,
and real KV caches of stories260K computed by `seqkv model kv`.

    from pyfixture import Server, model_path, model_kv
    with Server(seqkv_bin, config="...") as srv:   # srv.sock, srv.dir
        ...
    with Server(seqkv_bin, config="...", port=True) as srv:  # + loopback TCP
        socket.create_connection(("127.0.0.1", srv.port))
    kv = model_kv(seqkv_bin, [[1, 5, 9, ...], ...], dtype="bf16")
    # -> list of (tokens, k, v): numpy arrays, k and v [layers, T, kv_heads, head_dim]
    #    (uint16 bit patterns for bf16/fp16, uint8 for fp8, float32 for fp32)

model_path() is $SEQKV_MODEL, else ../shared/models/stories260K.bin next to
the source root ($SEQKV_SOURCE_ROOT), or None when absent: a test then
skips what needs it, saying so."""
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

_NP = {"BF16": np.uint16, "F16": np.uint16, "F8_E4M3": np.uint8, "F32": np.float32,
       "I32": np.int32}


def model_path():
    p = os.environ.get("SEQKV_MODEL")
    if not p:
        root = os.environ.get("SEQKV_SOURCE_ROOT",
                              os.path.join(os.path.dirname(__file__), ".."))
        p = os.path.join(root, "..", "shared", "models", "stories260K.bin")
    return p if os.path.exists(p) else None


def read_safetensors(path):
    """{name: numpy array} of a safetensors file (the dtypes seqkv writes)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    head = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        arr = np.frombuffer(data[base + a:base + b], dtype=_NP[t["dtype"]])
        out[name] = arr.reshape(t["shape"])
    return out


def sample(seqkv_bin, n, length, seed, model=None):
    """n sampled token sequences of stories260K (BOS first)."""
    out = subprocess.run([seqkv_bin, "model", "sample", "--model", model or model_path(),
                          "--n-seq", str(n), "--len", str(length), "--seed", str(seed)],
                         check=True, capture_output=True, text=True).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines() if line.strip()]


def model_kv(seqkv_bin, seqs, dtype="bf16", model=None):
    """[(tokens, k, v)] of each sequence: the model's KV caches
    (k, v: [layers, T, kv_heads, head_dim], K after RoPE)."""
    tmp = tempfile.mkdtemp(prefix="seqkv-kv-")
    try:
        tf = os.path.join(tmp, "tokens.txt")
        with open(tf, "w") as f:
            for s in seqs:
                f.write(" ".join(map(str, s)) + "\n")
        out = os.path.join(tmp, "kv.safetensors")
        subprocess.run([seqkv_bin, "model", "kv", "--model", model or model_path(),
                        "--tokens", tf, "--dtype", dtype, "--out", out, "--quiet"],
                       check=True)
        t = read_safetensors(out)
        return [(t["seq%d.tokens" % i], t["seq%d.k" % i], t["seq%d.v" % i])
                for i in range(len(seqs))]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def info_fields(client, section):
    """INFO <section> of a seqkv.Client as a dict of its key:value lines"""
    out = {}
    for line in client.info(section).splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def free_port():
    """A loopback TCP port nobody listens on now (bound to 127.0.0.1:0,
    read, closed; another process could take it before it is used)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc, timeout=30):
    """SIGTERM, then SIGKILL after timeout seconds; waits for it"""
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Server:
    """`seqkv serve` on a Unix socket in a temporary directory; stopped
    (SIGTERM, then SIGKILL) and removed on exit. config: the text of a
    config file (--config), or None. extra: more serve arguments. db: the
    store's directory (default: one in the temporary directory; a given
    one is left in place). port: None (no TCP), True or 0 (a free loopback
    port, picked here) or a port number: `--port N`, RESP on loopback TCP
    beside the socket; srv.port is that port (None without)."""

    def __init__(self, seqkv_bin, config=None, extra=(), threads=2, db=None, port=None):
        self.bin = seqkv_bin
        self.dir = tempfile.mkdtemp(prefix="seqkv-srv-")
        self.sock = os.path.join(self.dir, "s.sock")
        self.db = db or os.path.join(self.dir, "db")
        self.port = None
        args = [seqkv_bin, "serve", "--db", self.db, "--socket", self.sock,
                "--threads", str(threads), "--quiet"]
        if port is not None and port is not False:
            self.port = free_port() if port is True or port == 0 else int(port)
            args += ["--port", str(self.port)]
        if config is not None:
            cf = os.path.join(self.dir, "seqkv.conf")
            with open(cf, "w") as f:
                f.write(config)
            os.chmod(cf, 0o600)
            args += ["--config", cf]
        self.proc = None
        try:
            self.proc = subprocess.Popen(args + list(extra))
            self._wait()
        except BaseException:
            self.close()  # (a server that did not start leaves nothing behind)
            raise

    def _wait(self):
        for _ in range(800):
            if self.proc.poll() is not None:
                raise SystemExit("FAIL: the server exited at start-up (rc %d)"
                                 % self.proc.returncode)
            if self._ping(socket.AF_UNIX, self.sock) and (
                    self.port is None or self._ping(socket.AF_INET, ("127.0.0.1", self.port))):
                return
            time.sleep(0.025)
        raise SystemExit("FAIL: the server did not answer")

    @staticmethod
    def _ping(family, addr, replies=(b"+PONG",)):
        """PING (seqkv allows it before AUTH) answered with +PONG"""
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(addr)
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(replies)
        except OSError:
            return False

    def kill(self):
        """kill -9: nothing flushed, nothing cleaned up"""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self):
        stop_process(self.proc)
        self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Cluster:
    """A real Redis Cluster (tests/rcluster.sh: 3 masters, 3 replicas on
    loopback) in a temporary directory; close() stops it"""

    def __init__(self, source_root):
        self.script = os.path.join(source_root, "tests", "rcluster.sh")
        self.dir = tempfile.mkdtemp(prefix="seqkv-rc-")
        # (the script's watchdog stops the cluster if this process dies)
        env = dict(os.environ, SKV_RCLUSTER_OWNER=str(os.getpid()))
        out = subprocess.run([self.script, "start", self.dir], capture_output=True, text=True,
                             env=env)
        if out.returncode != 0:
            sys.stderr.write(out.stderr)
            shutil.rmtree(self.dir, ignore_errors=True)
            raise SystemExit("FAIL: the Redis Cluster did not start")
        self.seeds = out.stdout.strip()
        self.ports = [int(x.rsplit(":", 1)[1]) for x in self.seeds.split(",")]

    def cli(self, port, *args):
        return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port)] + list(args),
                              capture_output=True, text=True, timeout=10).stdout

    def masters(self):
        """(port, pid) of the masters serving slots"""
        out = []
        for line in self.cli(self.ports[0], "CLUSTER", "NODES").splitlines():
            f = line.split()
            if "master" in f[2] and "fail" not in f[2] and len(f) > 8:
                port = int(f[1].split("@")[0].rsplit(":", 1)[1])
                with open(os.path.join(self.dir, str(port), "redis.pid")) as pf:
                    out.append((port, int(pf.read().strip())))
        return out

    def run(self, *args):
        return subprocess.run([self.script] + list(args), capture_output=True, text=True)

    def close(self):
        subprocess.run([self.script, "stop", self.dir], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisTcp:
    """Debian's redis-server on a free loopback TCP port, in a temporary
    directory: the reference a test's client side is checked against
    (`--redis`). users: {name: password}, ACL users with every right;
    requirepass: the default user's password (AUTH with the password
    alone), None for none; databases: how many SELECT may name. srv.port;
    close() (or `with`) stops it and removes the directory."""

    def __init__(self, users=None, requirepass=None, databases=16):
        self.dir = tempfile.mkdtemp(prefix="seqkv-redis-")
        self.port = free_port()
        conf = os.path.join(self.dir, "redis.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nsave \"\"\nappendonly no\ndir %s\n"
                    "databases %d\n" % (self.port, self.dir, databases))
            if requirepass is not None:
                f.write("requirepass %s\n" % requirepass)
            for name, password in (users or {}).items():
                f.write("user %s on >%s ~* &* +@all\n" % (name, password))
        os.chmod(conf, 0o600)
        self.log = open(os.path.join(self.dir, "redis.log"), "w")
        self.proc = subprocess.Popen(["redis-server", conf], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        for _ in range(400):
            if self.proc.poll() is not None:
                raise SystemExit("FAIL: redis-server exited at start-up")
            # (Redis answers a PING before AUTH with -NOAUTH when it has a password)
            if Server._ping(socket.AF_INET, ("127.0.0.1", self.port), (b"+PONG", b"-NOAUTH")):
                return
            time.sleep(0.025)
        raise SystemExit("FAIL: redis-server did not answer")

    def close(self):
        stop_process(self.proc)
        self.proc = None
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
