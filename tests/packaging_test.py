#!/usr/bin/python3
"""Packaging for operators: `pip install ./python` into a fresh venv with
no index (python/_build/seqkv_build.py, the in-tree PEP 517 backend),
and contrib/seqkv.service through `systemd-analyze verify`.

- the wheel (`pip wheel`): the package's every .py, METADATA (version,
  Requires-Python, numpy an extra only), WHEEL, and a RECORD whose hashes
  and sizes match every entry;
- `pip install ./python`: seqkv imports from the venv's site-packages,
  from a directory outside the tree, without numpy (the venv has none),
  its __version__ is include/seqkv.h's SEQKV_VERSION_* (and meson.build's),
  and its Client stores and reads back KV through a live `seqkv serve`;
  `pip uninstall -y seqkv` removes it;
- the sdist (the backend's build_sdist) and an editable install too;
- the source tree holds the same files after all of it as before;
- the unit, with ExecStart's binary made the built one: `systemd-analyze
  verify` says nothing, and ExecStart's options are `seqkv serve`'s;
  contrib/seqkv.conf.example is a config the server starts with.

Usage: packaging_test.py SEQKV_BIN SOURCE_ROOT. Exit 0 pass, 77 skip (no
python3-venv, no systemd-analyze: says which), else fail."""
import ast
import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile

seqkv_bin, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
pydir = os.path.join(root, "python")
sys.path.insert(0, os.path.join(root, "tests"))
from pyfixture import Server  # noqa: E402

failures, skipped = [], []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)
    return cond


