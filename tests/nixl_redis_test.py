#!/usr/bin/python3
"""NIXL's REDIS plugin, redis-py and redis-cli against `seqkv serve` over
loopback TCP (the `port` config directive here, `--port` elsewhere).

NIXL (ai-dynamo/nixl, pull request #1791, src/plugins/redis/
redis_client.cpp, redis_backend.cpp; see the report that came with this
test) is reproduced by its bytes: a pool of 8 slots, each one hiredis async
connection for SET/GET -- pipelined, many commands in flight, replies in
order -- and one blocking connection for EXISTS; on each, `AUTH user pass`
(or `AUTH pass`) when a password is set, then `SELECT db` only when db is
not 0; then `SET key <bytes>` (the reply must be status OK), `GET key` (a
bulk string exactly the descriptor's length; nil is a miss), `EXISTS key`
(integer, 1 = present); keys are descriptor metaInfo strings or decimal
devIds. On top: `SELECT 0` -> `+OK`, `SELECT 1` -> `-ERR DB index is out of
range` (Redis's text), NOAUTH / WRONGPASS with Redis's texts; redis-py
(`redis.Redis(host, port, username, password)`) and redis-cli (`--user
--pass --no-auth-warning`, skipped when absent) set/get/exists/delete.

Usage: nixl_redis_test.py SEQKV_BIN PYTHON_DIR [--redis]
  --redis: the same checks against Debian's redis-server on loopback TCP
           (one database), the seqkv-only ones (tenants apart) skipped."""
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyfixture  # noqa: E402

try:
    import numpy as np
    import redis
except ImportError as e:  # pragma: no cover
    print("SKIP: %s (needs Debian's python3-redis and python3-numpy)" % e)
    sys.exit(77)

seqkv_bin = sys.argv[1]
use_redis = "--redis" in sys.argv[3:]
failures = []
_print_lock = threading.Lock()   # (checks run in threads too)
TOKENS = {"nixl": "tok-nixl-0123456789abcdef", "other": "tok-other-fedcba9876543210"}
POOL = 8                                   # RedisConfig pool_size default
NOAUTH = b"-NOAUTH Authentication required.\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
DB_RANGE = b"-ERR DB index is out of range\r\n"


def check(cond, what):
    if not cond:
        with _print_lock:
            failures.append(what)
            print("FAIL: " + what, flush=True)
    return cond


def command(*args):
    """hiredis's redisFormatCommand: a RESP array of bulk strings ("%s",
    "%b", "%d" each one argument)"""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += [b"$%d\r\n" % len(a), a, b"\r\n"]
    return b"".join(out)


class Error(str):
    """an error reply's text"""


class Status(str):
    """a status reply's text"""


