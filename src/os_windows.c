/* Windows implementation of the OS interface (os.h), for MinGW-w64 and
 * MSVC (only documented Win32 calls; no GCC-only construct beyond what
 * os.h itself spells per compiler).
 *
 * VirtualAlloc reserves and commits; VirtualFree releases a whole
 * reservation only (has_partial_unmap is false, so mapping.c finds aligned
 * holes instead of trimming) or decommits any page range.  Committed pages
 * count against the commit limit whether touched or not (no overcommit).
 * Win32 calls report through GetLastError, never errno, so errno stays as
 * it was without saving it. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <windows.h>

kp_os_config kp_os;

/* The page size is the config's "filled" mark.  The Interlocked calls are
 * the spelling MinGW and MSVC share; the field is pointer-sized on every
 * Windows target. */
_Static_assert(sizeof(size_t) == sizeof(PVOID), "the page size is accessed as a pointer");

void kp_os_init(void) {
  if (InterlockedCompareExchangePointer((PVOID volatile *)&kp_os.page_size, NULL, NULL) != NULL) return;
  SYSTEM_INFO si;
  GetSystemInfo(&si);
  kp_os.alloc_granularity = si.dwAllocationGranularity; /* 64 KiB */
  kp_os.has_partial_unmap = false;
  kp_os.has_overcommit = false;
  /* 128 TiB of user space on x64 (47 bits); 2 or 4 GiB on x86. */
  kp_os.address_bits = sizeof(void *) == 8 ? 47 : 32;
  InterlockedExchangePointer((PVOID volatile *)&kp_os.page_size, (PVOID)(uintptr_t)si.dwPageSize);
}

/* The errno-style code for the last Win32 error, as Linux would report
 * the same condition. */
static int last_error(void) {
  switch (GetLastError()) {
  case ERROR_NOT_ENOUGH_MEMORY:
  case ERROR_OUTOFMEMORY:
  case ERROR_COMMITMENT_LIMIT:
  case ERROR_WORKING_SET_QUOTA:
  case ERROR_INVALID_ADDRESS: /* nothing reserved there */
    return ENOMEM;
  case ERROR_ACCESS_DENIED:
  case ERROR_PRIVILEGE_NOT_HELD:
    return EPERM;
  default:
    return EINVAL;
  }
}

static bool page_aligned(const void *addr) { return ((uintptr_t)addr & (kp_page_size() - 1)) == 0; }

int kp_os_reserve(void *hint, size_t size, bool commit, void **out) {
  DWORD type = MEM_RESERVE | (commit ? MEM_COMMIT : 0);
  DWORD prot = commit ? PAGE_READWRITE : PAGE_NOACCESS;
  void *p = hint ? VirtualAlloc(hint, size, type, prot) : NULL;
  /* A hint is only a hint, as for mmap: an occupied one means anywhere. */
  if (p == NULL) p = VirtualAlloc(NULL, size, type, prot);
  *out = p;
  /* A size no free range can hold is an invalid parameter to Windows and
   * no memory to the pool, as for mmap. */
  return p ? 0 : ENOMEM;
}

int kp_os_unmap(void *addr, size_t size) {
  (void)size; /* a reservation is released whole, from its base */
  if (!page_aligned(addr)) return EINVAL;
  return VirtualFree(addr, 0, MEM_RELEASE) ? 0 : last_error();
}

int kp_os_commit(void *addr, size_t size) {
  return VirtualAlloc(addr, size, MEM_COMMIT, PAGE_READWRITE) ? 0 : last_error();
}

int kp_os_decommit(void *addr, size_t size) { return VirtualFree(addr, size, MEM_DECOMMIT) ? 0 : last_error(); }

/* MEM_RESET and DiscardVirtualMemory keep stale contents until the pages
 * are reclaimed; only decommitting guarantees zero pages afterwards. */
int kp_os_purge(void *addr, size_t size) {
  int rc = kp_os_decommit(addr, size);
  return rc ? rc : kp_os_commit(addr, size);
}