def header_version():
    with open(os.path.join(root, "include", "seqkv.h")) as f:
        h = f.read()
    parts = [re.search(r"#define SEQKV_VERSION_%s (\d+)" % p, h).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def package_version():
    """__version__ of python/seqkv/__init__.py, read as the backend reads it"""
    with open(os.path.join(pydir, "seqkv", "__init__.py")) as f:
        for node in ast.parse(f.read()).body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__version__":
                return ast.literal_eval(node.value)
    return None


def snapshot(top):
    """{path: (size, mtime)} of every file under top, ignored ones too"""
    out = {}
    for d, _, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            st = os.lstat(p)
            out[os.path.relpath(p, top)] = (st.st_size, st.st_mtime_ns)
    return out


def clean_env():
    """No index, no cache, no user config, proxies that go nowhere (a
    tripwire: pip must not try the network), nothing from the caller's
    PYTHONPATH or venv. pip runs as an operator's would (its hook
    subprocess imports the backend from the tree and so caches its
    bytecode there: see main()); what else imports from the tree (the
    editable probe, build_sdist) is told to write no bytecode"""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON")) and k not in ("VIRTUAL_ENV",)}
    env.update(PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_CONFIG_FILE=os.devnull,
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               PYTHONNOUSERSITE="1",
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
               http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9")
    return env


def run(args, cwd, what, **env):
    r = subprocess.run(args, cwd=cwd, env=dict(clean_env(), **env), capture_output=True,
                       text=True, timeout=120)
    if not check(r.returncode == 0, what):
        sys.stdout.write(r.stdout[-3000:] + r.stderr[-3000:])
    return r


def check_wheel(path, version):
    """The wheel's entries, METADATA, WHEEL and RECORD"""
    di = "seqkv-%s.dist-info/" % version
    want = sorted(os.path.relpath(os.path.join(d, f), pydir).replace(os.sep, "/")
                  for d, dirs, files in os.walk(os.path.join(pydir, "seqkv"))
                  for f in files if f.endswith(".py") and "__pycache__" not in d)
    with zipfile.ZipFile(path) as z:
        check(z.testzip() is None, "the wheel is a sound zip")
        names = z.namelist()
        check(sorted(n for n in names if not n.startswith(di)) == want,
              "the wheel holds the package's %d .py files (connectors and "
              "profile_fields.py among them), nothing else" % len(want))
        check({di + "METADATA", di + "WHEEL", di + "RECORD"} <= set(names),
              "the wheel has METADATA, WHEEL, RECORD")
        meta = z.read(di + "METADATA").decode()
        head = meta.split("\n\n", 1)[0].splitlines()
        for line in ("Metadata-Version: 2.1", "Name: seqkv", "Version: " + version,
                     "Requires-Python: >=3.8", "Provides-Extra: numpy",
                     'Requires-Dist: numpy; extra == "numpy"'):
            check(line in head, "METADATA: " + line)
        check(not [x for x in head if x.startswith("Requires-Dist") and "extra ==" not in x],
              "METADATA: no unconditional Requires-Dist (numpy optional)")
        check(any(x.startswith("Summary: ") for x in head), "METADATA: Summary")
        wheel = z.read(di + "WHEEL").decode().splitlines()
        check("Root-Is-Purelib: true" in wheel and "Tag: py3-none-any" in wheel
              and "Wheel-Version: 1.0" in wheel, "WHEEL: 1.0, purelib, py3-none-any")
        rows = list(csv.reader(io.StringIO(z.read(di + "RECORD").decode())))
        check(sorted(r[0] for r in rows) == sorted(names), "RECORD lists every entry once")
        bad = []
        for name, digest, size in rows:
            if name == di + "RECORD":
                if digest or size:
                    bad.append(name)
                continue
            data = z.read(name)
            h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if digest != "sha256=" + h or size != str(len(data)):
                bad.append(name)
        check(not bad, "RECORD's sha256 and size match every entry %s" % (bad or ""))


# Run in the venv from outside the tree: where seqkv comes from, its
# version, whether numpy is there, and a round trip through the server.
PROBE = r"""
import importlib.util, json, struct, sys
import seqkv, seqkv.connectors, seqkv.connectors.vllm, seqkv.connectors.vllm_tier
out = {"file": seqkv.__file__, "version": seqkv.__version__,
       "numpy": importlib.util.find_spec("numpy") is not None}
if len(sys.argv) > 1:
    c = seqkv.Client(sys.argv[1])
    out["ping"] = c.ping()
    c.profile_set("p", layers=2, kv_heads=2, head_dim=8, dtype="bf16")
    tokens = list(range(1, 41))
    kv = bytes((i * 7 + 3) & 255 for i in range(40 * 2 * 2 * 2 * 8 * 2))
    c.put("p", tokens, kv)
    got = c.get("p", tokens)
    out["lookup"] = c.lookup("p", tokens)
    out["get_is_bytes"] = isinstance(got, bytes)
    out["get_exact"] = got == kv
print(json.dumps(out))
"""


def probe(py, cwd, sock=None):
    r = run([py, "-c", PROBE] + ([sock] if sock else []), cwd, "seqkv imports in the venv",
            PYTHONDONTWRITEBYTECODE="1")
    return json.loads(r.stdout) if r.returncode == 0 else {}


def python_part(tmp, version):
    venv = os.path.join(tmp, "venv")
    r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True,
                       env=clean_env())
    if r.returncode != 0:
        if "ensurepip" in r.stdout + r.stderr:
            skipped.append("python3-venv is not installed (no ensurepip): no venv")
            return
        check(False, "python3 -m venv: " + r.stdout + r.stderr)
        return
    py = os.path.join(venv, "bin", "python")
    pip = [py, "-m", "pip"]
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, env=clean_env()).stdout.strip()
    work = os.path.join(tmp, "work")          # a cwd outside the source tree
    os.mkdir(work)

    wheels = os.path.join(tmp, "wheels")
    if run(pip + ["wheel", "--no-deps", "-w", wheels, pydir], work,
           "pip wheel ./python, offline").returncode == 0:
        check_wheel(os.path.join(wheels, "seqkv-%s-py3-none-any.whl" % version), version)

    if run(pip + ["install", pydir], work, "pip install ./python, offline").returncode == 0:
        with Server(seqkv_bin) as srv:
            got = probe(py, work, srv.sock)
        if got:
            check(os.path.dirname(got["file"]) == os.path.join(site, "seqkv"),
                  "seqkv comes from the venv's site-packages (%s)" % got["file"])
            check(got["version"] == version, "seqkv.__version__ %s" % got["version"])
            check(not got["numpy"], "the venv has no numpy, and seqkv imports without it")
            check(got["ping"] == "PONG", "Client.ping() through a live server")
            check(got["lookup"] == 40 and got["get_is_bytes"] and got["get_exact"],
                  "Client put, lookup, get: the KV back, bit-exact, as bytes")
    run(pip + ["uninstall", "-y", "seqkv"], work, "pip uninstall -y seqkv")
    r = subprocess.run([py, "-c", "import seqkv"], cwd=work, env=clean_env(),
                       capture_output=True, text=True)
    check(r.returncode != 0 and "No module named 'seqkv'" in r.stderr,
          "after the uninstall, import seqkv fails")
    check(not [f for f in os.listdir(site) if f.startswith("seqkv")],
          "after the uninstall, nothing of seqkv is left in site-packages")

    sdists = os.path.join(tmp, "sdist")
    os.mkdir(sdists)
    # the backend's hook as a frontend calls it: cwd the source tree
    call = ("import sys; sys.path.insert(0, '_build'); import seqkv_build; "
            "print(seqkv_build.build_sdist(sys.argv[1]))")
    r = run([py, "-c", call, sdists], pydir, "the backend's build_sdist",
            PYTHONDONTWRITEBYTECODE="1")
    if r.returncode == 0:
        sdist = os.path.join(sdists, r.stdout.strip())
        check(os.path.basename(sdist) == "seqkv-%s.tar.gz" % version, "sdist " + sdist)
        if run(pip + ["install", sdist], work, "pip install the sdist, offline").returncode == 0:
            got = probe(py, work)
            check(got.get("version") == version and got.get("file", "").startswith(site),
                  "installed from the sdist: seqkv %s in site-packages" % got.get("version"))
            run(pip + ["uninstall", "-y", "seqkv"], work, "pip uninstall -y seqkv (sdist)")

    r = run(pip + ["install", "-e", pydir], work, "pip install -e ./python, offline")
    if r.returncode == 0:
        got = probe(py, work)
        check(got.get("file") == os.path.join(pydir, "seqkv", "__init__.py"),
              "editable: seqkv comes from the source tree (%s)" % got.get("file"))
        run(pip + ["uninstall", "-y", "seqkv"], work, "pip uninstall -y seqkv (editable)")
        check(not [f for f in os.listdir(site) if "seqkv" in f],
              "after the editable uninstall, nothing of seqkv is left in site-packages")