class Conn:
    """A hiredis-like connection: commands out, RESP2 replies parsed (the
    raw bytes of each reply kept too)"""

    def __init__(self, port, host="127.0.0.1"):
        ai = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(ai[0][4])
        self.f = self.sock.makefile("rb", buffering=1 << 16)
        self.last_raw = b""

    def send(self, *cmds):
        self.sock.sendall(b"".join(cmds))

    def _line(self):
        line = self.f.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed mid-reply (%r)" % line)
        self.last_raw += line
        return line[:-2]

    def reply(self):
        self.last_raw = b""
        return self._reply()

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return Status(rest.decode())
        if t == b"-":
            return Error(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            if len(data) != n + 2 or data[-2:] != b"\r\n":
                raise ConnectionError("short bulk")
            self.last_raw += data[:64]
            return data[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError("unknown reply type %r" % line[:40])

    def call(self, *args):
        self.send(command(*args))
        return self.reply()

    def close(self):
        self.f.close()
        self.sock.close()


def reply_ok(r):
    """checkRedisReplyOk: not an error; a status must be OK"""
    return r is not None and not isinstance(r, Error) and (not isinstance(r, Status) or r == "OK")


class Slot:
    """One RedisConnectionPool slot: an async connection (SET/GET) and a
    blocking one (EXISTS), each initialised AUTH -> SELECT (db != 0 only)"""

    def __init__(self, port, username, password, db=0):
        self.ok = True
        self.conns = []
        for _ in range(2):
            c = Conn(port)
            if password:
                r = c.call("AUTH", username, password) if username else c.call("AUTH", password)
                self.ok &= reply_ok(r)
            if db != 0:
                self.ok &= reply_ok(c.call("SELECT", db))
            self.conns.append(c)
        self.async_conn, self.sync_conn = self.conns

    def put_many(self, items):
        """SETs pipelined on the async connection; True per item iff +OK"""
        self.async_conn.send(*(command("SET", k, v) for k, v in items))
        return [self.async_conn.reply() == "OK" for _ in items]

    def get_many(self, items):
        """GETs pipelined; the value when a bulk of exactly the descriptor's
        length, else None (nil, error, size mismatch)"""
        self.async_conn.send(*(command("GET", k) for k, _ in items))
        out = []
        for _, length in items:
            r = self.async_conn.reply()
            out.append(r if isinstance(r, bytes) and len(r) == length else None)
        return out

    def exists(self, key):
        r = self.sync_conn.call("EXISTS", key)
        return None if not isinstance(r, int) else r == 1

    def close(self):
        for c in self.conns:
            c.close()


class Pool:
    """RedisConnectionPool: round-robin over POOL slots; a transfer's
    descriptors dispatched slot by slot, each slot's event loop a thread"""

    def __init__(self, port, username="", password="", db=0):
        self.slots = [Slot(port, username, password, db) for _ in range(POOL)]
        self.next = 0

    def _spread(self, items):
        per = [[] for _ in self.slots]
        where = []
        for it in items:
            s = self.next % len(self.slots)
            self.next += 1
            where.append((s, len(per[s])))
            per[s].append(it)
        return per, where

    def _run(self, method, items):
        per, where = self._spread(items)
        res = [None] * len(self.slots)

        def work(i):
            if per[i]:
                try:
                    res[i] = getattr(self.slots[i], method)(per[i])
                except (OSError, ConnectionError) as e:   # (a hang: the socket's timeout)
                    check(False, "slot %d, %s of %d items: %s" % (i, method, len(per[i]), e))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(self.slots))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        return [res[s][j] if res[s] is not None else None for s, j in where]

    def write(self, items):          # NIXL_WRITE: [(key, bytes)]
        return self._run("put_many", items)

    def read(self, items):           # NIXL_READ: [(key, length)]
        return self._run("get_many", items)

    def query(self, keys):           # queryMem: EXISTS, round-robin
        out = []
        for k in keys:
            s = self.slots[self.next % len(self.slots)]
            self.next += 1
            out.append(s.exists(k))
        return out

    def close(self):
        for s in self.slots:
            s.close()


def exact(port, payload, want):
    """one exchange on a fresh connection, the reply compared byte for byte"""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(payload)
        s.settimeout(5)
        got = b""
        while len(got) < len(want):
            d = s.recv(4096)
            if not d:
                break
            got += d
        return got


def nixl_checks(port, seqkv):
    tok = TOKENS["nixl"]
    auth3 = command("AUTH", "nixl", tok)
    # the exact replies, Redis's words
    got = exact(port, command("SET", "k", "v"), NOAUTH)
    check(got == NOAUTH, "SET before AUTH: %r" % got)
    got = exact(port, command("AUTH", "nixl", "not-the-token"), WRONGPASS)
    check(got == WRONGPASS, "AUTH with a wrong token: %r" % got)
    got = exact(port, auth3 + command("SELECT", 0), b"+OK\r\n+OK\r\n")
    check(got == b"+OK\r\n+OK\r\n", "AUTH, SELECT 0: +OK +OK (%r)" % got)
    got = exact(port, auth3 + command("SELECT", 1), b"+OK\r\n" + DB_RANGE)
    check(got == b"+OK\r\n" + DB_RANGE, "SELECT 1: %r, want %r" % (got[5:], DB_RANGE))
    got = exact(port, auth3 + command("SELECT", 0) + command("EXISTS", "nope"),
                b"+OK\r\n+OK\r\n:0\r\n")
    check(got == b"+OK\r\n+OK\r\n:0\r\n", "commands after SELECT 0 (%r)" % got)

    # a plugin configured with db 1 fails its initialisation on SELECT
    s = Slot(port, "nixl", tok, db=1)
    check(not s.ok, "a NIXL backend with db=1: SELECT refused, init fails")
    s.close()
    # no password: no AUTH, and the SETs fail (NOAUTH), nothing stored
    s = Slot(port, "", "")
    check(s.put_many([("nixl-noauth", b"x")]) == [False], "SET without AUTH fails")
    s.close()

    rng = np.random.default_rng(5)
    pool = Pool(port, "nixl", tok)
    check(all(s.ok for s in pool.slots), "8 slots x 2 connections: AUTH (no SELECT for db 0)")
    # descriptors: 24 of 1 MiB with metaInfo keys, 8 of 64 KiB keyed by devId
    items = [("nixl/kv/layer%02d/block%04d" % (i % 4, i), rng.integers(0, 256, 1 << 20,
              dtype=np.uint8).tobytes()) for i in range(24)]
    items += [(str(140000 + i), rng.integers(0, 256, 64 << 10, dtype=np.uint8).tobytes())
              for i in range(8)]
    keys = [k for k, _ in items]
    check(pool.query(keys) == [False] * len(keys), "queryMem before the write: all absent")
    t0 = time.time()
    res = pool.write(items)
    check(res == [True] * len(items), "NIXL_WRITE: every SET +OK (%s)" % res)
    print("nixl: wrote %d descriptors (%.1f MiB) pipelined over %d slots in %.2f s"
          % (len(items), sum(len(v) for _, v in items) / 2**20, POOL, time.time() - t0))
    check(pool.query(keys) == [True] * len(keys), "queryMem after the write: all present")
    res = pool.read([(k, len(v)) for k, v in items])
    check(all(r == v for r, (_, v) in zip(res, items)), "NIXL_READ: every value exact")
    res = pool.read([("nixl/missing", 4096), (keys[0], len(items[0][1]) - 1), (keys[1], 1 << 20)])
    check(res[0] is None and res[1] is None and res[2] == items[1][1],
          "a miss is nil, a size mismatch detected, the connection still in order")
    # overwrite: SET replaces
    new = [(keys[0], b"\x5a" * (1 << 20))]
    check(pool.write(new) == [True] and pool.read([(keys[0], 1 << 20)]) == [new[0][1]],
          "SET over a key replaces its value")
    try:
        check(all(s.async_conn.call("PING") == "PONG" and s.sync_conn.call("PING") == "PONG"
                  for s in pool.slots), "every connection in order at the end (PING)")
    except (OSError, ConnectionError) as e:
        check(False, "every connection in order at the end (PING): %s" % e)
    pool.close()
    if seqkv:
        other = Pool(port, "other", TOKENS["other"])
        check(other.query(keys[:4]) == [False] * 4, "another tenant sees none of the keys")
        other.close()
    return items


def redis_py_checks(port, items, seqkv):
    tok = TOKENS["nixl"]
    r = redis.Redis(host="127.0.0.1", port=port, username="nixl", password=tok)
    check(r.set("py:k", b"v\x00\xff") is True and r.get("py:k") == b"v\x00\xff",
          "redis-py SET/GET over TCP")
    check(r.exists("py:k", "py:nope") == 1, "redis-py EXISTS")
    check(r.get(items[2][0]) == items[2][1], "redis-py GET of a NIXL value exact")
    big = os.urandom(3 << 20)
    check(r.set("py:big", big) is True and r.get("py:big") == big, "redis-py 3 MiB SET/GET")
    check(r.delete("py:k", "py:nope") == 1 and r.get("py:k") is None, "redis-py DEL")
    r0 = redis.Redis(host="127.0.0.1", port=port, username="nixl", password=tok, db=0)
    check(r0.get("py:big") == big, "redis-py with db=0")
    try:
        redis.Redis(host="127.0.0.1", port=port, username="nixl", password=tok, db=1).get("x")
        check(False, "redis-py with db=1 refused")
    except (redis.ResponseError, redis.ConnectionError) as e:
        check("out of range" in str(e) or "Invalid Database" in str(e),
              "redis-py with db=1: %s" % e)
    rp = redis.Redis(host="127.0.0.1", port=port, password=tok)
    check(rp.get("py:big") == big, "redis-py AUTH with the token alone")
    for what, kw in (("no password", {}), ("a wrong password",
                                            {"username": "nixl", "password": "nope-nope"})):
        try:
            redis.Redis(host="127.0.0.1", port=port, **kw).get("py:big")
            check(False, "redis-py with %s refused" % what)
        except (redis.AuthenticationError, redis.ResponseError) as e:  # (redis-py 4.3.4 raises
            # ResponseError for WRONGPASS at connect)
            check("Authentication required" in str(e) or "invalid username-password" in str(e),
                  "redis-py with %s: %s" % (what, e))
    if seqkv:
        o = redis.Redis(host="127.0.0.1", port=port, username="other", password=TOKENS["other"])
        check(o.get("py:big") is None and o.exists(items[0][0]) == 0,
              "another tenant sees none of nixl's keys (redis-py)")
    return r, big


def redis_cli_checks(port, r):
    cli = shutil.which("redis-cli")
    if cli is None:
        print("SKIP: redis-cli checks: redis-cli is not on PATH")
        return
    tok = TOKENS["nixl"]
    base = [cli, "-h", "127.0.0.1", "-p", str(port)]
    auth = ["--user", "nixl", "--pass", tok, "--no-auth-warning"]

    def run(*args, stdin=None):
        p = subprocess.run(base + list(args), input=stdin, capture_output=True, timeout=30)
        return p.stdout.decode(errors="replace").strip(), p.stderr.decode(errors="replace")

    check(run(*auth, "SET", "cli:k", "hello")[0] == "OK", "redis-cli SET")
    check(run(*auth, "GET", "cli:k")[0] == "hello", "redis-cli GET")
    check(run(*auth, "EXISTS", "cli:k", "cli:nope")[0] == "1", "redis-cli EXISTS")
    check(run(*auth, "DEL", "cli:k")[0] == "1", "redis-cli DEL")
    check(run(*auth, "GET", "cli:k")[0] == "", "redis-cli GET after DEL: nil")
    check(run("-a", tok, "--no-auth-warning", "PING")[0] == "PONG", "redis-cli -a TOKEN PING")
    check(run(*auth, "SELECT", "0")[0] == "OK", "redis-cli SELECT 0")
    blob = hashlib.sha256(b"x").digest() * 40000   # 1.28 MB, binary
    check(run(*auth, "-x", "SET", "cli:blob", stdin=blob)[0] == "OK", "redis-cli -x SET binary")
    check(r.get("cli:blob") == blob, "a redis-cli binary value read back exact (redis-py)")
    out, err = run("SET", "cli:k", "v")
    check("NOAUTH" in out + err, "redis-cli without AUTH: NOAUTH (%r)" % (out + err))
    out, err = run("--user", "nixl", "--pass", "nope-nope", "--no-auth-warning", "GET", "cli:k")
    check("WRONGPASS" in out + err, "redis-cli with a wrong password: WRONGPASS (%r)" % (out + err))


def main():
    if use_redis:
        print("(--redis: against redis-server; tenants apart is seqkv's, skipped)")
        with pyfixture.RedisTcp(users={"nixl": TOKENS["nixl"], "other": TOKENS["other"]},
                                requirepass=TOKENS["nixl"], databases=1) as rs:
            items = nixl_checks(rs.port, False)
            r, _ = redis_py_checks(rs.port, items, False)
            redis_cli_checks(rs.port, r)
    else:
        port = pyfixture.free_port()
        config = "tenant nixl token %s\ntenant other token %s\nport %d\n" % (
            TOKENS["nixl"], TOKENS["other"], port)
        with pyfixture.Server(seqkv_bin, config=config):
            up = False
            for _ in range(400):   # the config's `port`: TCP beside the socket
                if pyfixture.Server._ping(socket.AF_INET, ("127.0.0.1", port)):
                    up = True
                    break
                time.sleep(0.025)
            if not check(up, "the config's `port %d` serves loopback TCP" % port):
                sys.exit(1)
            items = nixl_checks(port, True)
            r, _ = redis_py_checks(port, items, True)
            redis_cli_checks(port, r)
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("nixl redis: all checks passed")


main()