int kp_os_remap(void *addr, size_t old_size, size_t new_size, void *to) {
  (void)addr, (void)old_size, (void)new_size, (void)to;
  return ENOTSUP; /* a reservation cannot grow or move: realloc copies */
}

bool kp_os_is_mapped(const void *addr) {
  MEMORY_BASIC_INFORMATION mbi;
  if (VirtualQuery(addr, &mbi, sizeof mbi) == 0) return false;
  return mbi.State != MEM_FREE;
}

/* Whether the page holding addr is committed. */
static bool committed(const void *addr) {
  MEMORY_BASIC_INFORMATION mbi;
  return VirtualQuery(addr, &mbi, sizeof mbi) != 0 && mbi.State == MEM_COMMIT;
}

/* Pages that are not committed are reported as on Linux (ENOMEM), not
 * as whatever access error VirtualLock gives. */
int kp_os_lock(void *addr, size_t size) {
  if (!committed(addr)) return ENOMEM;
  return VirtualLock(addr, size) ? 0 : last_error();
}

int kp_os_unlock(void *addr, size_t size) { return VirtualUnlock(addr, size) ? 0 : last_error(); }

/* Windows has large pages only as a mapping-time choice (MEM_LARGE_PAGES,
 * with a privilege), no advice on existing ranges. */
int kp_os_advise_huge(void *addr, size_t size, bool huge) {
  (void)size;
  (void)huge;
  return page_aligned(addr) ? ENOTSUP : EINVAL;
}

void kp_os_yield(void) { SwitchToThread(); }

uint64_t kp_os_now_ns(void) {
  static LARGE_INTEGER freq;
  LARGE_INTEGER now;
  if (freq.QuadPart == 0) QueryPerformanceFrequency(&freq);
  QueryPerformanceCounter(&now);
  uint64_t f = (uint64_t)freq.QuadPart, t = (uint64_t)now.QuadPart;
  return t / f * 1000000000u + t % f * 1000000000u / f;
}

void kp_os_write_error(const char *text, size_t len) {
  HANDLE err = GetStdHandle(STD_ERROR_HANDLE);
  while (len > 0 && err != NULL && err != INVALID_HANDLE_VALUE) {
    DWORD n = 0;
    if (!WriteFile(err, text, len > 0x10000 ? 0x10000 : (DWORD)len, &n, NULL) || n == 0) break;
    text += n;
    len -= n;
  }
}

void kp_os_abort(void) { abort(); }

/* No fork on Windows. */
void kp_os_atfork_child(void (*child)(void)) { (void)child; }

const char *kp_os_getenv(const char *name) { return getenv(name); }

/* Thread exit: a fiber-local slot's callback runs when the thread (or
 * fiber) ends, with the slot's value, in a DLL and a static link alike. */
static DWORD exit_slot = FLS_OUT_OF_INDEXES;
static void (*volatile exit_destructor)(void *);
static INIT_ONCE exit_once = INIT_ONCE_STATIC_INIT;

/* MinGW's emulated TLS is torn down by a winpthreads key destructor when
 * a pthread's start routine returns, before any OS-level exit callback:
 * here the heap's slot reads its initial value again (from a fresh copy
 * the emulation allocates, and which nothing frees after this).  It is
 * pointed back at the heap being torn down, so the teardown sees its own
 * thread's heap. */
static void WINAPI exit_callback(void *arg) {
  if (arg == NULL || exit_destructor == NULL) return;
  kp_tls_heap = arg;
  exit_destructor(arg);
}

static BOOL CALLBACK exit_slot_create(INIT_ONCE *once, void *param, void **ctx) {
  (void)once;
  (void)ctx;
  exit_destructor = (void (*)(void *))param;
  exit_slot = FlsAlloc(exit_callback);
  return TRUE;
}

void kp_os_thread_exit_init(void (*destructor)(void *arg)) {
  InitOnceExecuteOnce(&exit_once, exit_slot_create, (void *)destructor, NULL);
}

void kp_os_thread_exit_arm(void *arg) {
  if (exit_slot != FLS_OUT_OF_INDEXES) FlsSetValue(exit_slot, arg);
}
