"""Shared by the Python tests: a `seqkv serve` in a temporary directory,
and real KV caches of stories260K computed by `seqkv model kv`.

    from pyfixture import Server, model_path, model_kv
    with Server(seqkv_bin, config="...") as srv:   # srv.sock, srv.dir
        ...
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
    one is left in place)."""

    def __init__(self, seqkv_bin, config=None, extra=(), threads=2, db=None):
        self.bin = seqkv_bin
        self.dir = tempfile.mkdtemp(prefix="seqkv-srv-")
        self.sock = os.path.join(self.dir, "s.sock")
        self.db = db or os.path.join(self.dir, "db")
        args = [seqkv_bin, "serve", "--db", self.db, "--socket", self.sock,
                "--threads", str(threads), "--quiet"]
        if config is not None:
            cf = os.path.join(self.dir, "seqkv.conf")
            with open(cf, "w") as f:
                f.write(config)
            os.chmod(cf, 0o600)
            args += ["--config", cf]
        self.proc = subprocess.Popen(args + list(extra))
        self._wait()

    def _wait(self):
        for _ in range(800):
            if self.proc.poll() is not None:
                raise SystemExit("FAIL: the server exited at start-up (rc %d)"
                                 % self.proc.returncode)
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.sock)
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    s.close()
                    return
                s.close()
            except OSError:
                pass
            time.sleep(0.025)
        raise SystemExit("FAIL: the server did not answer")

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
