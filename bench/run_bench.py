#!/usr/bin/env python3
"""The side-by-side benchmark: every workload under every allocator.

Allocators: the C library's own (no preload), kamepoolalloc, and Debian's
mimalloc, jemalloc and tcmalloc where installed, each put under the same
unmodified program with LD_PRELOAD.  A peer that is not installed is
reported as missing, with the apt-get line that adds it.

Runs are interleaved: every allocator once for a case, then the next case,
and the whole sweep again for each repetition, so a change in the machine's
load falls on all allocators alike.  Each cell is the median of the
repetitions, with the min-max spread; every run's figure, wall time, peak
RSS (from wait4's rusage) and exit status go to runs.csv.  A crash, a run
past the time limit, a failed self-check or a NULL from malloc shows in the
tables as such, never as a figure.

Output (in --out, default build/bench-results): report.md (the tables),
runs.csv (every run), summary.csv (the medians) and PNG charts drawn with
gnuplot.  The report is also printed.

  run_bench.py                  quick mode (3 repetitions, short runs)
  run_bench.py --full           5 repetitions at full length
  run_bench.py --ab A.so B.so   two builds of the library, interleaved
"""

import argparse
import csv
import datetime
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

KIB = 1024
MIB = 1024 * KIB

# name -> (soname, Debian package)
PEERS = {
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}
ORDER = ["system", "kamepoolalloc", "mimalloc", "jemalloc", "tcmalloc"]
OURS = "kamepoolalloc"

EXIT_NULL, EXIT_USAGE, EXIT_CHECK = 1, 2, 3


# ---------------------------------------------------------------- workloads

class Metric:
    """One figure a workload reports: KEY in its RESULT line, or one of
    the runner's own measurements of the whole process ("wall_s",
    "cpu_s"), shown as LABEL in UNIT.  COLUMN names it in the CSV files
    (default KEY); docs/benchmarks.md lists every column."""

    def __init__(self, key, label, unit, higher_better, column=None):
        self.key, self.label, self.unit = key, label, unit
        self.higher_better = higher_better
        self.column = column or key


class Case:
    """One point of a workload: its parameters, the x value it is drawn
    at, and the series (line of a chart) it belongs to."""

    def __init__(self, label, params, x=None, series=""):
        self.label, self.params, self.x, self.series = label, params, x, series


class Workload:
    def __init__(self, name, title, what, primary, cases, command, xaxis=None,
                 extra=(), real=False, bars=()):
        self.name, self.title, self.what = name, title, what
        self.primary = primary          # the figure the tables and ratios use
        self.extra = list(extra)        # further metrics shown as columns
        self.cases = cases
        self.command = command          # (case, ctx) -> argv
        self.xaxis = xaxis              # "size", "threads" or None (bars)
        self.real = real
        self.bars = list(bars)          # figures drawn as clusters of bars