def unit_part(tmp):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        skipped.append("systemd-analyze is not installed: the unit is not verified")
        return
    with open(os.path.join(root, "contrib", "seqkv.service")) as f:
        unit = f.read()
    starts = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    if not check(len(starts) == 1 and starts[0].startswith("ExecStart=/usr/local/bin/seqkv serve "),
                 "one ExecStart=/usr/local/bin/seqkv serve ..."):
        return
    helptext = subprocess.run([seqkv_bin, "serve", "--help"], capture_output=True,
                              text=True).stdout
    opts = re.findall(r"(--[a-z-]+)", starts[0])
    check(opts and all(re.search(r"^\s+%s\b" % o, helptext, re.M) for o in opts),
          "ExecStart's options %s are seqkv serve's" % " ".join(opts))
    # verify checks that ExecStart's binary exists: point it at the build's
    path = os.path.join(tmp, "seqkv.service")
    with open(path, "w") as f:
        f.write(unit.replace("ExecStart=/usr/local/bin/seqkv ", "ExecStart=%s " % seqkv_bin))
    r = subprocess.run([analyze, "verify", path], capture_output=True, text=True, timeout=60)
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    # systemd-analyze also loads the units ours names (network-online.target,
    # multi-user.target) and may complain about this machine's copies of
    # them: such a line names another unit file, and is shown, not counted.
    # Every other line (ours, or naming no file) fails the test.
    other = re.compile(r"^/(?!%s)\S+\.(service|target|socket|mount|slice):" % re.escape(tmp[1:]))
    for x in lines:
        if other.match(x):
            print("note: about another unit on this machine: " + x)
    ours = [x for x in lines if not other.match(x)]
    for x in ours:
        print("  " + x)
    check(r.returncode == 0 and not ours, "systemd-analyze verify contrib/seqkv.service: silent")

    with open(os.path.join(root, "contrib", "seqkv.conf.example")) as f:
        conf = f.read()
    # the example names no tenant with this test's uid: add one to reach it
    with Server(seqkv_bin, config=conf + "\ntenant packaging uid %d\n" % os.getuid()) as srv:
        check(Server._ping(socket.AF_UNIX, srv.sock),
              "seqkv serve starts with contrib/seqkv.conf.example")


def main():
    version = package_version()
    check(version == header_version(), "python/seqkv/__init__.py __version__ %s is "
          "include/seqkv.h's SEQKV_VERSION_* %s" % (version, header_version()))
    with open(os.path.join(root, "meson.build")) as f:
        mv = re.search(r"version:\s*'([^']+)'", f.read()).group(1)
    check(version == mv, "and meson.build's project version %s" % mv)
    before = snapshot(pydir)
    with tempfile.TemporaryDirectory(prefix="seqkv-pkg-") as tmp:
        python_part(tmp, version)
        unit_part(tmp)
    after = snapshot(pydir)
    changed = sorted(set(before) ^ set(after)) + sorted(
        p for p in set(before) & set(after) if before[p] != after[p])
    # Python caches the bytecode of the backend it imports from the tree
    # (_build/__pycache__/, git-ignored, as every __pycache__ here): not a
    # build product. Shown, and removed when this run made it; any other
    # file written, changed or removed fails.
    pyc = re.compile(r"^_build/__pycache__/seqkv_build\.[\w-]+\.pyc$")
    for p in [p for p in changed if pyc.match(p.replace(os.sep, "/"))]:
        print("note: Python cached the backend's bytecode: python/" + p)
        changed.remove(p)
        if p not in before and os.path.exists(os.path.join(pydir, p)):
            os.remove(os.path.join(pydir, p))
    cache = os.path.join(pydir, "_build", "__pycache__")
    if os.path.isdir(cache) and not os.listdir(cache):
        os.rmdir(cache)
    check(not changed, "the source tree python/ is as it was %s" % (changed or ""))
    if failures:
        print("%d FAILED" % len(failures))
        return 1
    if skipped:
        for s in skipped:
            print("SKIP: " + s)
        return 77
    print("packaging: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
