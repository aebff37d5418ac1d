#!/usr/bin/python3
"""Hostile frames over TCP are answered as on the Unix socket.

Every file of the RESP parser's fuzz corpus (tests/fuzz/corpus/fuzz_resp:
malformed headers, oversized bulks and queries, bare LFs, partial frames,
pipelines) is sent once over the Unix socket and once over loopback TCP,
each on a fresh connection of its own tenant (the two tenants have the
same shape, so their replies may be compared byte for byte, but for the
tenant's name and the client id); the replies must be equal, the server must stay up, and a value set before the replay
must read back exact over both transports afterwards. Also: a TCP peer
without AUTH gets redis-server's -NOAUTH, and a TCP peer that only
connects is closed after unauth-timeout.

usage: resp_tcp_test.py SEQKV_BIN PYTHON_DIR"""
import os
import re
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyfixture import Server  # noqa: E402

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz", "corpus", "fuzz_resp")
CONFIG = """tenant tenant-u token unix-token-0123
tenant tenant-t token tcp-token-45678
max-bulk 4K
max-query 8K
max-args 16
unauth-timeout 1
"""
fails = 0


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what)


def drain(s, quiet=0.15, limit=5.0):
    """What the server sends until it closes or stays quiet for `quiet` s"""
    out = b""
    end = time.time() + limit
    s.settimeout(quiet)
    while time.time() < end:
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            break
        if not d:
            break
        out += d
    return out


def normal(reply, tenant):
    return re.sub(rb"\$2\r\nid\r\n:\d+", b"$2\r\nid\r\n:ID", reply.replace(tenant, b"TENANT"))


def connect(srv, tcp):
    if tcp:
        s = socket.create_connection(("127.0.0.1", srv.port))
    else:
        s = socket.socket(socket.AF_UNIX)
        s.connect(srv.sock)
    return s


def session(srv, tcp, payload):
    s = connect(srv, tcp)
    tenant, token = ("tenant-t", "tcp-token-45678") if tcp else ("tenant-u", "unix-token-0123")
    s.sendall(b"*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
              % (len(tenant), tenant.encode(), len(token), token.encode()))
    s.settimeout(5)
    ok = b""
    while len(ok) < 5:
        d = s.recv(5 - len(ok))
        if not d:
            break
        ok += d
    check(ok == b"+OK\r\n", "AUTH as %s" % tenant)
    try:
        s.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = drain(s)
    s.close()
    return out


def main():
    seqkv_bin = sys.argv[1]
    files = sorted(os.listdir(CORPUS))
    check(len(files) >= 10, "the corpus has its files")
    with Server(seqkv_bin, config=CONFIG, port=True) as srv:
        value = os.urandom(3000)
        for tcp in (False, True):
            r = session(srv, tcp, b"*3\r\n$3\r\nSET\r\n$4\r\nkeep\r\n$%d\r\n%s\r\n"
                        % (len(value), value))
            check(r == b"+OK\r\n", "SET before the replay (tcp=%d)" % tcp)
        for name in files:
            with open(os.path.join(CORPUS, name), "rb") as f:
                payload = f.read()
            # what may differ: the tenant's name, and the client id HELLO reports
            a = normal(session(srv, False, payload), b"tenant-u")
            b = normal(session(srv, True, payload), b"tenant-t")
            check(a == b, "%s: the same reply over TCP as over the Unix socket\n  unix %r\n  tcp  %r"
                  % (name, a[:200], b[:200]))
        for tcp in (False, True):
            r = session(srv, tcp, b"*3\r\n$3\r\nSET\r\n$5\r\nempty\r\n$0\r\n\r\n"
                        b"*2\r\n$3\r\nGET\r\n$5\r\nempty\r\n")
            check(r == b"+OK\r\n$0\r\n\r\n", "an empty value set and read back (tcp=%d): %r"
                  % (tcp, r))
            r = session(srv, tcp, b"*2\r\n$3\r\nGET\r\n$4\r\nkeep\r\n")
            check(r == b"$%d\r\n%s\r\n" % (len(value), value),
                  "GET after the replay is exact (tcp=%d)" % tcp)
        # no AUTH over TCP
        s = connect(srv, True)
        s.sendall(b"*2\r\n$3\r\nGET\r\n$4\r\nkeep\r\n")
        check(drain(s) == b"-NOAUTH Authentication required.\r\n", "-NOAUTH without AUTH")
        s.sendall(b"*3\r\n$4\r\nAUTH\r\n$8\r\ntenant-t\r\n$5\r\nwrong\r\n")
        check(drain(s) == b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
              "-WRONGPASS for a wrong token")
        s.close()
        # HELLO 3 AUTH authenticates a TCP peer and switches it to RESP3
        s = connect(srv, True)
        s.sendall(b"*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$8\r\ntenant-t\r\n"
                  b"$15\r\ntcp-token-45678\r\n*2\r\n$3\r\nGET\r\n$4\r\nkeep\r\n")
        out = drain(s)
        check(out.startswith(b"%") and b"tenant-t" in out and
              out.endswith(b"$%d\r\n%s\r\n" % (len(value), value)),
              "HELLO 3 AUTH over TCP, then GET: %r" % out[:80])
        s.sendall(b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n")
        check(drain(s) == b"+OK\r\n-ERR DB index is out of range\r\n", "SELECT 0 and SELECT 1")
        s.close()
        # a TCP peer that never authenticates is closed after unauth-timeout
        s = connect(srv, True)
        out = drain(s, quiet=4.0, limit=6.0)
        check(out.startswith(b"-ERR no AUTH within unauth-timeout"), "idle TCP peer closed: %r" % out)
        s.close()
    if fails:
        print("resp over tcp: %d failures" % fails)
        sys.exit(1)
    print("resp over tcp: %d corpus frames answered alike; all checks passed" % len(files))


if __name__ == "__main__":
    main()
