"""The scale bench's report (bench/scale.py): a table per shape of every
point's figures, the legend that defines each column, and the optional PNG
of log-log panels (matplotlib, imported only when --png asks for it)."""
import math
import sys


def fmt_bytes(n):
    n = float(n)
    for u in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or u == "TiB":
            return ("%.0f %s" if u == "B" else "%.1f %s") % (n, u)
        n /= 1024


def f0(x):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else "%.0f" % x


def f1(x):
    return "-" if x is None else "%.1f" % x


def f2(x):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else "%.2f" % x


MIB = 1 << 20


def cal_up(r):
    """the peak RssAnon during the calibration above RssAnon before it, MiB"""
    return (r["calibration"]["rss_anon_peak"] - r["calibration"]["rss_anon_before"]) / MIB


def cmp_up(r):
    """the peak RssAnon during the compaction above RssAnon before the
    calibration, MiB"""
    return (r["compaction"]["rss_anon_peak"] - r["calibration"]["rss_anon_before"]) / MIB


COLUMNS = [  # (header, width, value of a point)
    ("tokens", 7, lambda r: str(r["tokens"])),
    ("PUT raw", 8, lambda r: f0(r["put_raw"]["mbps"])),
    ("tok/s", 7, lambda r: f0(r["put_raw"]["tokens_per_s"])),
    ("dd", 6, lambda r: f0(r["dd_mbps"])),
    ("/dd", 5, lambda r: f2(r["put_raw"]["mbps"] / r["dd_mbps"])),
    ("rd SET", 6, lambda r: f0(r["redis_set_mbps"])),
    ("PUT ctx", 8, lambda r: f0(r["put_coded"]["mbps"])),
    ("cal s", 7, lambda r: f1(r["calibration"]["seconds"])),
    ("cal +MiB", 8, lambda r: f0(cal_up(r))),
    ("cmp s", 7, lambda r: f1(r["compaction"]["seconds"] or None) if r["compaction"]["seconds"]
     else "<0.05"),
    ("cmp MB/s", 8, lambda r: f0(r["compaction"]["mbps"])),
    ("/enc", 5, lambda r: f2(r["compaction"]["mbps"] / (r["encode_mbps"] * r["server_threads"]))),
    ("cmp +MiB", 8, lambda r: f0(cmp_up(r))),
    ("anon/budget MiB", 15,
     lambda r: "%s/%s" % (f0(r["rss_anon_after"] / MIB), f0(r["cache_budget_bytes"] / MIB))),
    ("GET hot", 8, lambda r: f0(r["get_hot"]["mbps"])),
    ("GET cold", 8, lambda r: f0(r["get_cold"]["mbps"])),
    ("redis", 6, lambda r: f0(r["redis_get_mbps"])),
    ("hot/rd", 6, lambda r: f2(r["get_hot"]["mbps"] / r["redis_get_mbps"])),
    ("cold/rd", 7, lambda r: f2(r["get_cold"]["mbps"] / r["redis_get_mbps"])),
    ("ratio", 6, lambda r: "%.3f" % r["store"]["ratio"]),
    ("disk MiB", 9, lambda r: f1(r["disk_bytes"] / MIB)),
    ("exit s", 6, lambda r: f2(r["exit_seconds"])),
]

LEGEND = """columns: tokens stored N (N/seq-len sequences); PUT raw: MB/s of the KV.PUTs before
the profile is calibrated (stored raw), tok/s the same in tokens; dd: MB/s of dd bs=1M
conv=fdatasync of a sequence's KV size to the same filesystem, one before each of those
PUTs (the disk's write cache in the same state), /dd: PUT raw over it; rd SET: MB/s of redis-server
SETs of one sequence's KV (no persistence; the same client code); PUT ctx: MB/s of the
PUTs after the calibration (coded at ctx); cal s: from the PUT crossing auto-calibrate to
self_calibrations 1; cal +MiB, cmp +MiB: the server's peak RssAnon during the calibration
and the compaction above its RssAnon at the crossing PUT's reply; cmp s, cmp MB/s: the
compaction re-coding what was stored raw (raw bytes / its time; both seen by polls 50 ms
apart, so "<0.05" and no MB/s when one poll saw both); /enc: cmp MB/s over one thread's
ctx encode rate on the shape's KV (seqkv codec bench, once a shape) x the server's threads; anon/budget: RssAnon after both
against the hot tier's budget; GET hot: MB/s of a second KV.GET of each sequence; GET
cold: the server restarted with --cache-bytes 0 (the OS page cache stays warm); redis:
GET MB/s of one sequence's KV from redis-server on a Unix socket, same client code (at
least 64 MiB of GETs); hot/rd, cold/rd: those GETs over redis's; ratio: raw / stored bytes
(INFO store); disk MiB: du -sB1 of the store; exit s: SIGTERM to exit. MB/s = 10^6 B/s.
--json also has the PUTs' time in the server (INFO commandstats), each PUT's time, the
first GETs, the restart, the 50 ms samples, and the server's calibration log lines."""


