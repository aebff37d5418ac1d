#!/usr/bin/python3
"""Hosts that start at the same moment form one fleet (issue 45): on a real
Redis Cluster (tests/rcluster.sh), each round empties the cluster and starts
two or three seqkv servers at once -- an orchestrator restarting a fleet --
with fresh stores, alternately with a config file (tenants with tokens) and
without one (tenant "default"). Every round, every tenant is shared on every
host, and a PUT through each host is a LOOKUP hit and a bit-exact GET through
every other.

A tenant a config reload adds joins the fleet too. Then a host whose store already holds a tenant's data under its own keys
joins a fleet that has other keys for it: that tenant stays local, and INFO
and the log say why (what it holds), not "made before this host joined".

Usage: fleet_start_test.py SEQKV_BIN SOURCE_ROOT"""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyfixture import Cluster, Server, info_fields  # noqa: E402

seqkv_bin, source_root = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(source_root, "python"))
import seqkv  # noqa: E402

ROUNDS = int(os.environ.get("SEQKV_FLEET_ROUNDS", "16"))
L, H, D, CHUNK = 2, 2, 8, 16
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def info(c, section="remote"):
    return info_fields(c, section)


def start_together(n, config, extra):
    """n servers whose processes start at one moment (a barrier, then Popen
    on n threads); the list, or SystemExit when one fails to start"""
    gate = threading.Barrier(n)
    hosts, errors = [None] * n, []

    def one(i):
        gate.wait()
        try:
            hosts[i] = Server(seqkv_bin, config, extra=extra)
        except (SystemExit, Exception) as e:  # noqa: B902 (reported below)
            errors.append(str(e))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for h in hosts:
            if h:
                h.close()
        raise SystemExit("FAIL: %s" % errors[0])
    return hosts


def client(srv, tenant, token):
    c = seqkv.Client(srv.sock, timeout=60)
    if token:
        c.call("AUTH", tenant, token)
    c.profile_set("m", layers=L, kv_heads=H, head_dim=D, dtype="bf16", chunk=CHUNK)
    return c


def prompt(rng, n):
    toks = [rng.randrange(1, 500) for _ in range(n)]
    kv = bytes(rng.getrandbits(8) for _ in range(L * 2 * n * H * D * 2))
    return toks, kv


def flush(cl):
    for port, _ in cl.masters():
        cl.cli(port, "FLUSHALL")


def one_round(cl, r, rng, extra):
    n = 2 + r % 2
    with_config = r % 4 < 2
    tenants = [("t%da" % r, "tok-%d-a-000000" % r), ("t%db" % r, "tok-%d-b-000000" % r)]
    if with_config:
        config = "".join("tenant %s token %s\n" % t for t in tenants) + "remote-timeout 3000\n"
    else:
        config, tenants = None, [("default", None)]
    flush(cl)
    hosts = start_together(n, config, extra)
    try:
        for tenant, token in tenants:
            cs = [client(h, tenant, token) for h in hosts]
            for i, c in enumerate(cs):
                ir = info(c)
                check(ir.get("remote_tenants_local") == "0" and
                      not any(k.startswith("remote_tenant_local_") for k in ir),
                      "round %d: host %d keeps no tenant local (%s)" % (r, i, ir))
            for i, c in enumerate(cs):
                toks, kv = prompt(rng, rng.randrange(2 * CHUNK, 5 * CHUNK))
                check(c.put("m", toks, kv) == len(toks), "round %d: host %d puts" % (r, i))
                for j, o in enumerate(cs):
                    if j == i:
                        continue
                    got_n = o.lookup("m", toks)
                    check(got_n == len(toks), "round %d (%d hosts, %s, tenant %s): host %d's PUT "
                          "of %d tokens is a LOOKUP hit on host %d (%d)"
                          % (r, n, "config" if with_config else "no config", tenant, i,
                             len(toks), j, got_n))
                    try:
                        got = o.get("m", toks, raw=True)
                    except seqkv.Error as e:
                        got = b"(%s)" % str(e).encode()
                    check(got == kv, "round %d: host %d's PUT is an exact GET on host %d"
                          % (r, i, j))
            for c in cs:
                c.close()
    finally:
        for h in hosts:
            h.close()