def human_size(n, short=False):
    """"64 KiB", or "64K" for chart ticks."""
    for unit, div in (("G", 1 << 30), ("M", MIB), ("K", KIB)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit) if short else "%d %siB" % (n // div, unit)
    return "%dB" % n if short else "%d B" % n


def thread_cases(counts, extra_label="", params=None, series=""):
    out = []
    for t in counts:
        p = dict(params or {})
        p["threads"] = t
        label = "%s%d thread%s" % (extra_label, t, "" if t == 1 else "s")
        out.append(Case(label, p, x=t, series=series))
    return out


def build_workloads(ctx):
    """ctx: bin_dir, quick (bool), real_dir.  Work per run is set here:
    quick mode aims at about 0.1-0.3 s a run on the system allocator,
    full mode at about three times that."""
    q = ctx["quick"]
    b = ctx["bin_dir"]

    def exe(name):
        return os.path.join(b, name)

    threads = [1, 2, 8]
    wl = []

    # Besides a point per tier, the band 32 KiB-64 MiB (the largest bucket
    # class, the dedicated and large tiers, the smaller huge blocks) gets
    # sizes on both sides of each tier boundary and sizes that are not
    # powers of two.  Quick mode keeps every size and thread count and
    # shortens the runs instead.
    loop_sizes = [64, KIB, 16 * KIB, 32 * KIB, 64 * KIB, 96 * KIB, 256 * KIB, MIB, 3 * MIB,
                  4 * MIB, 8 * MIB, 12 * MIB, 24 * MIB, 48 * MIB, 64 * MIB]
    loop_cases = []
    for t in threads:
        for s in loop_sizes:
            loop_cases.append(Case("%s, %d thread%s" % (human_size(s), t, "" if t == 1 else "s"),
                                   {"size": s, "threads": t}, x=s,
                                   series="%d thread%s" % (t, "" if t == 1 else "s")))
    loop_seconds = 0.05 if q else 0.25
    wl.append(Workload(
        "loop", "loop: malloc, write, free in a tight loop",
        "Each thread repeats malloc(size), a stamp in the first word, a check "
        "of it, free, for %g s; the figure is millions of pairs per second."
        % loop_seconds,
        Metric("mops", "M pairs/s", "M/s", True), loop_cases,
        lambda c, _: [exe("bench_loop"), str(c.params["size"]), str(c.params["threads"]),
                      "%g" % loop_seconds],
        xaxis="size"))

    # Blocks per producer; glibc hands 1 KiB blocks off ten times slower
    # than 64 B ones, so they get fewer.
    handoff_n = {64: "1M" if q else "6M", KIB: "256K" if q else "1M"}
    handoff_cases = []
    for s in (64, KIB):
        handoff_cases += thread_cases(threads, "%s, " % human_size(s), {"size": s},
                                      series=human_size(s))
    for c in handoff_cases:
        c.label = c.label.replace("thread", "pair")
    wl.append(Workload(
        "handoff", "handoff: producers allocate, consumers free",
        "N producer threads allocate blocks and pass them through bounded "
        "queues to N consumer threads that check and free them (2N threads); "
        "the figure is millions of frees per second.",
        Metric("mfrees", "M frees/s", "M/s", True), handoff_cases,
        lambda c, _: [exe("bench_handoff"), "-t", str(c.params["threads"]),
                      "-s", str(c.params["size"]), "-n", handoff_n[c.params["size"]]],
        xaxis="threads"))

    churn_n = "512K" if q else "2M"
    wl.append(Workload(
        "churn", "churn: a server's shared table, workers retired and replaced",
        "Worker threads replace random blocks of a shared table (free the old "
        "block, allocate one of a new random size); each worker retires after "
        "a share of the work and a successor takes over, freeing what it left; "
        "the figure is millions of replacements per second.",
        Metric("mops", "M ops/s", "M/s", True), thread_cases(threads),
        lambda c, _: [exe("bench_churn"), "-t", str(c.params["threads"]), "-n", churn_n],
        xaxis="threads"))

    mixed_n = "1M" if q else "4M"
    wl.append(Workload(
        "mixed", "mixed: long-lived threads, sizes 8 B-16 KB, 10 % remote frees",
        "Each thread replaces random blocks of its own working set with blocks "
        "of random size from 8 B to 16 KB; 10 % of the frees are sent to "
        "another thread.  The figure is millions of malloc+free pairs per "
        "CPU-second (user+system), since with 8 threads on 2 cores wall time "
        "mostly measures the scheduler.",
        Metric("mops_per_cpu_s", "M ops/CPU-s", "M/s", True), thread_cases(threads),
        lambda c, _: [exe("bench_mixed"), "-t", str(c.params["threads"]), "-n", mixed_n],
        xaxis="threads", extra=[Metric("cpu_seconds", "CPU s", "s", False, column="phase_cpu_s")]))

    migrate_n = "12M" if q else "40M"
    wl.append(Workload(
        "migrate", "migrate: objects passed between threads at random",
        "Objects hop between threads at random; at each hop the holder checks "
        "the object and a quarter of the time frees it and allocates a "
        "replacement, wherever it happens to be.  The figure is the wall time "
        "of a fixed number of hops.",
        Metric("seconds", "wall s", "s", False, column="phase_wall_s"), thread_cases(threads),
        lambda c, _: [exe("bench_migrate"), "-t", str(c.params["threads"]), "-n", migrate_n],
        xaxis="threads", extra=[Metric("mhops", "M hops/s", "M/s", True)]))

    live, full, end, trim, freed = (
        Metric(key, label, "MiB", False) for key, label in (
            ("live_mib", "live MiB"), ("rss_full_mib", "RSS full MiB"),
            ("rss_end_mib", "RSS at end MiB"), ("rss_trim_mib", "RSS after trim MiB"),
            ("rss_freed_mib", "RSS all freed MiB")))
    frag_n = ["-n", "2M"] if q else []   # full: 256 MiB of 48-byte blocks
    wl.append(Workload(
        "frag", "frag: fragmentation and memory return",
        "One thread allocates many blocks of one size, frees a random 90 %, "
        "then allocates blocks of another size until it holds as many bytes "
        "as before the frees.  The figure is the resident set after that "
        "(less is better); the resident set after malloc_trim(0) shows what "
        "the allocator gives back when asked.",
        end, [Case("1 thread", {"threads": 1}, x=1)],
        lambda c, _: [exe("bench_frag")] + frag_n,
        extra=[live, full, trim, freed], bars=[live, full, end, trim, freed]))

    fs_rounds = "200K" if q else "2M"
    fs_cases = []
    for mode in ("active", "passive"):
        fs_cases += thread_cases(threads, "%s, " % mode, {"mode": mode}, series=mode)
    wl.append(Workload(
        "false_sharing", "false sharing: threads writing small blocks",
        "Active: each thread allocates its own 8-byte blocks and writes them "
        "hard.  Passive: one thread allocates a block per thread, back to "
        "back, and hands them out; each thread writes its block, frees it and "
        "goes on allocating.  An allocator that puts blocks used by different "
        "threads on one cache line makes the lines bounce between cores; "
        "\"shared lines\" counts pairs of threads whose blocks share a 64-byte "
        "line: at the first block, and the most at any sampled round.  The figure is millions of writes per second.",
        Metric("mwrites", "M writes/s", "M/s", True), fs_cases,
        lambda c, _: [exe("bench_false_sharing"), "-t", str(c.params["threads"]),
                      "-m", c.params["mode"], "-n", fs_rounds],
        xaxis="threads", extra=[Metric("shared_lines", "shared lines (first)", "", False),
                                Metric("shared_lines_max", "shared lines (max)", "", False)]))

    wl.append(cxx_workload(ctx))
    wl += band_workloads(ctx, exe, threads)
    wl.append(real_workload(ctx))
    return wl


def cxx_workload(ctx):
    """C++ allocation: operator new/delete through containers under each
    allocator, and one std::pmr map over different memory resources."""
    cases = [("unique_ptr", "unique_ptr churn, 64 B"), ("map", "std::map insert/erase"),
             ("unordered_map", "std::unordered_map insert/erase"),
             ("pmr-pool-resource", "pmr map, kame::pool_resource"),
             ("pmr-unsynchronized", "pmr map, unsynchronized_pool_resource"),
             ("pmr-monotonic", "pmr map, monotonic_buffer_resource"),
             ("pmr-new-delete", "pmr map, new_delete_resource")]
    # About 0.1-0.3 s a run on the system allocator in quick mode.
    q = ctx["quick"]
    ops = {"unique_ptr": "4M" if q else "32M", "unordered_map": "1M" if q else "8M"}
    exe = os.path.join(ctx["bin_dir"], "bench_cxx")
    return Workload(
        "cxx", "C++: operator new/delete through containers, and std::pmr resources",
        "A vector of 16K unique_ptr to 64-byte objects, each operation replacing a "
        "random one (new, sized delete); std::map and std::unordered_map of about "
        "32K keys, each operation inserting a random key and erasing another; the "
        "same map as std::pmr::map over kame::pool_resource, over the standard "
        "unsynchronized_pool_resource and monotonic_buffer_resource (whose upstream "
        "is the allocator under test) and over new_delete_resource.  The figure is "
        "millions of operations per second.",
        Metric("mops", "M ops/s", "M/s", True),
        [Case(label, {"case": name}) for name, label in cases],
        lambda c, _: [exe, c.params["case"], "-n", ops.get(c.params["case"], "256K" if q else "2M")])


def band_workloads(ctx, exe, threads):
    """The workloads aimed at the 32 KiB-64 MiB band and at cross-thread
    frees of small blocks: large_handoff, rotate, server, idle_owner."""
    q = ctx["quick"]
    wl = []

    lh_seconds = 0.1 if q else 0.3
    lh_cases = [Case("%s, 1 pair" % human_size(s), {"size": s}, x=s, series="1 pair")
                for s in (256 * KIB, MIB, 8 * MIB)]
    wl.append(Workload(
        "large_handoff", "large handoff: one thread allocates big blocks, another frees them",
        "A producer thread allocates blocks of 256 KiB, 1 MiB or 8 MiB, writes a word in each "
        "page and passes them through a ring of 8 to a consumer thread on the other core, "
        "which checks and frees them, for %g s; the figure is thousands of blocks allocated "
        "and freed per second." % lh_seconds,
        Metric("kpairs", "k pairs/s", "k/s", True), lh_cases,
        lambda c, _: [exe("bench_large_handoff"), "-s", str(c.params["size"]), "%g" % lh_seconds],
        xaxis="size", extra=[Metric("gib_s", "GiB/s", "GiB/s", True)]))

    # Same requests for every allocator: a fixed number of steps.
    rot_steps = "60" if q else "400"
    wl.append(Workload(
        "rotate", "rotate: a working set of big blocks of random sizes",
        "Threads share a table of 16 live blocks of random sizes from 32 KiB to 64 MiB "
        "(log-uniform); each step frees a random one and allocates a new random size, "
        "writing a word in each page.  The figure is steps per second over %s steps; "
        "\"held\" is peak RSS minus the most bytes ever live, what the allocator kept beside "
        "the live set." % rot_steps,
        Metric("steps_per_s", "steps/s", "/s", True), thread_cases(threads),
        lambda c, _: [exe("bench_rotate"), "-t", str(c.params["threads"]), "-n", rot_steps],
        xaxis="threads",
        # The cap columns fill in by themselves once the library exports
        # kame_pool_get_large_cache_cap (bench_rotate looks it up by name);
        # until then, and for the peers, they show "-".  "over cap" is
        # peak RSS - (live max + cap): above 0, the allocator held more
        # than its cache cap allows.
        extra=[Metric("live_max_mib", "live max MiB", "MiB", False),
               Metric("held_mib", "held MiB", "MiB", False),
               Metric("rss_freed_mib", "RSS all freed MiB", "MiB", False),
               Metric("cache_cap_mib", "cache cap MiB", "MiB", False),
               Metric("over_cap_mib", "over cap MiB", "MiB", False)]))

    server_n = "256K" if q else "2M"
    wl.append(Workload(
        "server", "server: requests on workers replaced over time, a shared cache",
        "Each request allocates 4-32 objects of 8 B-2 KiB (mostly small), passes 1 in 8 to "
        "another worker's mailbox, puts 1 in 32 in a shared cache of 128K entries (evicting a "
        "random one) and frees the rest; workers retire and are replaced.  The figure is "
        "millions of objects allocated (and freed) per second over %s requests." % server_n,
        Metric("mops", "M objects/s", "M/s", True), thread_cases(threads),
        lambda c, _: [exe("bench_server"), "-t", str(c.params["threads"]), "-n", server_n],
        xaxis="threads", extra=[Metric("kreqs", "k requests/s", "k/s", True)]))

    idle_mib = "128" if q else "512"
    live, full, freed, trim_b, trim_a, gone = (
        Metric(key, label, "MiB", False) for key, label in (
            ("live_mib", "live MiB"), ("rss_full_mib", "RSS full MiB"),
            ("rss_freed_mib", "RSS freed MiB"), ("rss_trim_other_mib", "RSS B trim MiB"),
            ("rss_trim_owner_mib", "RSS A trim MiB"), ("rss_exit_mib", "RSS A exit MiB")))
    wl.append(Workload(
        "idle_owner", "idle owner: one thread's small blocks freed by another while it sleeps",
        "Thread A allocates %s MiB of 32-256 B blocks and hands them to thread B, which frees "
        "them all while A sleeps; then B calls malloc_trim(0), then A does, then A exits.  "
        "The figure is the resident set after the frees and B's trim (less is better); the "
        "other columns are the resident set after each phase." % idle_mib,
        trim_b, [Case("2 threads", {"threads": 2}, x=2)],
        lambda c, _: [exe("bench_idle_owner"), "-m", idle_mib],
        extra=[live, full, freed, trim_a, gone], bars=[live, full, freed, trim_b, trim_a, gone]))
    return wl


def real_workload(ctx):
    """python3, gcc and sqlite3 doing the same work as in the tests, timed
    whole; each run's output must match the system allocator's."""
    d = ctx["real_dir"]
    q = ctx["quick"]
    py_scale = "0.3" if q else "1.0"
    cases = [
        Case("python3", {"program": "python3"}),
        Case("gcc -O2", {"program": "gcc"}),
        Case("sqlite3", {"program": "sqlite3"}),
    ]
    scripts = {
        # PYTHONMALLOC=malloc sends even small objects to malloc; with
        # pymalloc most of them never reach the allocator under test.
        "python3": 'PYTHONHASHSEED=0 PYTHONMALLOC=malloc exec python3 -S "$1/alloc_heavy.py" %s'
                   % py_scale,
        "gcc": 'gcc -O2 -frandom-seed=kp -c "$2/gen.c" -o "$2/gen.o" && cksum < "$2/gen.o"',
        "sqlite3": 'rm -f "$2/db.sqlite" && exec sqlite3 -batch -bail "$2/db.sqlite" ".read $2/q.sql"',
    }

    def command(c, _):
        return ["sh", "-c", scripts[c.params["program"]], "sh",
                os.path.join(ROOT, "tests"), d]

    return Workload(
        "real", "real programs: python3, gcc, sqlite3",
        "An allocation-heavy python3 script (PYTHONMALLOC=malloc), gcc -O2 "
        "compiling a generated file of 300 functions, and sqlite3 building "
        "and querying a 200k-row table, each timed whole (start-up "
        "included); each run's output must equal the system allocator's.",
        Metric("wall_s", "wall s", "s", False), cases, command, real=True,
        extra=[Metric("cpu_s", "CPU s", "s", False)])


# ---------------------------------------------------------------- allocators

def ldconfig_paths():
    """soname -> path for this machine's word size, from ldconfig -p."""
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
            if m and want64 == ("64" in m.group(2)):
                out.setdefault(m.group(1), m.group(3))
        break
    return out


def find_peer(soname, cache):
    if soname in cache and os.path.exists(cache[soname]):
        return cache[soname]
    dirs = ["/usr/lib/%s-linux-gnu" % platform.machine(), "/lib/%s-linux-gnu" % platform.machine(),
            "/usr/lib64", "/usr/lib", "/lib64", "/lib"]
    for d in dirs:
        p = os.path.join(d, soname)
        if os.path.exists(p):
            return p
    return None


def package_version(pkg):
    try:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                           text=True, timeout=20)
        return r.stdout.strip() if r.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


