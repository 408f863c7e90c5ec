"""Allocation-heavy Python workload for tests/real_programs.sh.

Builds and drops strings, bytes, lists and dicts over a wide range of
sizes, grows buffers through realloc, round-trips JSON, sorts, compresses,
and hands objects between threads.  Every section prints a checksum, so the
output is the same on any correct allocator; real_programs.sh compares it
between a run on the C library's malloc and one under LD_PRELOAD.

Run with PYTHONMALLOC=malloc to send even small objects to malloc.
Optional argument: a scale factor (default 1.0).
"""

import hashlib
import json
import queue
import random
import sys
import threading
import zlib

SCALE = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0


def n(x):
    return max(1, int(x * SCALE))


def digest(data):
    return hashlib.sha256(data).hexdigest()[:16]


def section_strings(rng):
    # Strings and bytes from 1 B to 8 MiB, several live at once.
    crc = 0
    live = []
    sizes = [1, 7, 8, 9, 15, 16, 17, 100, 511, 512, 513, 1000, 1024, 4095, 4096,
             4097, 32767, 32768, 32769, 65536, 100000, 262144, 1 << 20,
             (4 << 20) - 1, 4 << 20, (4 << 20) + 1, 8 << 20]
    for rnd in range(n(3)):
        for size in sizes:
            s = bytes([(size + rnd) & 0xFF]) * size
            t = s.hex()[: size] if size < 100000 else s
            crc = zlib.crc32(t[:64].encode() if isinstance(t, str) else t[:64], crc)
            crc = zlib.crc32(s[-16:], crc)
            live.append(s)
            if len(live) > 12:
                del live[rng.randrange(len(live))]
        for _ in range(n(3000)):
            size = int(rng.lognormvariate(5, 2.5)) % (2 << 20) + 1
            b = bytearray(size)
            b[0] = 1
            b[-1] = 2
            crc = zlib.crc32(bytes(b[:8]) + bytes(b[-8:]), crc)
            if rng.random() < 0.1:
                live.append(bytes(b))
                if len(live) > 12:
                    del live[0]
    print("strings", crc, len(live))


def section_grow(rng):
    # A bytearray grown by appends crosses every tier through realloc,
    # then shrinks back.
    buf = bytearray()
    step = 1
    while len(buf) < n(40 << 20):
        buf += bytes([len(buf) & 0xFF]) * step
        step = min(step * 2, 1 << 20) if rng.random() < 0.5 else step + 1
    h1 = digest(bytes(buf[::4096]))
    while len(buf) > 100:
        del buf[len(buf) // 2:]
    print("grow", h1, digest(bytes(buf)))


def section_containers(rng):
    # Lists and dicts that resize (their tables are realloc'd) and die.
    total = 0
    for rnd in range(n(4)):
        d = {}
        for i in range(n(60000)):
            d["k%d_%d" % (rnd, i)] = [i] * (i % 17)
        for i in range(0, n(60000), 3):
            del d["k%d_%d" % (rnd, i)]
        total += sum(len(v) for v in d.values())
        lst = [str(i) * (i % 11) for i in range(n(100000))]
        lst.sort(key=lambda s: (len(s), s))
        total += len(lst[-1]) + len(lst[len(lst) // 2])
        nested = [[[j] * 5 for j in range(50)] for _ in range(n(400))]
        total += sum(len(x) for x in nested)
        del d, lst, nested
    print("containers", total)


def section_json(rng):
    doc = {
        "users": [
            {"id": i, "name": "user%05d" % i, "tags": ["t%d" % (i % 7)] * (i % 5),
             "score": rng.random(), "blob": "x" * (i % 300)}
            for i in range(n(30000))
        ],
        "meta": {"version": 3, "note": "é漢字" * 100},
    }
    text = json.dumps(doc, sort_keys=True)
    back = json.loads(text)
    same = back == doc
    text2 = json.dumps(back, sort_keys=True, indent=1)
    print("json", digest(text.encode()), digest(text2.encode()), same, len(text))


def section_sort(rng):
    ints = [rng.randrange(1 << 40) for _ in range(n(300000))]
    ints.sort()
    strs = ["%x" % v for v in ints[::3]]
    strs.sort(reverse=True)
    pairs = sorted(zip(strs, range(len(strs))), key=lambda p: (p[0][-3:], p[1]))
    print("sort", digest(repr(ints[::1000]).encode()), strs[0], strs[-1], pairs[0][1], pairs[-1][1])


def section_zlib(rng):
    data = b"".join(b"line %d of some text %s\n" % (i, b"ab" * (i % 40)) for i in range(n(200000)))
    comp = zlib.compress(data, 6)
    back = zlib.decompress(comp)
    d = zlib.decompressobj()
    parts = [d.decompress(comp[i:i + 4096]) for i in range(0, len(comp), 4096)]
    parts.append(d.flush())
    print("zlib", len(data), digest(comp), back == data, b"".join(parts) == data)


def section_threads(rng):
    # Producers allocate, one consumer frees: blocks die on another thread.
    q = queue.Queue(maxsize=256)
    results = {}
    lock = threading.Lock()

    def producer(pid):
        r = random.Random(pid)
        h = hashlib.sha256()
        for i in range(n(4000)):
            size = int(r.lognormvariate(6, 2)) % (1 << 20) + 1
            item = bytes([(pid + i) & 0xFF]) * size
            h.update(item[:32])
            q.put((pid, item, {"i": i, "l": [i] * (i % 9)}))
        q.put((pid, None, None))
        with lock:
            results[pid] = h.hexdigest()[:16]

    def consumer(nprod, out):
        done = 0
        got = 0
        while done < nprod:
            pid, item, meta = q.get()
            if item is None:
                done += 1
                continue
            got += len(item) + len(meta["l"])
        out.append(got)

    out = []
    prods = [threading.Thread(target=producer, args=(p,)) for p in range(4)]
    cons = threading.Thread(target=consumer, args=(len(prods), out))
    cons.start()
    for t in prods:
        t.start()
    for t in prods:
        t.join()
    cons.join()
    print("threads", out[0], [results[p] for p in sorted(results)])


def main():
    rng = random.Random(12345)
    for f in (section_strings, section_grow, section_containers, section_json,
              section_sort, section_zlib, section_threads):
        f(rng)
        sys.stdout.flush()
    print("done")


if __name__ == "__main__":
    main()