def stays_local(cl, rng, extra):
    """a host whose store holds tenant x's data under its own keys joins a
    fleet that has other keys for x"""
    flush(cl)
    tmp = tempfile.mkdtemp(prefix="seqkv-fleet-local-")
    db = os.path.join(tmp, "db")
    try:
        toks, kv = prompt(rng, 3 * CHUNK)
        with Server(seqkv_bin, "tenant x token tok-x-000000000\n", db=db) as alone:
            with client(alone, "x", "tok-x-000000000") as c:
                c.put("m", toks, kv)
        conf = "tenant x token tok-x-000000000\ntenant x admin\n"
        with Server(seqkv_bin, conf, extra=extra) as fleet_host:
            with client(fleet_host, "x", "tok-x-000000000") as c:
                check(info(c)["remote_tenants_shared"] == "1", "the fleet has tenant x")
        log = os.path.join(tmp, "log")
        with open(log, "w") as lf:
            cf = os.path.join(tmp, "conf")
            with open(cf, "w") as f:
                f.write(conf)
            sock = os.path.join(tmp, "s.sock")
            p = subprocess.Popen([seqkv_bin, "serve", "--db", db, "--socket", sock, "--config",
                                  cf, "--threads", "2"] + extra, stderr=lf)
            try:
                for _ in range(400):
                    if os.path.exists(sock):
                        try:
                            c = client(type("S", (), {"sock": sock})(), "x", "tok-x-000000000")
                            break
                        except (OSError, seqkv.Error):
                            pass
                    time.sleep(0.05)
                else:
                    raise SystemExit("FAIL: the host with its own tenant x did not start")
                ir = info(c)
                why = ir.get("remote_tenant_local_x", "")
                check(ir["remote_tenants_local"] == "1", "tenant x stays local (%s)" % ir)
                check("holds %d tokens" % len(toks) in why and "before this host shared it" in why,
                      "INFO says why x stays local: %r" % why)
                check(c.get("m", toks, raw=True) == kv, "x's own data still reads back exact")
                c.close()
            finally:
                p.terminate()
                p.wait(30)
        text = open(log).read()
        check("tenant 'x' stays local: it was made here before this host shared it and holds "
              "%d tokens" % len(toks) in text, "the log says why x stays local")
        check("made before this host joined" not in text, "no misleading reason in the log")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def reload_joins(cl, rng, extra):
    """a tenant a config reload adds joins the fleet, as one at start does"""
    flush(cl)
    first = "tenant a token tok-a-000000000\ntenant a admin\n"
    both = first + "tenant z token tok-z-000000000\n"
    hosts = start_together(2, first, extra)
    try:
        for h in hosts:
            with open(os.path.join(h.dir, "seqkv.conf"), "w") as f:
                f.write(both)
            with seqkv.Client(h.sock, timeout=30) as c:
                c.call("AUTH", "a", "tok-a-000000000")
                check(c.call("KV.CONFIG", "RELOAD") in ("OK", b"OK"), "reload adds tenant z")
        cz = [client(h, "z", "tok-z-000000000") for h in hosts]
        check(all(info(c)["remote_tenants_shared"] == "2" for c in cz),
              "tenant z, added by a reload, is shared on both hosts")
        toks, kv = prompt(rng, 3 * CHUNK)
        cz[0].put("m", toks, kv)
        check(cz[1].lookup("m", toks) == len(toks) and cz[1].get("m", toks, raw=True) == kv,
              "z's PUT on one host is a hit and an exact GET on the other")
        for c in cz:
            c.close()
    finally:
        for h in hosts:
            h.close()


def reload_unreachable(cl, extra):
    """with the cluster gone, a reload that adds a tenant is refused within
    seconds (the loop is not held for the remote timeout) and the config in
    force stays; the cluster is stopped for good here"""
    flush(cl)
    first = "tenant a token tok-a-000000000\ntenant a admin\nremote-timeout 30000\n"
    with Server(seqkv_bin, first, extra=extra) as h:
        with seqkv.Client(h.sock, timeout=60) as c:
            c.call("AUTH", "a", "tok-a-000000000")
            cl.run("stop", cl.dir)
            with open(os.path.join(h.dir, "seqkv.conf"), "w") as f:
                f.write(first + "tenant y token tok-y-000000000\n")
            t0 = time.time()
            try:
                c.call("KV.CONFIG", "RELOAD")
                e = None
            except seqkv.Error as x:
                e = str(x)
            took = time.time() - t0
            print("reload with the cluster gone: refused in %.2f s" % took, flush=True)
            check(e is not None and "could not join the fleet" in e,
                  "a reload whose new tenant cannot join is refused (%s)" % e)
            check(took < 20, "... within seconds, not the 30 s remote-timeout a call (%.1f s)"
                  % took)
            check(c.call("PING") in ("PONG", b"PONG"), "the server serves on")
            try:
                client(h, "y", "tok-y-000000000")
                check(False, "tenant y is not in force")
            except seqkv.Error as x:
                check("WRONGPASS" in str(x), "tenant y cannot AUTH (%s)" % x)


def main():
    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        print("SKIP: needs redis-server and redis-cli (Debian's redis-server, redis-tools)")
        sys.exit(77)
    os.environ["SEQKV_TEST_FLEET_KEY"] = os.urandom(32).hex()
    cl = Cluster(source_root)
    extra = ["--remote", "redis-cluster://" + cl.seeds, "--remote-key",
             "env:SEQKV_TEST_FLEET_KEY", "--remote-durability", "replica"]
    rng = random.Random(45)
    try:
        t0 = time.time()
        for r in range(ROUNDS):
            one_round(cl, r, rng, extra)
        print("%d rounds of 2-3 hosts started at once: %.1f s" % (ROUNDS, time.time() - t0),
              flush=True)
        stays_local(cl, rng, extra)
        reload_joins(cl, rng, extra)
        reload_unreachable(cl, extra)
    finally:
        cl.close()
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("fleet start: all checks passed")


main()
