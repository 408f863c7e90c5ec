/* Size classes of the bucket tier.
 *
 * 8 B, then 16 B steps to 128 B (16-byte alignment rules out finer steps),
 * then four classes per doubling up to 32 KiB, so from 128 B up a request
 * is rounded up by at most 25 %.  A slot's alignment is the largest power
 * of two dividing its class size (chunks are 256 KiB-aligned), so the
 * power-of-two classes from 1 KiB up are exact and naturally aligned. */
#include "internal.h"

/* Indexed by (size + 7) / 8. */
const uint8_t kp_class_of_granule[(KP_SMALL_MAX >> 3) + 1] = {
    [0 ... 1] = 0,
    [2 ... 2] = 1,
    [3 ... 4] = 2,
    [5 ... 6] = 3,
    [7 ... 8] = 4,
    [9 ... 10] = 5,
    [11 ... 12] = 6,
    [13 ... 14] = 7,
    [15 ... 16] = 8,
    [17 ... 20] = 9,
    [21 ... 24] = 10,
    [25 ... 28] = 11,
    [29 ... 32] = 12,
    [33 ... 40] = 13,
    [41 ... 48] = 14,
    [49 ... 56] = 15,
    [57 ... 64] = 16,
    [65 ... 80] = 17,
    [81 ... 96] = 18,
    [97 ... 112] = 19,
    [113 ... 128] = 20,
    [129 ... 160] = 21,
    [161 ... 192] = 22,
    [193 ... 224] = 23,
    [225 ... 256] = 24,
    [257 ... 320] = 25,
    [321 ... 384] = 26,
    [385 ... 448] = 27,
    [449 ... 512] = 28,
    [513 ... 640] = 29,
    [641 ... 768] = 30,
    [769 ... 896] = 31,
    [897 ... 1024] = 32,
    [1025 ... 1280] = 33,
    [1281 ... 1536] = 34,
    [1537 ... 1792] = 35,
    [1793 ... 2048] = 36,
    [2049 ... 2560] = 37,
    [2561 ... 3072] = 38,
    [3073 ... 3584] = 39,
    [3585 ... 4096] = 40,
};

const uint32_t kp_class_size[KP_NUM_CLASSES] = {
    8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768,
};

/* Units per chunk: enough for at least 32 slots. */
const uint8_t kp_class_units[KP_NUM_CLASSES] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4,
};

int kp_size_class_aligned(size_t size, size_t align) {
  if (size > KP_SMALL_MAX) return -1;
  for (unsigned cls = kp_size_class(size); cls < KP_NUM_CLASSES; cls++)
    if ((kp_class_size[cls] & (align - 1)) == 0) return (int)cls;
  return -1;
}