# ---------------------------------------------------------------- running

class Run:
    def __init__(self, status, figures, wall, maxrss_kib, detail=""):
        self.status = status            # "ok" or a short reason
        self.figures = figures          # key -> float
        self.wall = wall
        self.maxrss_kib = maxrss_kib
        self.detail = detail


def signame(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


# Settings that tune an allocator from the environment; a run inherits
# none of them, so every allocator runs as it ships.
TUNING_ENV = re.compile(r"^(MALLOC_|MIMALLOC_|TCMALLOC_|JEMALLOC_|JE_MALLOC_|KAME_POOL_)|"
                        r"^(MALLOC_CONF|GLIBC_TUNABLES)$")


def clean_env():
    env = {k: v for k, v in os.environ.items() if not TUNING_ENV.match(k)}
    env.pop("LD_PRELOAD", None)
    env["LC_ALL"] = "C"
    return env


def run_process(argv, lib, timeout, ctx, cwd=None):
    """Runs argv under LIB (none if empty) through bench_spawn, in its own
    process group; returns (wait status or None, peak RSS KiB, CPU
    seconds, wall seconds, timed out, stdout, stderr).  The status and
    peak RSS are those bench_spawn got from wait4: the program's own and
    those of the children it waited for."""
    ctx["run_serial"] = ctx.get("run_serial", 0) + 1
    report = os.path.join(ctx["scratch"], "rusage.%d" % ctx["run_serial"])
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen([ctx["spawn"], report, lib or ""] + argv, env=clean_env(),
                                stdout=out, stderr=err, cwd=cwd, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        killed = threading.Event()

        def kill():
            killed.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
            # Whatever the program left in its group goes too, and all of
            # it when the runner itself is interrupted.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                proc.wait(timeout=10)       # reap it even when interrupted
            except subprocess.TimeoutExpired:
                pass
        wall = time.monotonic() - start
        status, maxrss, cpu = None, 0, None
        try:
            with open(report) as f:
                m = re.match(r"status=(-?\d+) maxrss_kib=(\d+) cpu_s=([0-9.]+)", f.read())
            if m:
                status, maxrss, cpu = int(m.group(1)), int(m.group(2)), float(m.group(3))
            os.unlink(report)
        except OSError:
            pass
        # The timer may fire just after the program finished: only a run
        # that the kill actually ended counts as timed out.
        timed_out = killed.is_set() and (
            status is None or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL))
        out.seek(0)
        err.seek(0)
        return (status, maxrss, cpu, wall, timed_out,
                out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def parse_result(stdout):
    line = None
    for ln in stdout.splitlines():
        if ln.startswith("RESULT "):
            line = ln
    if line is None:
        return None
    figures = {}
    for key, val in re.findall(r"([a-z_][a-z0-9_]*)=(\S+)", line):
        try:
            figures[key] = float(val)
        except ValueError:
            pass
    return figures


def execute(workload, case, lib, ctx, timeout):
    argv = workload.command(case, ctx)
    status, maxrss, cpu, wall, timed_out, out, err = run_process(
        argv, lib, timeout, ctx, cwd=ctx["real_dir"] if workload.real else None)
    tail = err.strip().splitlines()[-1] if err.strip() else ""
    if timed_out:
        return Run("TIMEOUT", {}, wall, maxrss, "killed after %g s" % timeout)
    if status is None:
        return Run("LAUNCH FAILED", {}, wall, maxrss, tail)
    code = os.waitstatus_to_exitcode(status)
    # ld.so only warns when a preload cannot be loaded, then runs the
    # program on the C library's malloc: such a figure would be a lie.
    if lib and "LD_PRELOAD" in err and "cannot be preloaded" in err:
        return Run("PRELOAD FAILED", {}, wall, maxrss, tail)
    if code < 0:
        return Run("CRASH " + signame(-code), {}, wall, maxrss, tail)
    if workload.real:
        if code != 0:
            return Run("EXIT %d" % code, {}, wall, maxrss, tail)
        ref = ctx["real_ref"].get(case.label)
        if ref is not None and out != ref:
            return Run("WRONG OUTPUT", {}, wall, maxrss, "output differs from the system allocator's")
        return Run("ok", {"wall_s": wall, "cpu_s": cpu}, wall, maxrss)
    if code == EXIT_CHECK:
        return Run("SELF-CHECK FAILED", {}, wall, maxrss, tail)
    if code == EXIT_NULL:
        return Run("MALLOC NULL", {}, wall, maxrss, tail)
    if code != 0:
        return Run("EXIT %d" % code, {}, wall, maxrss, tail)
    figures = parse_result(out)
    if not figures or workload.primary.key not in figures:
        return Run("NO RESULT", {}, wall, maxrss, tail)
    figures["cpu_s"] = cpu
    return Run("ok", figures, wall, maxrss)


def prepare_real(ctx, workload, timeout):
    """Generates the inputs and records the system allocator's output of
    each program, against which every timed run is checked."""
    d = ctx["real_dir"]
    # Quick mode gives gcc half the functions and sqlite3 half the rows.
    funcs, rows = ("150", "100000") if ctx["quick"] else ("300", "200000")
    r = subprocess.run(["sh", "-c", '. "$1/real_inputs.sh" && gen_c "$2/gen.c" "$3" && '
                        'gen_sql "$2/q.sql" "$4"',
                        "sh", os.path.join(ROOT, "tests"), d, funcs, rows],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("run_bench.py: generating the real-program inputs failed: " + r.stderr)
    missing = [p for p in ("python3", "gcc", "sqlite3") if not shutil.which(p)]
    if missing:
        sys.exit("run_bench.py: the real-program workload needs %s; install with: "
                 "apt-get install %s" % (", ".join(missing), " ".join(missing)))
    ctx["real_ref"] = {}
    for case in workload.cases:
        status, _, _, _, timed_out, out, err = run_process(workload.command(case, ctx), "", timeout,
                                                        ctx, cwd=d)
        if timed_out or status is None or os.waitstatus_to_exitcode(status) != 0:
            sys.exit("run_bench.py: %s failed on the system allocator: %s"
                     % (case.label, err.strip()[-500:]))
        ctx["real_ref"][case.label] = out


# ---------------------------------------------------------------- progress

def fmt_duration(seconds):
    seconds = int(round(seconds))
    if seconds >= 3600:
        return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)
    return "%d:%02d" % (seconds // 60, seconds % 60)


class Progress:
    """Tells how far the runs are: the workload, case and allocator
    running, runs done of the total, time spent and an estimate of the
    time left.  "bar" redraws one line in place (a terminal); "lines"
    prints a plain line when a workload starts and at least every
    LINE_EVERY seconds (a CI log); "none" says nothing.

    A run's expected time is what the same case and allocator took in an
    earlier repetition, else the mean of the runs so far of the same case,
    else of the same workload, else of all; the estimate is the sum over
    the runs left, so it firms up as the first repetition goes on."""

    LINE_EVERY = 15.0

    def __init__(self, plan, mode, stream=None):
        self.plan = plan                # [(repetition, workload, case, allocator)]
        self.mode = mode
        self.stream = stream or sys.stderr
        self.took = {}                  # key -> [seconds]
        self.t0 = time.monotonic()
        self.last_line = None
        self.last_group = None
        self.width = shutil.get_terminal_size((100, 24)).columns

    @staticmethod
    def keys(step):
        _, wl, case, name = step
        return [(wl.name, case.label, name), (wl.name, case.label), (wl.name,), ()]

    def expect(self, step):
        for k in self.keys(step):
            if k in self.took:
                times = self.took[k]
                return sum(times) / len(times)
        return None

    def left(self, i):
        """Seconds expected for the runs from index I on, or None."""
        if not self.took:
            return None
        return sum(self.expect(step) for step in self.plan[i:])

    def start(self, i):
        if self.mode == "none":
            return
        rep, wl, case, name = self.plan[i]
        now = time.monotonic()
        left = self.left(i)
        eta = "estimating the time left" if left is None else "about %s left" % fmt_duration(left)
        what = "%s, %s, %s" % (wl.name, case.label, name)
        if self.mode == "bar":
            frac = i / len(self.plan)
            bar = "#" * int(frac * 20)
            line = "[%-20s] %d/%d  %s  %s, %s" % (bar, i, len(self.plan), what,
                                                fmt_duration(now - self.t0), eta)
            self.stream.write("\r\033[K" + line[:max(self.width - 1, 20)])
            self.stream.flush()
            return
        group = (rep, wl.name)
        if group != self.last_group or now - self.last_line >= self.LINE_EVERY:
            self.last_group, self.last_line = group, now
            reps = self.plan[-1][0] + 1
            self.stream.write("run_bench.py: run %d/%d (repetition %d/%d): %s; %s spent, %s\n" % (
                i + 1, len(self.plan), rep + 1, reps, what, fmt_duration(now - self.t0), eta))
            self.stream.flush()

    def finish(self, i, seconds):
        for k in self.keys(self.plan[i]):
            self.took.setdefault(k, []).append(seconds)

    def close(self):
        if self.mode == "none":
            return
        if self.mode == "bar":
            self.stream.write("\r\033[K")
        spent = fmt_duration(time.monotonic() - self.t0)
        self.stream.write("run_bench.py: %d runs in %s\n" % (len(self.plan), spent))
        self.stream.flush()


# ---------------------------------------------------------------- reporting

def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    if a >= 1:
        return "%.2f" % v
    if a >= 0.01:
        return "%.3f" % v
    if a == 0:
        return "0"
    return "%.2g" % v


def fmt_ratio(r):
    if r is None:
        return "-"
    if r >= 10:
        return "%.0f×" % r
    return "%.2f×" % r


class Cell:
    """The runs of one allocator on one case."""

    def __init__(self):
        self.runs = []

    def ok_runs(self):
        return [r for r in self.runs if r.status == "ok"]

    def failure(self):
        """"CRASH SIGSEGV (1/5), TIMEOUT (1/5)", or None if all runs passed."""
        kinds = {}
        for r in self.runs:
            if r.status != "ok":
                kinds[r.status] = kinds.get(r.status, 0) + 1
        if not kinds:
            return None
        return ", ".join("%s (%d/%d)" % (k, n, len(self.runs)) for k, n in kinds.items())

    def median(self, key):
        vals = [r.figures[key] for r in self.ok_runs() if key in r.figures]
        return statistics.median(vals) if vals else None

    def spread(self, key):
        vals = [r.figures[key] for r in self.ok_runs() if key in r.figures]
        return (min(vals), max(vals)) if vals else None

    # Like value(): nothing from a cell in which any run failed.
    def median_rss_mib(self):
        vals = [r.maxrss_kib / 1024.0 for r in self.ok_runs()]
        return statistics.median(vals) if vals and not self.failure() else None

    def median_wall(self):
        vals = [r.wall for r in self.ok_runs()]
        return statistics.median(vals) if vals and not self.failure() else None

    def value(self, key):
        """The median, or None when any run failed: a figure from the runs
        that happened to survive would flatter a crashing allocator."""
        return None if self.failure() else self.median(key)

    def value_range(self, key):
        """(median, min, max), or None when any run failed."""
        v = self.value(key)
        return None if v is None else (v,) + self.spread(key)

    def rss_range_mib(self):
        v = self.median_rss_mib()
        vals = [r.maxrss_kib / 1024.0 for r in self.ok_runs()]
        return None if v is None else (v, min(vals), max(vals))


def better_ratio(metric, mine, ref):
    """How many times better MINE is than REF (>1: better), whichever way
    the metric points."""
    if mine is None or ref is None or mine <= 0 or ref <= 0:
        return None
    return mine / ref if metric.higher_better else ref / mine


def render(workloads, names, refs, cells, meta, reps, ab):
    lines = []
    w = lines.append
    w("# kamepoolalloc benchmarks")
    w("")
    for k, v in meta:
        w("- %s: %s" % (k, v))
    w("")
    w("Each figure is the median of %d interleaved runs; the spread is the "
      "lowest and highest run.  Ratios say how many times better the row's "
      "allocator is than the reference (>1: better, whether the figure is a "
      "rate, a time or a size).  Peak RSS is the largest resident set of the "
      "process (and of the processes it waited for), from wait4." % reps)
    summary = summarise(workloads, names, refs, cells, ab)
    if summary:
        w("")
        w(summary)
    for wl in workloads:
        w("")
        w("## %s" % wl.title)
        w("")
        w(wl.what)
        w("")
        m = wl.primary
        head = ["case", "allocator", "%s (median)" % m.label, "spread"]
        head += ["vs %s" % r for r in refs]
        head += [x.label for x in wl.extra]
        if not wl.real:
            head.append("wall s")
        head.append("peak RSS MiB")
        w("| " + " | ".join(head) + " |")
        w("|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|")
        for case in wl.cases:
            for name in names:
                cell = cells[(wl.name, case.label, name)]
                bad = cell.failure()
                row = [case.label, name]
                if bad:
                    row.append("**%s**" % bad)
                    row.append("-")
                else:
                    row.append(fmt(cell.median(m.key)))
                    sp = cell.spread(m.key)
                    row.append("%s–%s" % (fmt(sp[0]), fmt(sp[1])) if sp else "-")
                for r in refs:
                    ref = cells[(wl.name, case.label, r)].value(m.key)
                    row.append(fmt_ratio(better_ratio(m, cell.value(m.key), ref)))
                for x in wl.extra:
                    row.append(fmt(cell.value(x.key)))
                if not wl.real:
                    row.append(fmt(cell.median_wall()))
                row.append(fmt(cell.median_rss_mib()))
                w("| " + " | ".join(row) + " |")
        notes = []
        for case in wl.cases:
            for name in names:
                cell = cells[(wl.name, case.label, name)]
                for r in cell.runs:
                    if r.status != "ok" and r.detail:
                        notes.append("%s, %s: %s: %s" % (case.label, name, r.status, r.detail))
                        break
        if notes:
            w("")
            for n in notes:
                w("- " + n)
    return "\n".join(lines) + "\n"


def summarise(workloads, names, refs, cells, ab):
    """One line per case: our primary figure against each reference, with
    our wall time and peak RSS beside the reference's."""
    mine_name = names[-1] if ab else OURS
    if mine_name not in names or not refs:
        return ""
    out = ["## Summary: %s against %s" % (mine_name, " and ".join(refs)), ""]
    head = ["workload", "case", "figure"]
    for r in refs:
        head.append("vs %s" % r)
    head += ["wall s", "peak RSS MiB"] + ["peak RSS %s" % r for r in refs]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|")
    for wl in workloads:
        m = wl.primary
        for case in wl.cases:
            mine = cells[(wl.name, case.label, mine_name)]
            row = [wl.name, case.label, m.label]
            for r in refs:
                ref = cells[(wl.name, case.label, r)]
                row.append(fmt_ratio(better_ratio(m, mine.value(m.key), ref.value(m.key))))
            bad = mine.failure()
            row.append("**%s**" % bad if bad else fmt(mine.median_wall()))
            row.append(fmt(mine.median_rss_mib()))
            for r in refs:
                row.append(fmt(cells[(wl.name, case.label, r)].median_rss_mib()))
            out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


# Measured by the runner for every run, whatever the workload.
RUN_COLUMNS = ["wall_s", "cpu_s", "peak_rss_mib"]


def csv_metrics(workloads):
    """The workloads' own figures, one CSV column each, in the order the
    workloads declare them; a RESULT key no workload declares (the
    parameters they echo) is left out."""
    out, seen = [], set(RUN_COLUMNS)
    for wl in workloads:
        for m in [wl.primary] + wl.extra + wl.bars:
            if m.column not in seen:
                seen.add(m.column)
                out.append(m)
    return out


def csv_num(v, form="%.6g"):
    return "" if v is None else form % v


def write_csv(path_runs, path_summary, workloads, names, cells):
    metrics = csv_metrics(workloads)
    with open(path_runs, "w", newline="") as f:
        cw = csv.writer(f)
        cw.writerow(["workload", "case", "allocator", "run", "status"] + RUN_COLUMNS
                    + [m.column for m in metrics] + ["detail"])
        for wl in workloads:
            for case in wl.cases:
                for name in names:
                    for i, r in enumerate(cells[(wl.name, case.label, name)].runs):
                        cw.writerow([wl.name, case.label, name, i + 1, r.status, "%.4f" % r.wall,
                                     csv_num(r.figures.get("cpu_s"), "%.4f"),
                                     "%.3f" % (r.maxrss_kib / 1024.0)]
                                    + [csv_num(r.figures.get(m.key)) for m in metrics]
                                    + [r.detail])
    with open(path_summary, "w", newline="") as f:
        cw = csv.writer(f)
        cw.writerow(["workload", "case", "allocator", "metric", "median", "min", "max",
                     "median_wall_s", "median_peak_rss_mib", "failure"])
        for wl in workloads:
            for case in wl.cases:
                for name in names:
                    cell = cells[(wl.name, case.label, name)]
                    for m in [wl.primary] + wl.extra:
                        sp = cell.spread(m.key)
                        cw.writerow([wl.name, case.label, name, m.column,
                                     "" if cell.median(m.key) is None else "%.6g" % cell.median(m.key),
                                     "" if sp is None else "%.6g" % sp[0],
                                     "" if sp is None else "%.6g" % sp[1],
                                     "" if cell.median_wall() is None else "%.4f" % cell.median_wall(),
                                     "" if cell.median_rss_mib() is None else "%.1f" % cell.median_rss_mib(),
                                     cell.failure() or ""])


# ---------------------------------------------------------------- charts

def gp_quote(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def charts(out_dir, workloads, names, cells):
    """Draws one PNG per workload and series: the primary figure against
    size or threads on the left, peak RSS on the right; bar charts for the
    workloads without an x axis.  Returns the files written."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        print("run_bench.py: gnuplot not found, no charts (apt-get install gnuplot-nox)",
              file=sys.stderr)
        return []
    written = []
    data_dir = os.path.join(out_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    for wl in workloads:
        if wl.bars:
            png = frag_chart(wl, names, cells, data_dir, out_dir, gnuplot)
            if png:
                written.append(png)
            continue
        series = []
        for c in wl.cases:
            if c.series not in series:
                series.append(c.series)
        for s in series:
            cases = [c for c in wl.cases if c.series == s]
            tag = wl.name + ("-" + re.sub(r"[^a-z0-9]+", "", s.lower()) if s else "")
            dat = os.path.join(data_dir, tag + ".dat")
            png = os.path.join(out_dir, tag + ".png")
            with open(dat, "w") as f:
                f.write("# x label " + " ".join(
                    "{0} {0}_min {0}_max {0}_rss {0}_rss_min {0}_rss_max".format(n)
                    for n in names) + "\n")
                for i, c in enumerate(cases):
                    vals = []
                    for n in names:
                        cell = cells[(wl.name, c.label, n)]
                        vals += gp_range(cell.value_range(wl.primary.key))
                        vals += gp_range(cell.rss_range_mib())
                    x = c.x if c.x is not None else i
                    label = c.label.split(",")[0] if wl.xaxis == "size" else c.label
                    f.write("%s %s %s\n" % (x, gp_quote(label), " ".join(vals)))
            title = wl.title.split(":")[0] + (" (%s)" % s if s else "")
            if run_gnuplot(gnuplot, gp_script(wl, names, dat, png, title), png):
                written.append(png)
    return written


def run_gnuplot(gnuplot, script, png):
    r = subprocess.run([gnuplot], input=script, capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(png):
        print("run_bench.py: gnuplot failed for %s: %s"
              % (os.path.basename(png), r.stderr.strip()[:300]), file=sys.stderr)
        return False
    return True


def gp_range(r):
    """A (median, min, max) as three data-file columns."""
    return ["NaN"] * 3 if r is None else ["%.6g" % v for v in r]


# Clustered bars, one per allocator, each with its min-max as an error bar.
GP_HISTOGRAM = ["set style data histogram",
                "set style histogram errorbars gap 1 lw 1",
                "set style fill solid 0.8 border -1",
                "set yrange [0:*]"]


def gp_plot(dat, names, using, first, step):
    """A plot command, one line or set of bars per allocator: allocator i
    is drawn from columns FIRST + STEP * i (the median) and the two after
    it (min and max, the error bar), which USING turns into gnuplot's
    "using" text."""
    return "plot " + ", \\\n  ".join(
        "%s using %s title %s" % (gp_quote(dat), using(first + step * i), gp_quote(n))
        for i, n in enumerate(names))


def gp_lines(col):
    return "1:%d:%d:%d with yerrorlines lw 2" % (col, col + 1, col + 2)


def gp_bars_by_case(col):
    return "%d:%d:%d:xtic(2)" % (col, col + 1, col + 2)


def frag_chart(wl, names, cells, data_dir, out_dir, gnuplot):
    """One cluster of bars per figure of WL.bars (the resident set after
    each phase), one bar per allocator, for the workload's single case."""
    case = wl.cases[0]
    dat = os.path.join(data_dir, wl.name + ".dat")
    png = os.path.join(out_dir, wl.name + ".png")
    with open(dat, "w") as f:
        f.write("# figure " + " ".join("{0} {0}_min {0}_max".format(n) for n in names) + "\n")
        for m in wl.bars:
            vals = []
            for n in names:
                vals += gp_range(cells[(wl.name, case.label, n)].value_range(m.key))
            f.write("%s %s\n" % (gp_quote(m.label), " ".join(vals)))
    g = ["set terminal pngcairo size 1000,500 font 'sans,10'",
         "set output %s" % gp_quote(png),
         "set datafile missing 'NaN'",
         "set title %s" % gp_quote(wl.title),
         "set grid ytics",
         "set key below horizontal"] + GP_HISTOGRAM + [
         "set ylabel 'MiB (lower is better)'",
         gp_plot(dat, names, lambda col: "%d:%d:%d:xtic(1)" % (col, col + 1, col + 2), 2, 3)]
    return png if run_gnuplot(gnuplot, "\n".join(g) + "\n", png) else None


def gp_script(wl, names, dat, png, title):
    m = wl.primary
    better = "higher is better" if m.higher_better else "lower is better"
    g = []
    g.append("set terminal pngcairo size 1200,500 font 'sans,10'")
    g.append("set output %s" % gp_quote(png))
    g.append("set datafile missing 'NaN'")
    g.append("set multiplot layout 1,2 title %s" % gp_quote(title))
    g.append("set grid")
    g.append("set key below horizontal")
    if wl.xaxis:
        g.append("set logscale x 2")
        if wl.xaxis == "size":
            g.append("set xlabel 'block size'")
            g.append("set logscale y 10")
        else:
            g.append("set xlabel 'threads (2 cores)'" if wl.name != "handoff"
                     else "set xlabel 'producer/consumer pairs (2 cores)'")
        xs = [c for c in wl.cases if c.series == wl.cases[0].series]
        g.append("set xtics (%s)" % ", ".join(
            "%s %s" % (gp_quote(human_size(c.x, short=True) if wl.xaxis == "size" else str(c.x)), c.x)
            for c in xs))
        g.append("set xrange [%g:%g]" % (xs[0].x / 1.5, xs[-1].x * 1.5))
        if len(xs) > 10:
            g.append("set xtics rotate by 90 right")  # some neighbours are 1.3x apart
        using = gp_lines
    else:
        g += GP_HISTOGRAM
        using = gp_bars_by_case
    # Left: the figure (columns 3, 9, ...); right: peak RSS (6, 12, ...);
    # each followed by its min and max.
    g.append("set ylabel %s" % gp_quote("%s (%s)" % (m.label, better)))
    g.append(gp_plot(dat, names, using, 3, 6))
    g.append("unset logscale y")
    g.append("set yrange [0:*]")
    g.append("set ylabel 'peak RSS MiB (lower is better)'")
    g.append(gp_plot(dat, names, using, 6, 6))
    g.append("unset multiplot")
    return "\n".join(g) + "\n"


# ---------------------------------------------------------------- main

def machine_meta(names, libs, reps, quick):
    meta = [("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))]
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
        if rev:
            meta.append(("commit", rev + (" with uncommitted changes" if dirty else "")))
    except (OSError, subprocess.SubprocessError):
        pass
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    meta.append(("machine", "%s, %d cores%s (8 threads oversubscribe it); %s" % (
        platform.machine(), os.cpu_count() or 0, ", " + cpu if cpu else "",
        "Linux " + platform.release())))
    try:
        meta.append(("C library", os.confstr("CS_GNU_LIBC_VERSION")))
    except (ValueError, OSError):
        pass
    meta.append(("mode", "%s, %d repetitions" % ("quick" if quick else "full", reps)))
    for n in names:
        ver = ""
        if n in PEERS:
            ver = package_version(PEERS[n][1])
            ver = " (%s %s)" % (PEERS[n][1], ver) if ver else ""
        meta.append((n, (libs[n] or "no preload") + ver))
    return meta


def progress_mode(asked):
    if asked != "auto":
        return asked
    tty = sys.stderr.isatty() and os.environ.get("TERM", "dumb") != "dumb"
    return "bar" if tty else "lines"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true",
                    help="5 repetitions at full length (default: quick, 3 repetitions)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per cell")
    ap.add_argument("--workloads", default="",
                    help="comma list of workloads to run (default all): loop, handoff, "
                         "churn, mixed, migrate, frag, false_sharing, large_handoff, rotate, "
                         "server, idle_owner, cxx, real")
    ap.add_argument("--only", default="",
                    help="comma list of allocators to run (default all): " + ", ".join(ORDER))
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libkamepoolalloc.so"),
                    help="libkamepoolalloc.so to measure (default build/libkamepoolalloc.so)")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bench"),
                    help="directory of the workload programs (default build/bench)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-results"),
                    help="directory for report.md, the CSV files and the charts")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds before a run is killed (default 60, --full 180)")
    ap.add_argument("--ab", nargs=2, metavar=("A.so", "B.so"),
                    help="compare two builds of this library, interleaved, instead of the peers")
    ap.add_argument("--no-charts", action="store_true", help="skip the gnuplot charts")
    ap.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                    help="progress on stderr: a bar redrawn in place, plain lines (for logs) or "
                         "none; auto: a bar on a terminal, lines otherwise")
    args = ap.parse_args()

    quick = not args.full
    reps = args.reps if args.reps is not None else (3 if quick else 5)
    if reps < 1:
        ap.error("--reps must be at least 1")
    timeout = args.timeout if args.timeout is not None else (60.0 if quick else 180.0)

    libs = {}
    notes = []
    if args.ab:
        a, b = (os.path.abspath(p) for p in args.ab)
        for p in (a, b):
            if not os.path.exists(p):
                sys.exit("run_bench.py: %s not found" % p)
        la, lb = "A", "B"
        libs[la], libs[lb] = a, b
        names, refs = [la, lb], [la]
    else:
        only = {x.strip() for x in args.only.split(",") if x.strip()}
        unknown = only - set(ORDER)
        if unknown:
            ap.error("unknown allocator(s): %s (choose from %s)"
                     % (", ".join(sorted(unknown)), ", ".join(ORDER)))
        cache = ldconfig_paths()
        for name in ORDER:
            if only and name not in only:
                continue
            if name == "system":
                libs[name] = ""
            elif name == OURS:
                lib = os.path.abspath(args.lib)
                if not os.path.exists(lib):
                    sys.exit("run_bench.py: %s not found (cmake --build build, or pass --lib)" % lib)
                libs[name] = lib
            else:
                soname, pkg = PEERS[name]
                path = find_peer(soname, cache)
                if path is None:
                    notes.append("%s: missing (%s not found); add it with: apt-get install %s"
                                 % (name, soname, pkg))
                    continue
                libs[name] = path
        names = [n for n in ORDER if n in libs]
        refs = [r for r in ("mimalloc", "system") if r in names]
    if not names:
        sys.exit("run_bench.py: no allocator to run")

    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    # The real programs' files live in memory when possible, so the disk's
    # write-back does not time itself into the figures.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    real_dir = tempfile.mkdtemp(prefix="kp-bench-real.", dir=shm)
    scratch = tempfile.mkdtemp(prefix="kp-bench.")
    ctx = {"bin_dir": os.path.abspath(args.bin_dir), "quick": quick, "real_dir": real_dir,
           "scratch": scratch}

    # SIGTERM unwinds like Ctrl-C, so the running program's group is killed
    # and the scratch directories go.
    def terminate(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        workloads = build_workloads(ctx)
        want = [x.strip() for x in args.workloads.split(",") if x.strip()]
        known = [w.name for w in workloads]
        bad = [x for x in want if x not in known]
        if bad:
            ap.error("unknown workload(s): %s (choose from %s)" % (", ".join(bad), ", ".join(known)))
        if want:
            workloads = [w for w in workloads if w.name in want]
        ctx["spawn"] = os.path.join(ctx["bin_dir"], "bench_spawn")
        if not os.access(ctx["spawn"], os.X_OK):
            sys.exit("run_bench.py: %s is not built (cmake --build build)" % ctx["spawn"])
        for wl in workloads:
            if wl.real:
                continue
            exe = wl.command(wl.cases[0], ctx)[0]
            if not os.access(exe, os.X_OK):
                sys.exit("run_bench.py: %s is not built (cmake --build build)" % exe)
        for wl in workloads:
            if wl.real:
                if args.progress != "none":
                    print("run_bench.py: recording the real programs' output on the system "
                          "allocator", file=sys.stderr, flush=True)
                prepare_real(ctx, wl, timeout)

        cells = {}
        for wl in workloads:
            for case in wl.cases:
                for name in names:
                    cells[(wl.name, case.label, name)] = Cell()
        # Two builds swap places every repetition, so neither always runs
        # right after the other.
        plan = [(rep, wl, case, name)
                for rep in range(reps) for wl in workloads for case in wl.cases
                for name in (names[::-1] if args.ab and rep % 2 else names)]
        total = len(plan)
        t0 = time.monotonic()
        progress = Progress(plan, progress_mode(args.progress))
        for i, (rep, wl, case, name) in enumerate(plan):
            progress.start(i)
            started = time.monotonic()
            r = execute(wl, case, libs[name], ctx, timeout)
            cells[(wl.name, case.label, name)].runs.append(r)
            progress.finish(i, time.monotonic() - started)
        progress.close()
        elapsed = time.monotonic() - t0
    except KeyboardInterrupt:
        sys.exit("%srun_bench.py: interrupted; no report written"
                 % ("\n" if progress_mode(args.progress) == "bar" else ""))
    finally:
        shutil.rmtree(real_dir, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)

    meta = machine_meta(names, libs, reps, quick)
    meta.append(("runs", "%d in %.0f s" % (total, elapsed)))
    for n in notes:
        meta.append(("missing", n))
    report = render(workloads, names, refs, cells, meta, reps, args.ab)
    pngs = [] if args.no_charts else charts(out_dir, workloads, names, cells)
    if pngs:
        report += "\n## Charts\n\n" + "\n".join(
            "![%s](%s)" % (os.path.basename(p)[:-4], os.path.basename(p)) for p in pngs) + "\n"
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(report)
    write_csv(os.path.join(out_dir, "runs.csv"), os.path.join(out_dir, "summary.csv"),
              workloads, names, cells)
    sys.stdout.write(report)
    print("\nWritten to %s: report.md, runs.csv, summary.csv%s" % (
        out_dir, ", %d charts" % len(pngs) if pngs else ""))
    # A peer that fails is a fact about the peer; ours failing is an error.
    mine = list(names) if args.ab else ([OURS] if OURS in names else [])
    failed = [k for k, c in cells.items() if k[2] in mine and c.failure()]
    if failed:
        print("\n%s failed in %d cell(s); see the tables." % (" or ".join(mine), len(failed)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
