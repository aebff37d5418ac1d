#!/usr/bin/python3
"""GET /metrics (seqkv serve --metrics) scraped by a real Prometheus (Debian's
prometheus package) started on loopback in a temporary directory:

1. The exposition passes `promtool check metrics`, has the families the
   operator needs (per tenant, per tenant and profile and level, per
   command with latency histograms) and only loopback may serve it.
2. Prometheus scrapes it every second; after a KV.PUT and a KV.GET through
   the server, its HTTP API returns seqkv counters that moved, and a
   histogram_quantile over the commands' latency.
3. HTTP that is not a metrics GET gets 400/404/405/431, and the endpoint
   keeps serving.

Usage: metrics_prometheus_test.py SEQKV_BIN PYTHON_DIR"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyfixture import Server, free_port, stop_process  # noqa: E402

seqkv_bin, python_dir = sys.argv[1], sys.argv[2]
sys.path.insert(0, python_dir)
import seqkv  # noqa: E402

CONFIG = """tenant a token token-of-a-0001
tenant a admin
tenant b token token-of-b-0002
"""
L, H, D = 2, 2, 8
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def http(port, raw):
    """raw bytes sent to 127.0.0.1:port; the reply's status line and body"""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), head.decode(), body


def samples(text):
    """{'name{labels}': value} of an exposition"""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def prom_query(pport, q):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (pport, urllib.parse.urlencode({"query": q}))
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.load(r)
    return doc["data"]["result"] if doc.get("status") == "success" else None


def wait_value(pport, q, pred, what, timeout=40):
    """poll Prometheus until q's first value satisfies pred; that value"""
    last = None
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            res = prom_query(pport, q)
        except OSError:
            res = None
        if res:
            last = float(res[0]["value"][1])
            if pred(last):
                return last
        time.sleep(0.5)
    check(False, "%s: Prometheus's %s is %r after %d s" % (what, q, last, timeout))
    return last


def refused(extra, config, what):
    d = tempfile.mkdtemp(prefix="seqkv-metrics-bad-")
    try:
        args = [seqkv_bin, "serve", "--db", os.path.join(d, "db"), "--socket",
                os.path.join(d, "s.sock"), "--quiet"] + extra
        if config:
            cf = os.path.join(d, "c.conf")
            with open(cf, "w") as f:
                f.write(config)
            args += ["--config", cf]
        p = subprocess.run(args, capture_output=True, text=True, timeout=30)
        check(p.returncode != 0 and ("loopback" in p.stderr or "ADDR:PORT" in p.stderr),
              "%s is refused, saying why (rc %d: %s)" % (what, p.returncode, p.stderr.strip()))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def exposition_checks(mport):
    status, head, body = http(mport, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    check(status == "HTTP/1.1 200 OK", "GET /metrics: %s" % status)
    check("text/plain; version=0.0.4" in head, "the exposition's content type (%s)" % head)
    text = body.decode()
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True)
    check(p.returncode == 0, "promtool check metrics passes (%s%s)" % (p.stdout, p.stderr))
    s = samples(text)
    for want in ['seqkv_puts_total{tenant="a"}', 'seqkv_puts_total{tenant="b"}',
                 'seqkv_tokens{tenant="a",profile="m"}', 'seqkv_cache_budget_bytes',
                 'seqkv_commands_total{command="kv.put"}', 'process_resident_memory_bytes',
                 'seqkv_command_duration_seconds_count{command="kv.put"}',
                 'seqkv_command_duration_seconds_bucket{command="kv.put",le="+Inf"}',
                 'seqkv_remote_tenants{state="shared"}', 'seqkv_compactions_total',
                 'seqkv_blob_keys{tenant="a"}', 'seqkv_connected_clients']:
        check(want in s, "the exposition has %s" % want)
    check(any(k.startswith('seqkv_level_stored_bytes{tenant="a",profile="m",level=') for k in s),
          "stored bytes by level")
    return text


