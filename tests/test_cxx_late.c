/* A C program under LD_PRELOAD of the pool that loads a C++ library late,
 * with dlopen.  The pool binds the C++ runtime weakly, so a C program does
 * not load libstdc++ at all; the library's operator new and delete are the
 * pool's, and their out-of-memory path (the new-handler loop, then
 * std::bad_alloc) must find the runtime that arrived with the library.
 * Usage: test_cxx_late PLUGIN.so */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static int mapped(const char *name) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  int found = 0;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (strstr(line, name) != NULL) found = 1;
  if (f != NULL) fclose(f);
  return found;
}

int main(int argc, char **argv) {
  void *plugin = NULL;
  CHECK("the pool is preloaded without a C++ runtime") {
    EXPECT(argc == 2);
    EXPECT(dlsym(RTLD_DEFAULT, "kame_pool_malloc") != NULL);
    EXPECT(!mapped("libstdc++"));
  }
  CHECK("dlopen of a C++ library brings the runtime") {
    plugin = argc == 2 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (plugin == NULL) fprintf(stderr, "dlopen: %s\n", dlerror());
    if (!EXPECT(plugin != NULL)) continue;
    EXPECT(mapped("libstdc++"));
  }
  if (plugin == NULL) return kp_check_summary();
  size_t (*usable)(void) = (size_t (*)(void))dlsym(plugin, "late_new_usable");
  int (*oom)(void) = (int (*)(void))dlsym(plugin, "late_new_oom");
  int (*nothrow_null)(void) = (int (*)(void))dlsym(plugin, "late_new_nothrow_null");
  CHECK("the library's new and delete are the pool's") {
    if (!EXPECT(usable != NULL)) continue;
    EXPECT_U_EQ(usable(), 4096); /* the pool's exact power-of-two class */
  }
  CHECK("out of memory: the handler loop, then bad_alloc caught by the library") {
    if (!EXPECT(oom != NULL)) continue;
    EXPECT_INT_EQ(oom(), 2);
  }
  CHECK("out of memory: nothrow new returns nullptr") {
    if (!EXPECT(nothrow_null != NULL)) continue;
    EXPECT_INT_EQ(nothrow_null(), 1);
  }
  return kp_check_summary();
}
