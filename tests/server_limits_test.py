#!/usr/bin/python3
"""Per-tenant limits and connections before AUTH: one peer opens more
connections than the server's client limit and holds them idle,
unauthenticated -- they get max-unauth-clients slots of their own, a new
connection taking the slot of the one that waited longest, so another
tenant's connections and GETs succeed throughout; what is left is closed
after unauth-timeout; a tenant's max-clients, max-inflight and put-rate answer
-BUSY / -TOOLARGE with a clear message; INFO shows each tenant's use.

Usage: server_limits_test.py SEQKV_BIN PYTHON_DIR"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyfixture  # noqa: E402

try:
    import redis
except ImportError:  # pragma: no cover
    print("SKIP: needs Debian's python3-redis")
    sys.exit(77)

seqkv_bin = sys.argv[1]
failures = []
CONFIG = """tenant a token token-of-a-0001
tenant b token token-of-b-0002
tenant b max-clients 3
tenant b max-inflight 64K
tenant b put-rate 100K
max-clients 100
max-unauth-clients 16
unauth-timeout 2
"""


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def main():
    with pyfixture.Server(seqkv_bin, config=CONFIG) as srv:
        a = redis.Redis(unix_socket_path=srv.sock, username="a", password="token-of-a-0001")
        check(a.set("k", b"v" * 1000) is True, "tenant a sets")
        # a peer holds 150 idle connections, never authenticating
        idle = []
        for _ in range(150):
            s = socket.socket(socket.AF_UNIX)
            s.connect(srv.sock)
            idle.append(s)
        # (the server may take a moment under a sanitizer: wait up to 10 s)
        told = set()
        t0 = time.time()
        while len(told) < 150 - 16 and time.time() - t0 < 10:
            for k, s in enumerate(idle):
                if k in told:
                    continue
                s.setblocking(False)
                try:
                    if s.recv(200).startswith(b"-ERR closed: too many connections waiting"):
                        told.add(k)
                except BlockingIOError:
                    pass
            time.sleep(0.05)
        refused = len(told)
        check(refused == 150 - 16, "all but the 16 newest idle connections closed (%d)" % refused)
        # another tenant works throughout, new connections included
        for i in range(20):
            a2 = redis.Redis(unix_socket_path=srv.sock, username="a", password="token-of-a-0001")
            check(a2.get("k") == b"v" * 1000, "tenant a's GET %d while the peer holds its connections" % i)
            a2.close()
        info = a.info("clients")
        check(0 < info.get("waiting_to_authenticate", 0) <= 16, "INFO counts those waiting (%s)" %
              info.get("waiting_to_authenticate"))
        # the idle ones left are closed after unauth-timeout
        time.sleep(3.2)
        closed = 0
        for s in idle[-40:]:
            s.setblocking(True)
            s.settimeout(2)
            try:
                data = s.recv(200)
                closed += data == b"" or b"unauth-timeout" in data or b"closed" in data
            except OSError:
                closed += 1
            s.close()
        for s in idle[:-40]:
            s.close()
        check(closed == 40, "idle connections closed after the timeout (%d of 40)" % closed)
        # tenant b: max-clients 3
        bs = [redis.Redis(unix_socket_path=srv.sock, username="b", password="token-of-b-0002")
              for _ in range(4)]
        ok = 0
        for r in bs:
            try:
                r.ping()
                ok += 1
            except redis.exceptions.ResponseError as e:
                check("max-clients" in str(e), "the 4th connection's refusal: " + str(e))
        check(ok == 3, "tenant b keeps 3 connections (%d)" % ok)
        b = bs[0]
        # max-inflight 64K: a larger request is TOOLARGE
        try:
            b.set("big", b"x" * 100000)
            check(False, "a 100 KB SET over max-inflight 64K refused")
        except redis.exceptions.ResponseError as e:
            check(str(e).startswith("TOOLARGE") or "max-inflight" in str(e), "TOOLARGE: " + str(e))
        # put-rate 100K a second: a burst of 50 KB SETs is held to it
        busy = done = 0
        t0 = time.time()
        while time.time() - t0 < 1.0:
            try:
                b.set("p%d" % done, b"y" * 50000)
                done += 1
            except redis.exceptions.ResponseError as e:
                busy += 1
                check("put-rate" in str(e), "BUSY names the put-rate: " + str(e))
                time.sleep(0.05)
        check(done <= 6 and busy > 0, "about 100 KB a second of SETs (%d done, %d busy)" % (done, busy))
        lim = b.info("tenants").get("tenant_b_limits", {})
        check(str(lim.get("connections")) == "3/3" and lim.get("refused_busy", 0) > 0,
              "INFO shows b's use against its limits (%s)" % lim)
        for r in bs:
            r.close()
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("server limits: all checks passed")


main()
