/* Size classes of the bucket tier.
 *
 * 16 B steps to 128 B, then four classes per doubling up to 32 KiB, so
 * from 128 B up a request is rounded up by at most 25 %; eight from 4 KiB
 * to 8 KiB (at most 12.5 %), where a page and a header is a common
 * request (a database's page cache, a buffer of a page).  Every class is a
 * multiple of 16, so every block is aligned to max_align_t (16 bytes),
 * which compilers assume of malloc on x86-64 and aarch64.  A slot's
 * alignment is the largest power of two dividing its class size (chunks
 * are 256 KiB-aligned), so the power-of-two classes from 1 KiB up are
 * exact and naturally aligned. */
#include "internal.h"

/* Indexed by (size + 15) / 16. */
const uint8_t kp_class_of_granule[(KP_SMALL_MAX >> 4) + 1] = {
    [0 ... 1] = 0,
    [2 ... 2] = 1,
    [3 ... 3] = 2,
    [4 ... 4] = 3,
    [5 ... 5] = 4,
    [6 ... 6] = 5,
    [7 ... 7] = 6,
    [8 ... 8] = 7,
    [9 ... 10] = 8,
    [11 ... 12] = 9,
    [13 ... 14] = 10,
    [15 ... 16] = 11,
    [17 ... 20] = 12,
    [21 ... 24] = 13,
    [25 ... 28] = 14,
    [29 ... 32] = 15,
    [33 ... 40] = 16,
    [41 ... 48] = 17,
    [49 ... 56] = 18,
    [57 ... 64] = 19,
    [65 ... 80] = 20,
    [81 ... 96] = 21,
    [97 ... 112] = 22,
    [113 ... 128] = 23,
    [129 ... 160] = 24,
    [161 ... 192] = 25,
    [193 ... 224] = 26,
    [225 ... 256] = 27,
    [257 ... 288] = 28,
    [289 ... 320] = 29,
    [321 ... 352] = 30,
    [353 ... 384] = 31,
    [385 ... 416] = 32,
    [417 ... 448] = 33,
    [449 ... 480] = 34,
    [481 ... 512] = 35,
    [513 ... 640] = 36,
    [641 ... 768] = 37,
    [769 ... 896] = 38,
    [897 ... 1024] = 39,
    [1025 ... 1280] = 40,
    [1281 ... 1536] = 41,
    [1537 ... 1792] = 42,
    [1793 ... 2048] = 43,
};

const uint32_t kp_class_size[KP_NUM_CLASSES] = {
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192, 10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768,
};

/* Units per chunk: enough for at least 32 slots. */
const uint8_t kp_class_units[KP_NUM_CLASSES] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4,
};

/* Slots of other chunks a thread keeps per class [HOST-1]. */
#define H(s) ((uint8_t)(KP_HOST_BYTES / (s) < KP_HOST_MAX ? KP_HOST_BYTES / (s) : KP_HOST_MAX))
const uint8_t kp_class_host_max[KP_NUM_CLASSES] = {
    H(16), H(32), H(48), H(64), H(80), H(96), H(112), H(128), H(160), H(192), H(224), H(256), H(320), H(384), H(448), H(512), H(640), H(768), H(896), H(1024), H(1280), H(1536), H(1792), H(2048), H(2560), H(3072), H(3584), H(4096), H(4608), H(5120), H(5632), H(6144), H(6656), H(7168), H(7680), H(8192), H(10240), H(12288), H(14336), H(16384), H(20480), H(24576), H(28672), H(32768),
};
#undef H

/* floor(2^48 / size) + 1: offset * recip >> 48 is offset / size, exactly,
 * for every offset inside a chunk (at most 1 MiB). */
#define R(s) ((((uint64_t)1 << 48) / (s)) + 1)
const uint64_t kp_class_recip[KP_NUM_CLASSES] = {
    R(16), R(32), R(48), R(64), R(80), R(96), R(112), R(128), R(160), R(192), R(224), R(256), R(320), R(384), R(448), R(512), R(640), R(768), R(896), R(1024), R(1280), R(1536), R(1792), R(2048), R(2560), R(3072), R(3584), R(4096), R(4608), R(5120), R(5632), R(6144), R(6656), R(7168), R(7680), R(8192), R(10240), R(12288), R(14336), R(16384), R(20480), R(24576), R(28672), R(32768),
};
#undef R

int kp_size_class_aligned(size_t size, size_t align) {
  if (size > KP_SMALL_MAX) return -1;
  for (unsigned cls = kp_size_class(size); cls < KP_NUM_CLASSES; cls++)
    if ((kp_class_size[cls] & (align - 1)) == 0) return (int)cls;
  return -1;
}

/* Mapping classes by 512 KiB granule of the request, (size - 1) >> 19:
 * class k (kp_cache_map_len) serves the granules after class k - 1's
 * length up to its own.  Each entry is k times the size of an L1 slot. */
#define C(k) ((k) * sizeof(kp_l1_slot))
const uint16_t kp_map_slot_offset_of_granule[KP_MAP_TABLE_MAX >> KP_MAP_TABLE_SHIFT] = {
    [0 ... 8] = C(0),      [9] = C(1),            [10] = C(2),           [11] = C(3),
    [12] = C(4),           [13] = C(5),           [14] = C(6),           [15] = C(7),
    [16 ... 17] = C(8),    [18 ... 19] = C(9),    [20 ... 21] = C(10),   [22 ... 23] = C(11),
    [24 ... 25] = C(12),   [26 ... 27] = C(13),   [28 ... 29] = C(14),   [30 ... 31] = C(15),
    [32 ... 35] = C(16),   [36 ... 39] = C(17),   [40 ... 43] = C(18),   [44 ... 47] = C(19),
    [48 ... 51] = C(20),   [52 ... 55] = C(21),   [56 ... 59] = C(22),   [60 ... 63] = C(23),
    [64 ... 71] = C(24),   [72 ... 79] = C(25),   [80 ... 87] = C(26),   [88 ... 95] = C(27),
    [96 ... 103] = C(28),  [104 ... 111] = C(29), [112 ... 119] = C(30), [120 ... 127] = C(31),
};
#undef C