def http_errors(mport):
    for raw, code in [(b"POST /metrics HTTP/1.1\r\n\r\n", "405"),
                      (b"GET /nope HTTP/1.1\r\n\r\n", "404"),
                      (b"GARBAGE\r\n\r\n", "400"),
                      (b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 9000 + b"\r\n\r\n", "431")]:
        status, _, _ = http(mport, raw)
        check(status.split(" ")[1:2] == [code], "%r... answered %s (%s)" % (raw[:20], code, status))
    status, head, _ = http(mport, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    check(status.endswith("200 OK") and "Content-Length" in head, "HEAD /metrics")
    # a client trickling its head is cut off at the deadline, and the next is served
    t0 = time.time()
    with socket.create_connection(("127.0.0.1", mport), timeout=10) as s:
        try:
            for ch in b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 40:
                s.sendall(bytes([ch]))
                time.sleep(0.1)
            got = s.recv(100)
        except OSError:
            got = b""
    check(got == b"" and time.time() - t0 < 6, "a trickling client is dropped (%r, %.1f s)"
          % (got, time.time() - t0))
    status, _, _ = http(mport, b"GET /metrics HTTP/1.1\r\n\r\n")
    check(status.endswith("200 OK"), "the endpoint still serves after bad requests")


def dashboard(pport):
    """every query of contrib/grafana-seqkv.json is PromQL this Prometheus
    evaluates, over families the endpoint has"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "contrib", "grafana-seqkv.json")) as f:
        dash = json.load(f)
    n = 0
    for p in dash["panels"]:
        for t in p["targets"]:
            q = t["expr"].replace("$__rate_interval", "1m").replace("$tenant", ".*")
            url = "http://127.0.0.1:%d/api/v1/query?%s" % (pport, urllib.parse.urlencode({"query": q}))
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    ok = json.load(r).get("status") == "success"
            except OSError as e:
                ok = False
                print("dashboard query %r: %s" % (q, e))
            check(ok, "the dashboard's query %r is valid PromQL" % q)
            for name in set(re.findall(r"\b((?:seqkv|process)_[a-z_]+)", q)):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                check(bool(prom_query(pport, "count({__name__=~\"%s(_bucket|_sum|_count)?\"})"
                                      % base)), "the dashboard's %s is scraped" % name)
            n += 1
    check(n >= 20, "the dashboard has its queries (%d)" % n)


def main():
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("SKIP: needs Debian's prometheus package (prometheus, promtool)")
        sys.exit(77)
    refused(["--metrics", "0.0.0.0:%d" % free_port()], None, "--metrics 0.0.0.0")
    refused([], "metrics 10.1.2.3:9464\n", "config metrics 10.1.2.3")
    refused(["--metrics", "nonsense"], None, "--metrics nonsense")
    mport, pport = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="seqkv-prom-")
    prom = None
    try:
        with Server(seqkv_bin, CONFIG, extra=["--metrics", "127.0.0.1:%d" % mport]) as srv:
            ca = seqkv.Client(srv.sock, timeout=30)
            ca.call("AUTH", "a", "token-of-a-0001")
            ca.profile_set("m", layers=L, kv_heads=H, head_dim=D, dtype="bf16", chunk=16)
            toks = list(range(1, 41))
            kv = os.urandom(L * 2 * len(toks) * H * D * 2)
            check(ca.put("m", toks, kv) == len(toks), "a first PUT")
            exposition_checks(mport)
            http_errors(mport)
            conf = os.path.join(tmp, "prometheus.yml")
            with open(conf, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        "scrape_configs:\n  - job_name: seqkv\n    static_configs:\n"
                        "      - targets: ['127.0.0.1:%d']\n" % mport)
            log = open(os.path.join(tmp, "prometheus.log"), "w")
            prom = subprocess.Popen(["prometheus", "--config.file", conf,
                                     "--storage.tsdb.path", os.path.join(tmp, "data"),
                                     "--web.listen-address", "127.0.0.1:%d" % pport],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
            wait_value(pport, 'up{job="seqkv"}', lambda v: v == 1, "Prometheus scrapes seqkv")
            q_put = 'seqkv_puts_total{tenant="a"}'
            q_get = 'seqkv_served_bytes_total{tenant="a"}'
            before = wait_value(pport, q_put, lambda v: v >= 1, "the first PUT")
            toks2 = list(range(100, 164))
            kv2 = os.urandom(L * 2 * len(toks2) * H * D * 2)
            check(ca.put("m", toks2, kv2) == len(toks2), "a second PUT")
            check(ca.get("m", toks2, raw=True) == kv2, "a GET, exact")
            after = wait_value(pport, q_put, lambda v: v > before, "a PUT moves the counter")
            check(after == before + 1, "seqkv_puts_total went %s -> %s" % (before, after))
            got = wait_value(pport, q_get, lambda v: v >= len(kv2), "a GET moves bytes served")
            check(got == len(kv2), "seqkv_served_bytes_total is the GET's %d bytes (%s)"
                  % (len(kv2), got))
            wait_value(pport, 'seqkv_tokens{tenant="a",profile="m"}', lambda v: v == 104,
                       "tokens stored, by tenant and profile")
            wait_value(pport, 'histogram_quantile(0.5, sum by (le) '
                       '(seqkv_command_duration_seconds_bucket{command="kv.put"}))',
                       lambda v: 0 < v < 100, "a latency quantile from the histogram")
            wait_value(pport, 'seqkv_puts_total{tenant="b"}', lambda v: v == 0,
                       "tenant b's own labels")
            dashboard(pport)
            ca.close()
    finally:
        stop_process(prom)
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("metrics: all checks passed")


main()
