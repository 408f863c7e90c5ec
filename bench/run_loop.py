#!/usr/bin/env python3
"""Runs bench_loop under each allocator and prints Markdown tables.

Allocators: the C library's own (no preload), kamepoolalloc, and Debian's
mimalloc, jemalloc and tcmalloc where installed, each put under the same
bench_loop binary with LD_PRELOAD.  Runs are interleaved (every allocator
once per size and thread count, then the next repetition) so that a change
in machine load hits all allocators alike; each cell is the median of the
repetitions in millions of malloc+free pairs per second.

A run that crashes, fails or prints no result shows as such in its cell.
"""

import argparse
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

KIB = 1024
MIB = 1024 * KIB
SIZES = [64, KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 8 * MIB, 64 * MIB]
THREADS = [1, 2]

# name -> (soname, Debian package)
PEERS = {
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}
ORDER = ["system", "kamepoolalloc", "mimalloc", "jemalloc", "tcmalloc"]


def human_size(n):
    for unit, div in (("MiB", MIB), ("KiB", KIB)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def parse_size(text):
    m = re.fullmatch(r"(\d+)\s*([kKmMgG]?)(i?B)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError("bad size: %r" % text)
    shift = {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]
    return int(m.group(1)) << shift


def ldconfig_paths():
    """soname -> path for this machine's architecture, from ldconfig -p."""
    out = {}
    for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        path = shutil.which(exe) or (exe if os.path.isabs(exe) and os.access(exe, os.X_OK) else None)
        if not path:
            continue
        try:
            text = subprocess.run([path, "-p"], capture_output=True, text=True,
                                  timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        want64 = sys.maxsize > 2**32
        for line in text.splitlines():
            m = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
            if not m:
                continue
            soname, flags, target = m.groups()
            # Only libraries this process's word size can load.
            if want64 != ("64" in flags):
                continue
            out.setdefault(soname, target)
        break
    return out


def multiarch_dirs():
    dirs = []
    try:
        ma = subprocess.run(["gcc", "-print-multiarch"], capture_output=True,
                            text=True, timeout=20).stdout.strip()
        if ma:
            dirs.append(ma)
    except (OSError, subprocess.SubprocessError):
        pass
    dirs.append("%s-linux-gnu" % platform.machine())
    found = []
    for d in dirs:
        for base in ("/usr/lib", "/lib"):
            found.append(os.path.join(base, d))
    found += ["/usr/lib64", "/usr/lib", "/lib64", "/lib"]
    return found


def find_peer(soname, cache):
    if soname in cache and os.path.exists(cache[soname]):
        return cache[soname]
    for d in multiarch_dirs():
        p = os.path.join(d, soname)
        if os.path.exists(p):
            return p
    return None


def signame(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


def run_one(binary, lib, size, threads, seconds, timeout):
    """Returns (mops, None) or (None, reason)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if lib:
        env["LD_PRELOAD"] = lib
    cmd = [binary, str(size), str(threads), "%g" % seconds]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    # ld.so only warns when a preload cannot be loaded and then runs the
    # program on the C library's malloc: that number would be a lie.
    if "ld.so" in r.stderr and "LD_PRELOAD" in r.stderr:
        return None, "preload failed"
    if r.returncode < 0:
        return None, "crash " + signame(-r.returncode)
    if r.returncode != 0:
        return None, "exit %d" % r.returncode
    m = None
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            m = re.search(r"\bmops=([0-9.]+)", line)
    if not m:
        return None, "no result"
    return float(m.group(1)), None


def fmt(v):
    if v is None:
        return "-"
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    if v >= 0.1:
        return "%.2f" % v
    return "%.3f" % v


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions per cell (default 5, --quick 3)")
    ap.add_argument("--quick", action="store_true",
                    help="3 repetitions of 0.1 s each: a rough table in about a minute")
    ap.add_argument("--only", action="append", default=[],
                    help="run only this allocator (repeatable or comma list): "
                         + ", ".join(ORDER))
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libkamepoolalloc.so"),
                    help="path of libkamepoolalloc.so (default build/libkamepoolalloc.so)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bench", "bench_loop"),
                    help="path of bench_loop (default build/bench/bench_loop)")
    ap.add_argument("--seconds", type=float, default=None,
                    help="wall time of one run (default 0.25, --quick 0.1)")
    ap.add_argument("--sizes", default=None,
                    help="comma list of sizes, e.g. 64,1K,64M (default: the standard set)")
    ap.add_argument("--threads", default=None, help="comma list of thread counts (default 1,2)")
    args = ap.parse_args()

    reps = args.reps if args.reps is not None else (3 if args.quick else 5)
    seconds = args.seconds if args.seconds is not None else (0.1 if args.quick else 0.25)
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else SIZES
    threads_list = [int(t) for t in args.threads.split(",")] if args.threads else THREADS
    if reps < 1 or seconds <= 0:
        ap.error("--reps and --seconds must be positive")

    binary = os.path.abspath(args.bin)
    if not os.access(binary, os.X_OK):
        sys.exit("run_loop.py: %s is not built (cmake --build build)" % binary)

    only = set()
    for item in args.only:
        only.update(x.strip() for x in item.split(",") if x.strip())
    unknown = only - set(ORDER)
    if unknown:
        ap.error("unknown allocator(s): %s (choose from %s)"
                 % (", ".join(sorted(unknown)), ", ".join(ORDER)))

    libs = {}      # name -> preload path ("" for none)
    notes = []
    cache = ldconfig_paths()
    for name in ORDER:
        if only and name not in only:
            continue
        if name == "system":
            libs[name] = ""
        elif name == "kamepoolalloc":
            lib = os.path.abspath(args.lib)
            if not os.path.exists(lib):
                sys.exit("run_loop.py: %s not found (cmake --build build, or pass --lib)" % lib)
            libs[name] = lib
        else:
            soname, pkg = PEERS[name]
            path = find_peer(soname, cache)
            if path is None:
                notes.append("%s: missing (%s not found); install it with: "
                             "apt-get install %s" % (name, soname, pkg))
                continue
            libs[name] = path
    if not libs:
        sys.exit("run_loop.py: no allocator to run")

    names = [n for n in ORDER if n in libs]
    timeout = seconds * 20 + 30
    # (size, threads, name) -> list of values, and list of failure reasons
    values = {}
    failures = {}
    total = reps * len(sizes) * len(threads_list) * len(names)
    done = 0
    t0 = time.monotonic()
    for rep in range(reps):
        for threads in threads_list:
            for size in sizes:
                for name in names:
                    v, why = run_one(binary, libs[name], size, threads, seconds, timeout)
                    key = (size, threads, name)
                    if why:
                        failures.setdefault(key, []).append(why)
                    else:
                        values.setdefault(key, []).append(v)
                    done += 1
                    if sys.stderr.isatty():
                        sys.stderr.write("\r%d/%d runs, %.0f s" % (done, total, time.monotonic() - t0))
                        sys.stderr.flush()
    if sys.stderr.isatty():
        sys.stderr.write("\n")

    def cell(size, threads, name):
        key = (size, threads, name)
        if key in failures:
            reasons = failures[key]
            return None, "%s (%d/%d runs)" % (reasons[0].upper(), len(reasons), reps)
        return statistics.median(values[key]), None

    print("# bench_loop: malloc(size) + write 1 byte + free, median M ops/s over %d runs of %g s"
          % (reps, seconds))
    print()
    print("machine: %s, %d cpus; ran %d runs in %.0f s" % (
        platform.machine(), os.cpu_count() or 0, total, time.monotonic() - t0))
    for name in names:
        print("- %s: %s" % (name, libs[name] or "(no preload)"))
    for n in notes:
        print("- %s" % n)
    ratio_cols = []
    if "kamepoolalloc" in names and "system" in names:
        ratio_cols.append("system")
    if "kamepoolalloc" in names and "mimalloc" in names:
        ratio_cols.append("mimalloc")
    for threads in threads_list:
        print()
        print("## %d thread%s" % (threads, "" if threads == 1 else "s"))
        print()
        head = ["size"] + names + ["kame/%s" % r for r in ratio_cols]
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        for size in sizes:
            row = [human_size(size)]
            med = {}
            for name in names:
                v, bad = cell(size, threads, name)
                med[name] = v
                row.append(bad if bad else fmt(v))
            for r in ratio_cols:
                a, b = med.get("kamepoolalloc"), med.get(r)
                row.append("%.2f" % (a / b) if a is not None and b else "-")
            print("| " + " | ".join(row) + " |")
    if failures:
        print()
        print("Some runs failed; see the cells marked above.")
    # A peer that crashes is a fact about the peer; ours failing is an error.
    return 1 if any(k[2] == "kamepoolalloc" for k in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
