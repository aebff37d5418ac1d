"""The scale bench's view of a server (bench/scale.py): a minimal RESP
client over a Unix socket, the same code for `seqkv serve` and for
redis-server, so that their figures compare like with like: big arguments
are sent from their own buffers, big replies are received into one buffer
reused from GET to GET (no copies). Beside it, INFO parsing (sections,
comma-separated fields, INFO commandstats) and the /proc readings of a
server's memory (VmRSS, RssAnon)."""
import os
import socket

import numpy as np


class RespError(Exception):
    pass


class Resp:
    def __init__(self, path, timeout=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.rbuf = bytearray(1 << 20)
        self.rpos = self.rend = 0
        self.big = bytearray(0)

    def close(self):
        self.sock.close()

    def reserve(self, n):
        """the reply buffer for bulks of n bytes, its pages touched now"""
        if len(self.big) < n:
            self.big = bytearray(n)
            np.frombuffer(self.big, np.uint8)[::4096] = 1

    def _send(self, args):
        out = bytearray(b"*%d\r\n" % len(args))
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, (int, float, np.integer, np.floating)):
                a = str(a).encode()
            mv = memoryview(a).cast("B")
            out += b"$%d\r\n" % len(mv)
            if len(mv) > 65536:
                self.sock.sendall(out)
                self.sock.sendall(mv)
                out = bytearray(b"\r\n")
            else:
                out += mv
                out += b"\r\n"
        if out:
            self.sock.sendall(out)

    def _fill(self):
        if self.rpos == self.rend:
            self.rpos = self.rend = 0
        elif self.rend == len(self.rbuf):
            n = self.rend - self.rpos
            self.rbuf[:n] = self.rbuf[self.rpos:self.rend]
            self.rpos, self.rend = 0, n
        k = self.sock.recv_into(memoryview(self.rbuf)[self.rend:])
        if k == 0:
            raise ConnectionError("the server closed the connection")
        self.rend += k

    def _line(self):
        while True:
            i = self.rbuf.find(b"\r\n", self.rpos, self.rend)
            if i >= 0:
                line = bytes(self.rbuf[self.rpos:i])
                self.rpos = i + 2
                return line
            self._fill()

    def _read_exact(self, dst):
        n = len(dst)
        have = min(n, self.rend - self.rpos)
        dst[:have] = self.rbuf[self.rpos:self.rpos + have]
        self.rpos += have
        off = have
        while off < n:
            k = self.sock.recv_into(dst[off:])
            if k == 0:
                raise ConnectionError("the server closed the connection in a reply")
            off += k

    def _reply(self, into=False):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RespError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"_":
            return None
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            if into:
                self.reserve(n)
                dst = memoryview(self.big)[:n]
            else:
                dst = memoryview(bytearray(n))
            self._read_exact(dst)
            crlf = bytearray(2)
            self._read_exact(memoryview(crlf))
            return dst if into else dst.tobytes()
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError("unexpected reply type %r" % line[:40])

    def call(self, *args):
        self._send(args)
        return self._reply()

    def call_into(self, *args):
        """a bulk reply as a memoryview of the reused buffer (valid until
        the next call)"""
        self._send(args)
        return self._reply(into=True)


def info(c, section):
    text = c.call("INFO", section).decode()
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def info_fields(v):
    """'tokens=1,raw_bytes=2' -> {tokens: 1.0, raw_bytes: 2.0}"""
    out = {}
    for kv in v.split(","):
        if "=" in kv:
            k, x = kv.split("=", 1)
            try:
                out[k] = float(x)
            except ValueError:
                out[k] = x
    return out


def server_usec(c, cmd):
    """microseconds the server has spent on cmd (INFO commandstats: from
    the request's parse, the whole bulk received, to its reply being ready)"""
    v = info(c, "commandstats").get("cmdstat_" + cmd)
    return info_fields(v).get("usec", 0.0) if v else 0.0


def proc_cpu(pid):
    """user + system CPU seconds of a process so far (its threads'), or None"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def proc_status(pid):
    """(VmRSS, RssAnon) of a process in bytes, or (None, None) once gone"""
    rss = anon = None
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, anon