def print_tables(results, out=sys.stdout):
    by = {}
    for r in results:
        by.setdefault(r["shape"], []).append(r)
    for shape, rows in by.items():
        out.write("\n%s: %s, sequences of %d tokens (%s each)\n"
                  % (shape, rows[0]["shape_desc"], rows[0]["seq_len"],
                     fmt_bytes(rows[0]["token_bytes"] * rows[0]["seq_len"])))
        out.write("  ".join(h.rjust(w) for h, w, _ in COLUMNS) + "\n")
        for r in sorted(rows, key=lambda r: r["tokens"]):
            out.write("  ".join(fn(r).rjust(w) for _, w, fn in COLUMNS) + "\n")
    out.write("\n" + LEGEND + "\n")


MARKS = {"-": "o", "--": "s", ":": "x", "-.": "+"}


def draw_png(results, path, cpu):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("PUT MB/s (raw -o, coded --s, dd :x, redis SET -.+)", [
            (lambda r: r["put_raw"]["mbps"], "-"), (lambda r: r["put_coded"]["mbps"], "--"),
            (lambda r: r["dd_mbps"], ":"), (lambda r: r["redis_set_mbps"], "-.")]),
        ("calibration s", [(lambda r: r["calibration"]["seconds"], "-")]),
        ("compaction s", [(lambda r: r["compaction"]["seconds"], "-")]),
        ("compaction MB/s", [(lambda r: r["compaction"]["mbps"], "-")]),
        ("peak RssAnon above before, MiB (cal -o, cmp --s)", [
            (cal_up, "-"), (cmp_up, "--")]),
        ("RssAnon after, MiB (hot tier budget :x)", [
            (lambda r: r["rss_anon_after"] / MIB, "-"),
            (lambda r: r["cache_budget_bytes"] / MIB, ":")]),
        ("GET MB/s (hot -o, cold --s, redis :x)", [
            (lambda r: r["get_hot"]["mbps"], "-"), (lambda r: r["get_cold"]["mbps"], "--"),
            (lambda r: r["redis_get_mbps"], ":")]),
        ("bytes on disk, MiB", [(lambda r: r["disk_bytes"] / MIB, "-")]),
        ("ratio raw / stored", [(lambda r: r["store"]["ratio"], "-")]),
    ]
    shapes = []
    for r in results:
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
    import matplotlib.ticker
    sizes = sorted({r["tokens"] for r in results})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(3, 3, figsize=(15, 12))
    for ax, (title, lines) in zip(axes.flat, panels):
        for si, shape in enumerate(shapes):
            rows = sorted([r for r in results if r["shape"] == shape], key=lambda r: r["tokens"])
            for li, (fn, style) in enumerate(lines):
                xs, ys = [], []
                for r in rows:
                    try:
                        y = fn(r)
                    except (TypeError, KeyError, ZeroDivisionError):
                        y = None
                    if y is not None and y > 0 and not math.isnan(y):
                        xs.append(r["tokens"])
                        ys.append(y)
                if xs:
                    ax.plot(xs, ys, style, marker=MARKS[style], ms=4,
                            color=colors[si % len(colors)], label=shape if li == 0 else None)
        ax.set_xscale("log")
        ax.set_yscale("linear" if title.startswith("ratio") else "log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(n) for n in sizes], fontsize=7)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("stored tokens", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("seqkv scale bench: %s" % cpu, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
