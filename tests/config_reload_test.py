#!/usr/bin/python3
"""Config reload without a restart (SIGHUP and KV.CONFIG RELOAD): tenants,
tokens, limits and admins change for new connections and requests, clients
connected before keep working, a broken file leaves the server as it was.

Usage: config_reload_test.py SEQKV_BIN PYTHON_DIR"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyfixture import Server, info_fields  # noqa: E402

seqkv_bin, python_dir = sys.argv[1], sys.argv[2]
sys.path.insert(0, python_dir)
import seqkv  # noqa: E402

failures = []
FIRST = """tenant a token token-of-a-0001
tenant a admin
tenant b token token-of-b-0002
"""
# b's token rotated, c added with a limit, b made an admin, a no longer one
SECOND = """tenant a token token-of-a-0001
tenant b token token-of-b-NEW2
tenant b admin
tenant c token token-of-c-0003
tenant c max-inflight 1K
"""
# c removed
THIRD = """tenant a token token-of-a-0001
tenant b token token-of-b-NEW2
tenant b admin
"""
BROKEN = """tenant a token token-of-a-0001
tenant b token token-of-b-NEW2
tenant b frobnicate
tenant d token token-of-d-0004
"""


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def error_of(fn, *args):
    try:
        fn(*args)
    except seqkv.Error as e:
        return str(e)
    return None


def client(srv, tenant=None, token=None):
    c = seqkv.Client(srv.sock, timeout=30)
    if tenant:
        c.call("AUTH", tenant, token)
    return c


def info(c):
    return info_fields(c, "server")


def write_config(srv, text):
    path = os.path.join(srv.dir, "seqkv.conf")
    with open(path + ".new", "w") as f:
        f.write(text)
    os.chmod(path + ".new", 0o600)
    os.replace(path + ".new", path)


def sighup_and_wait(srv, watcher, key, n):
    srv.proc.send_signal(signal.SIGHUP)
    for _ in range(200):
        if int(info(watcher)[key]) >= n:
            return True
        time.sleep(0.02)
    check(False, "SIGHUP: %s reached %d" % (key, n))
    return False


def main():
    with Server(seqkv_bin, FIRST) as srv:
        ca = client(srv, "a", "token-of-a-0001")
        cb = client(srv, "b", "token-of-b-0002")
        cb.call("SET", "k", "value-of-b")
        check(error_of(cb.call, "KV.CONFIG", "RELOAD") is not None and
              "NOPERM" in error_of(cb.call, "KV.CONFIG", "RELOAD"),
              "b is not an admin before the reload")

        # 1. SIGHUP with a new file
        write_config(srv, SECOND)
        sighup_and_wait(srv, ca, "config_reloads", 1)
        i = info(ca)
        check(i["config_last_reload"].startswith("ok: 3 tenants (1 added"),
              "INFO says what the reload did (%s)" % i["config_last_reload"])
        with client(srv, "c", "token-of-c-0003") as cc:
            check(cc.call("SET", "kc", "x") in ("OK", b"OK"), "tenant c, added to the file, can AUTH")
            e = error_of(cc.call, "SET", "big", "x" * 4096)
            check(e is not None and ("BUSY" in e or "TOOLARGE" in e),
                  "c's max-inflight from the file applies (%s)" % e)
        e = error_of(client, srv, "b", "token-of-b-0002")
        check(e is not None and "WRONGPASS" in e, "b's removed token cannot AUTH (%s)" % e)
        with client(srv, "b", "token-of-b-NEW2") as cb2:
            check(cb2.call("GET", "k") in (b"value-of-b", "value-of-b"),
                  "b's new token AUTHs, to b's data")
        check(cb.call("GET", "k") in (b"value-of-b", "value-of-b"),
              "b's client connected before the reload keeps working")
        check(ca.call("PING") in ("PONG", b"PONG"), "a's client keeps working")
        e = error_of(ca.call, "KV.CONFIG", "RELOAD")
        check(e is not None and "NOPERM" in e, "a is no longer an admin, at once (%s)" % e)

        # 2. KV.CONFIG RELOAD by the new admin; c removed
        cc = client(srv, "c", "token-of-c-0003")
        write_config(srv, THIRD)
        check(cb.call("KV.CONFIG", "RELOAD") in ("OK", b"OK"), "b, admin now, reloads")
        e = error_of(cc.call, "GET", "kc")
        check(e is not None and "NOPERM" in e and "no longer in the config" in e,
              "a removed tenant's requests are refused (%s)" % e)
        check(cc.call("PING") in ("PONG", b"PONG"), "... but its client is not dropped")
        e = error_of(client, srv, "c", "token-of-c-0003")
        check(e is not None and "WRONGPASS" in e, "a removed tenant cannot AUTH (%s)" % e)
        cc.close()

        # 3. a broken file: refused whole, the line named, nothing changed
        write_config(srv, BROKEN)
        e = error_of(cb.call, "KV.CONFIG", "RELOAD")
        check(e is not None and "line 3" in e and "refused" in e,
              "KV.CONFIG RELOAD of a broken file names its line (%s)" % e)
        sighup_and_wait(srv, cb, "config_reload_failures", 2)
        i = info(cb)
        check(i["config_reloads"] == "2" and "line 3" in i["config_last_reload"],
              "INFO: two reloads, two refusals, the last one's line (%s)" % i)
        e = error_of(client, srv, "d", "token-of-d-0004")
        check(e is not None and "WRONGPASS" in e, "nothing of the broken file applies (%s)" % e)
        with client(srv, "b", "token-of-b-NEW2") as cb3:
            check(cb3.call("GET", "k") in (b"value-of-b", "value-of-b"),
                  "the config in force stays")
        check(srv.proc.poll() is None, "the server runs on")
        # 4. back to a good file: works again
        write_config(srv, FIRST)
        check(cb.call("KV.CONFIG", "RELOAD") in ("OK", b"OK"), "a good file reloads after a bad one")
        with client(srv, "b", "token-of-b-0002") as cb4:
            check(cb4.call("PING") in ("PONG", b"PONG"), "b's first token again")
        for c in (ca, cb):
            c.close()

    # socket-mode: the socket's mode at start (0600 by default)
    for conf, want in ((FIRST, 0o600), (FIRST + "socket-mode 0660\n", 0o660)):
        with Server(seqkv_bin, conf) as srv:
            mode = os.stat(srv.sock).st_mode & 0o777
            check(mode == want, "socket mode %o (want %o)" % (mode, want))
    # a server started without --config has nothing to re-read
    with Server(seqkv_bin) as srv:
        with client(srv) as c:
            e = error_of(c.call, "KV.CONFIG", "RELOAD")
            check(e is not None and "without --config" in e, "no config file: said (%s)" % e)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("config reload: all checks passed")


main()
