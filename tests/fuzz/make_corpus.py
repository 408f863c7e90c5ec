#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz target (tests/fuzz/fuzz_api.c).

    make_corpus.py DIR          write the seeds into DIR
    make_corpus.py --check DIR  exit 1 unless DIR holds exactly these seeds

Each seed is a short scenario in the target's input format: an opcode byte
and fixed-length arguments per operation (the table `ops` in fuzz_api.c).
Together they reach every operation and every tier, the sizes around the
tier, unit and class boundaries, the byte ceiling and the helper thread.
The encoder below mirrors the target's size decoder and checks that every
size decodes to the one meant, so a change to the decoder that this file
does not follow fails here rather than silently changing the seeds.
"""
import os
import sys

KiB = 1 << 10
MiB = 1 << 20

OPS = {
    "malloc": 0, "free": 1, "calloc": 2, "realloc": 3, "aligned_alloc": 4,
    "posix_memalign": 5, "usable_size": 6, "trim": 7, "set_max_bytes": 8,
    "remote_free": 9, "remote_alloc": 10, "helper_exit": 11, "free_run": 12,
    "malloc_run": 13, "bad_request": 14, "remote_realloc": 15,
}

BOUNDARIES = [0, 1, 8, 16, 128, 256, 1 * KiB, 4 * KiB, 32 * KiB, 64 * KiB,
              256 * KiB, 512 * KiB, 1 * MiB, 4 * MiB, 8 * MiB, 32 * MiB, 64 * MiB]
UNIT_DELTA = [-4096, -1, 0, 1, 4096]


def decode_size(kind, v):
    """The target's rd_size, for checking the encoder."""
    kind %= 32
    if kind > 10:
        kind %= 4
    lo, hi = v & 0xFF, v >> 8
    if kind == 0:
        return v % 65
    if kind == 1:
        return v % 513
    if kind == 2:
        return v % 4097
    if kind == 3:
        return v % (32 * KiB + 1)
    if kind == 4:
        return max(0, BOUNDARIES[lo % len(BOUNDARIES)] + hi % 9 - 4)
    if kind == 5:
        return max(0, (1 << (lo % 27)) + hi % 3 - 1)
    if kind == 6:
        return 32 * KiB + v * 64
    if kind == 7:
        return 4 * MiB + v * 450
    if kind == 8:
        return 32 * MiB + v * 256
    if kind == 9:
        return max(0, (1 + lo % 20) * 256 * KiB + UNIT_DELTA[hi % 5])
    b = 1 << (3 + lo % 13)
    return max(0, b + (hi % 4) * (b // 4) + (hi >> 2) % 3 - 1)


def encode_size(n):
    """Three bytes that the target decodes to exactly n bytes."""
    candidates = []
    if n <= 32 * KiB:
        candidates.append((3, n))
    for i, b in enumerate(BOUNDARIES):
        if -4 <= n - b <= 4:
            candidates.append((4, i | (n - b + 4) << 8))
    for e in range(27):
        if -1 <= n - (1 << e) <= 1:
            candidates.append((5, e | (n - (1 << e) + 1) << 8))
    for kind, base, step in ((6, 32 * KiB, 64), (7, 4 * MiB, 450), (8, 32 * MiB, 256)):
        if n >= base and (n - base) % step == 0 and (n - base) // step < 1 << 16:
            candidates.append((kind, (n - base) // step))
    for units in range(1, 21):
        for j, d in enumerate(UNIT_DELTA):
            if units * 256 * KiB + d == n:
                candidates.append((9, (units - 1) | j << 8))
    if not candidates:
        raise ValueError("no encoding for size %d" % n)
    kind, v = candidates[0]
    assert decode_size(kind, v) == n, (n, kind, v)
    return bytes([kind, v & 0xFF, v >> 8])


def align_byte(a):
    assert a & (a - 1) == 0 and 1 <= a <= 1 << 27
    return a.bit_length() - 1


class Seed:
    def __init__(self):
        self.out = bytearray()

    def op(self, name, *args):
        self.out.append(OPS[name])
        for a in args:
            self.out += a if isinstance(a, bytes) else bytes([a])
        return self

    def malloc(self, n): return self.op("malloc", encode_size(n))
    def free(self, slot=0): return self.op("free", slot)
    def calloc(self, n, c=0): return self.op("calloc", c, encode_size(n))
    def realloc(self, slot, n, mode=0): return self.op("realloc", slot, mode, encode_size(n))
    def realloc_mode(self, slot, mode): return self.op("realloc", slot, mode, encode_size(0))
    def aligned(self, a, n): return self.op("aligned_alloc", align_byte(a), encode_size(n))
    def memalign(self, a, n): return self.op("posix_memalign", align_byte(a), encode_size(n))
    def usable(self, slot=0): return self.op("usable_size", slot)
    def trim(self): return self.op("trim")
    def set_max(self, mode, d=0): return self.op("set_max_bytes", mode, d)
    def remote_free(self, slot=0): return self.op("remote_free", slot)
    def remote_alloc(self, n, zero=False): return self.op("remote_alloc", int(zero), encode_size(n))
    def helper_exit(self): return self.op("helper_exit")
    def free_run(self, slot, count): return self.op("free_run", slot, count - 1)
    def malloc_run(self, count, n): return self.op("malloc_run", count - 1, encode_size(n))
    def bad(self, kind, slot=0): return self.op("bad_request", kind, slot)
    def remote_realloc(self, slot, n): return self.op("remote_realloc", slot, encode_size(n))


# Sizes around the boundaries of the tiers (bucket 32 KiB, dedicated 4 MiB,
# large 32 MiB) and of the 256 KiB unit.
TIER_SIZES = [32 * KiB - 1, 32 * KiB, 32 * KiB + 1, 256 * KiB - 1, 256 * KiB,
              256 * KiB + 1, 4 * MiB - 1, 4 * MiB, 4 * MiB + 1, 32 * MiB - 1,
              32 * MiB, 32 * MiB + 1, 64 * MiB]
CLASS_SIZES = [0, 1, 7, 8, 9, 16, 17, 128, 129, 1023, 1024, 1025, 1280, 1281,
               4095, 4096, 4097, 8192, 16384, 16385, 32767, 32768]


def seeds():
    s = {}

    k = Seed()
    for n in CLASS_SIZES:
        k.malloc(n)
    for i in range(len(CLASS_SIZES)):
        k.usable(i)
    k.free_run(0, 8).free_run(3, 8)
    s["malloc-buckets"] = k

    k = Seed()
    for n in TIER_SIZES:
        k.malloc(n).usable(255)
    for i in range(len(TIER_SIZES)):
        k.free(i * 7)
    s["malloc-tiers"] = k

    # Freed blocks leave dirty units that the next calloc of the same size
    # reuses; calloc(count, size) and calloc(size, count) both.
    k = Seed()
    for n in [0, 24, 4096, 32 * KiB, 32 * KiB + 1, 300 * KiB, 4 * MiB, 4 * MiB + 1, 33 * MiB]:
        k.malloc(n).free(255).calloc(n, 0).calloc(n, 0x83)
    s["calloc-reuse"] = k

    # Growth and shrinkage across every tier, then the in-place edges
    # (modes 4-7: usable, usable + 1, half, half - 1), realloc to 0 and
    # realloc(NULL, n).
    k = Seed()
    k.malloc(10)
    for n in [40, 200, 5000, 32 * KiB, 32 * KiB + 1, 1 * MiB, 4 * MiB + 1, 32 * MiB + 1,
              5 * MiB, 100 * KiB, 3000, 17, 0]:
        k.realloc(0, n)
    k.malloc(1000).malloc(70 * KiB).malloc(5 * MiB)
    for slot in range(3):
        for mode in (4, 5, 6, 7):
            k.realloc_mode(slot, mode)
    k.realloc(0, 64, mode=0x78)
    s["realloc-tiers"] = k

    k = Seed()
    for a in [1, 8, 16, 64, 4 * KiB, 8 * KiB, 64 * KiB, 256 * KiB, 512 * KiB, 32 * MiB, 64 * MiB]:
        for n in [0, 1, 100, 4096, 40 * KiB, 5 * MiB, 33 * MiB]:
            k.aligned(a, n)
        k.free_run(0, 7)
    for a in [1, 2, 4, 8, 16, 4 * KiB, 256 * KiB, 1 * MiB, 128 * MiB]:
        k.memalign(a, 3000).memalign(a, 300 * KiB)
    s["aligned"] = k

    # Dirty units from freed chunks, purged by trim, then reused.
    k = Seed()
    k.malloc_run(64, 48).malloc_run(20, 2 * MiB).malloc(8 * MiB + 1)
    k.free_run(0, 16).free_run(10, 16).trim()
    k.calloc(2 * MiB).calloc(48).trim().free_run(0, 16).trim()
    s["trim"] = k

    # Past the ceiling every tier falls back to the system allocator; its
    # pointers go through free, realloc and usable_size; back under the
    # default, blocks move between the pool and the system allocator.
    k = Seed()
    k.malloc(100).malloc(1 * MiB)
    k.set_max(3)
    for n in [16, 4096, 32 * KiB + 1, 300 * KiB, 5 * MiB, 40 * MiB]:
        k.malloc(n).usable(255)
    k.aligned(4096, 10).aligned(1 * MiB, 10).calloc(2 * MiB).realloc(2, 50 * KiB).realloc(3, 20)
    k.set_max(0)
    k.realloc(4, 8 * MiB).realloc(5, 64).free_run(0, 4)
    k.set_max(1, 40).malloc_run(30, 3 * MiB).set_max(2, 10).malloc(8 * MiB).malloc_run(10, 700)
    k.set_max(0).trim()
    s["ceiling"] = k

    # Blocks cross threads both ways; the helper exits with live blocks
    # (orphan chunks), which the main thread adopts or trim releases.
    k = Seed()
    for n in [48, 48, 48, 48, 2000, 40 * KiB, 5 * MiB]:
        k.remote_alloc(n)
    k.remote_alloc(48, zero=True).free(0).free(1)
    k.malloc(64).malloc(64).remote_free(0).remote_free(0)
    k.remote_realloc(0, 3000).remote_realloc(0, 100 * KiB)
    k.helper_exit().malloc_run(40, 48).free(2).trim()
    k.remote_alloc(200).helper_exit().free_run(0, 16).trim()
    k.malloc_run(10, 200).remote_free(3).remote_alloc(200).helper_exit().malloc_run(64, 200)
    s["remote"] = k

    # Enough slots to fill chunks (a full list, refills, collects).
    k = Seed()
    k.malloc_run(64, 8 * KiB).malloc_run(64, 8 * KiB).malloc_run(64, 32 * KiB)
    k.free_run(5, 16).free_run(90, 16).malloc_run(64, 8 * KiB)
    for i in range(6):
        k.remote_free(i * 11)
    k.malloc_run(64, 8 * KiB).free_run(0, 16).free_run(0, 16)
    s["runs"] = k

    k = Seed()
    for kind in range(8):
        k.bad(kind, 0).bad(kind, 1)
    k.malloc(300).malloc(5 * MiB)
    for kind in range(8):
        for slot in range(6):
            k.bad(kind, slot)
    s["bad-requests"] = k

    k = Seed()
    k.malloc(24).calloc(1000).aligned(64, 70).remote_alloc(9000).realloc(0, 33 * KiB)
    k.memalign(32, 5).usable(1).set_max(1, 2).malloc(8 * MiB - 1).remote_free(2).trim()
    k.realloc(1, 2 * MiB).set_max(0).free(0).malloc_run(5, 47 * MiB)
    s["mixed"] = k
    return s


def main(argv):
    check = len(argv) == 3 and argv[1] == "--check"
    if len(argv) != 2 and not check:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    out = argv[-1]
    want = {"seed-" + name: bytes(k.out) for name, k in seeds().items()}
    if check:
        have = {f for f in os.listdir(out) if f.startswith("seed-")}
        bad = sorted(have ^ set(want))
        for name in sorted(have & set(want)):
            with open(os.path.join(out, name), "rb") as f:
                if f.read() != want[name]:
                    bad.append(name)
        if bad:
            print("corpus differs from make_corpus.py: %s" % " ".join(bad), file=sys.stderr)
            return 1
        print("%d seeds match" % len(want))
        return 0
    os.makedirs(out, exist_ok=True)
    for name, data in want.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(want), out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
