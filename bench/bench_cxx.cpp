// C++ allocation as programs do it: operator new and delete reached through
// standard containers, and the same container through std::pmr with
// different memory resources.  Like the other workloads it is not linked
// with the pool: whatever operator new the process has (the C++ library's,
// over the C library's malloc or one put in with LD_PRELOAD, or a preloaded
// allocator's own) is what gets measured.
//
//   bench_cxx CASE [-n OPS]
//
// CASE:
//   unique_ptr   a vector of 16K std::unique_ptr to 64-byte objects; each
//                operation replaces a random one (new, then sized delete)
//   map          std::map<uint64_t, uint64_t> of about 32K keys; each
//                operation inserts a random key and erases another
//   unordered_map  the same with std::unordered_map
//   pmr-pool-resource, pmr-unsynchronized, pmr-monotonic, pmr-new-delete
//                the map case as std::pmr::map over kame::pool_resource, over
//                std::pmr::unsynchronized_pool_resource and
//                monotonic_buffer_resource (their upstream the default
//                new_delete_resource), and over new_delete_resource itself.
//                kame::pool_resource needs the library: the preloaded one,
//                else ../libkamepoolalloc.so beside this program's directory
//                (loaded privately, so it replaces nothing).
//
// OPS defaults to 2M (K/M/G suffixes).  Every object carries a stamp that
// is checked when it is replaced, and the maps are checked against a
// shadow count at the end.  The last line of output:
//
//   RESULT workload=cxx ops=N seconds=S mops=R
//
// Exit status: 0 success, 1 an allocation failed, 2 bad usage, 3 a
// self-check failed.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <memory_resource>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_common.h"

namespace {

constexpr uint64_t DEFAULT_OPS = 2ull << 20;
constexpr size_t SLOTS = 16 << 10;
constexpr uint64_t KEYS = 64 << 10;  // keys drawn from [0, KEYS): about half present

struct Object {
  uint64_t stamp;
  uint64_t payload[7];
  explicit Object(uint64_t s) : stamp(s) {
    for (uint64_t &p : payload) p = s;
  }
};
static_assert(sizeof(Object) == 64, "a 64-byte object");

double run_unique_ptr(uint64_t ops) {
  std::vector<std::unique_ptr<Object>> slots(SLOTS);
  std::vector<uint64_t> stamps(SLOTS);
  uint64_t rng = bench_seed(1);
  for (size_t i = 0; i < SLOTS; i++) {
    stamps[i] = i;
    slots[i] = std::make_unique<Object>(i);
  }
  double t0 = bench_now();
  for (uint64_t i = 0; i < ops; i++) {
    size_t k = bench_below(&rng, SLOTS);
    if (__builtin_expect(slots[k]->stamp != stamps[k] || slots[k]->payload[6] != stamps[k], 0))
      bench_check_failed("bench_cxx: object in slot %zu lost its stamp", k);
    uint64_t s = SLOTS + i;
    slots[k] = std::make_unique<Object>(s);
    stamps[k] = s;
  }
  return bench_now() - t0;
}

// Inserts a random key, erases another; the shadow says which are present.
template <class Map> double run_map(Map &m, uint64_t ops) {
  std::vector<uint8_t> shadow(KEYS);
  uint64_t rng = bench_seed(2), present = 0;
  double t0 = bench_now();
  for (uint64_t i = 0; i < ops; i++) {
    uint64_t a = bench_below(&rng, KEYS), b = bench_below(&rng, KEYS);
    if (m.emplace(a, a * 3).second) shadow[a] = 1, present++;
    if (m.erase(b)) shadow[b] = 0, present--;
  }
  double t = bench_now() - t0;
  if (m.size() != present) bench_check_failed("bench_cxx: map holds %zu keys, expected %llu", m.size(),
                                              static_cast<unsigned long long>(present));
  for (const auto &kv : m)
    if (!shadow[kv.first] || kv.second != kv.first * 3)
      bench_check_failed("bench_cxx: key %llu is wrong", static_cast<unsigned long long>(kv.first));
  return t;
}

// kame::pool_resource without the header (which needs the library at link
// time): the same two calls, found at run time.
class PoolResource : public std::pmr::memory_resource {
 public:
  PoolResource(void *(*alloc)(size_t, size_t), void (*release)(void *)) : alloc_(alloc), release_(release) {}

 private:
  void *do_allocate(size_t bytes, size_t align) override {
    void *p = alloc_(align, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void do_deallocate(void *p, size_t, size_t) override { release_(p); }
  bool do_is_equal(const memory_resource &o) const noexcept override { return this == &o; }
  void *(*alloc_)(size_t, size_t);
  void (*release_)(void *);
};

void *find_pool_symbol(const char *name, const char *self) {
  if (void *f = dlsym(RTLD_DEFAULT, name)) return f;  // the preloaded library
  std::string dir(self);
  size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? std::string(".") : dir.substr(0, slash);
  void *h = dlopen((dir + "/../libkamepoolalloc.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  return h ? dlsym(h, name) : nullptr;
}

using Key = uint64_t;

double run_pmr(std::pmr::memory_resource *r, uint64_t ops) {
  std::pmr::map<Key, Key> m(r);
  return run_map(m, ops);
}

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: bench_cxx unique_ptr|map|unordered_map|pmr-pool-resource|"
                       "pmr-unsynchronized|pmr-monotonic|pmr-new-delete [-n OPS]\n");
  std::exit(BENCH_EXIT_USAGE);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) usage();
  std::string which = argv[1];
  uint64_t ops = DEFAULT_OPS;
  for (int i = 2; i < argc; i++) {
    if (std::strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      if (bench_parse_u64(argv[++i], &ops) != 0 || ops == 0) usage();
    } else {
      usage();
    }
  }
  double seconds = 0;
  try {
    if (which == "unique_ptr") {
      seconds = run_unique_ptr(ops);
    } else if (which == "map") {
      std::map<Key, Key> m;
      seconds = run_map(m, ops);
    } else if (which == "unordered_map") {
      std::unordered_map<Key, Key> m;
      seconds = run_map(m, ops);
    } else if (which == "pmr-pool-resource") {
      auto alloc = reinterpret_cast<void *(*)(size_t, size_t)>(find_pool_symbol("kame_pool_aligned_alloc", argv[0]));
      auto release = reinterpret_cast<void (*)(void *)>(find_pool_symbol("kame_pool_free", argv[0]));
      if (alloc == nullptr || release == nullptr) {
        std::fprintf(stderr, "bench_cxx: libkamepoolalloc.so not found: %s\n", dlerror());
        return BENCH_EXIT_USAGE;
      }
      PoolResource r(alloc, release);
      seconds = run_pmr(&r, ops);
    } else if (which == "pmr-unsynchronized") {
      std::pmr::unsynchronized_pool_resource r;
      seconds = run_pmr(&r, ops);
    } else if (which == "pmr-monotonic") {
      std::pmr::monotonic_buffer_resource r;
      seconds = run_pmr(&r, ops);
    } else if (which == "pmr-new-delete") {
      seconds = run_pmr(std::pmr::new_delete_resource(), ops);
    } else {
      usage();
    }
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "bench_cxx: an allocation failed (std::bad_alloc)\n");
    return BENCH_EXIT_NULL;
  }
  bench_result("workload=cxx ops=%llu seconds=%.4f mops=%.3f", static_cast<unsigned long long>(ops), seconds,
               ops / seconds / 1e6);
  return 0;
}
