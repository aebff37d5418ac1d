"""The PEP 517 build backend of the seqkv Python package: standard library
only, so that `pip install ./python` needs nothing from an index (pip's
build isolation installs pyproject.toml's `requires`, which is empty).

It builds a pure-Python wheel of seqkv/ (every .py file under it), an sdist
(this tree: pyproject.toml, _build/, seqkv/), and an editable wheel (a .pth
file naming this tree). The metadata is below; the version is seqkv's
`__version__` (seqkv/__init__.py, read without importing it), which
tests/packaging_test.py keeps equal to include/seqkv.h's SEQKV_VERSION_*.

Nothing is written into the source tree: every hook writes only into the
directory pip hands it."""
import ast
import base64
import gzip
import hashlib
import io
import os
import tarfile
import time
import zipfile

NAME = "seqkv"
SUMMARY = ("Client of the seqkv KV-cache store (RESP on its Unix socket or "
           "loopback TCP) and serving-engine connectors")
REQUIRES_PYTHON = ">=3.8"
LICENSE = "MIT"
EXTRAS = {"numpy": ["numpy"]}  # numpy is optional: get() returns arrays with it

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, NAME)
# entries get this time, not the files' mtimes, so builds are reproducible
# (SOURCE_DATE_EPOCH when set, else 1980-01-01, the oldest a zip can hold)
EPOCH = max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)


def _package_info():
    """(version, docstring) of seqkv/__init__.py, from its syntax tree"""
    with open(os.path.join(PACKAGE, "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "__version__"):
            return ast.literal_eval(node.value), ast.get_docstring(tree) or ""
    raise RuntimeError("seqkv/__init__.py sets no __version__")


def _metadata():
    """The METADATA (and PKG-INFO) text, core metadata 2.1"""
    version, doc = _package_info()
    lines = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + version,
             "Summary: " + SUMMARY, "License: " + LICENSE,
             "Requires-Python: " + REQUIRES_PYTHON]
    for extra, reqs in sorted(EXTRAS.items()):
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
    lines.append("Description-Content-Type: text/plain")
    return "\n".join(lines) + "\n\n" + doc + "\n"


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _package_info()[0])


def _wheel_name():
    return "%s-%s-py3-none-any.whl" % (NAME, _package_info()[0])


def _sources():
    """(path in the tree relative to ROOT, absolute path) of every .py of
    the package, sorted; caches and other files stay out"""
    out = []
    for d, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(d, f)
                out.append((os.path.relpath(p, ROOT).replace(os.sep, "/"), p))
    return out


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _write_wheel(wheel_directory, files):
    """A wheel of files ([(name, bytes)]) plus the dist-info's METADATA,
    WHEEL and RECORD (each entry's sha256 and size); returns its name."""
    di = _dist_info()
    files = list(files) + [
        (di + "/METADATA", _metadata().encode()),
        (di + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: seqkv_build\n"
                         "Root-Is-Purelib: true\nTag: py3-none-any\n").encode())]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append("%s,sha256=%s,%d" % (name, digest.decode(), len(data)))
    record.append(di + "/RECORD,,")
    files.append((di + "/RECORD", ("\n".join(record) + "\n").encode()))
    name = _wheel_name()
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for entry, data in files:
            info = zipfile.ZipInfo(entry, time.gmtime(EPOCH)[:6])
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return name


# -- PEP 517 hooks -----------------------------------------------------------
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    di = os.path.join(metadata_directory, _dist_info())
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(rel, _read(p)) for rel, p in _sources()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel holding only a .pth file that puts this tree on sys.path:
    `import seqkv` then reads the sources here, edits included."""
    return _write_wheel(wheel_directory, [("seqkv_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    """NAME-VERSION.tar.gz: PKG-INFO, pyproject.toml, this backend and the
    package's sources, under NAME-VERSION/"""
    base = "%s-%s" % (NAME, _package_info()[0])
    here = os.path.relpath(os.path.abspath(__file__), ROOT).replace(os.sep, "/")
    files = [("PKG-INFO", _metadata().encode()),
             ("pyproject.toml", _read(os.path.join(ROOT, "pyproject.toml"))),
             (here, _read(os.path.abspath(__file__)))]
    files += [(rel, _read(p)) for rel, p in _sources()]
    name = base + ".tar.gz"
    with open(os.path.join(sdist_directory, name), "wb") as f, \
            gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=EPOCH) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as t:
        for entry, data in files:
            info = tarfile.TarInfo(base + "/" + entry)
            info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
            t.addfile(info, io.BytesIO(data))
    return name
