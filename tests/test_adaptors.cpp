// The header-only C++ adaptors (include/kame/) in real container code:
// kame::pool_allocator with every standard container, kame::pool_resource
// under the std::pmr containers (and as the upstream of the standard pool
// resources), kame::aligned_allocator with over-aligned types, and Eigen
// and Boost.Container where their headers are installed.  Each container's
// contents are checked against the same operations on std::allocator, and
// large fills show the memory comes from the pool (its mapped bytes grow).
// The adaptors use the C API only, so this runs in every configuration,
// the sanitizer builds included; tests/cxx_compilers.sh also builds it
// with g++ and clang++ in C++17 and C++20.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <forward_list>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <memory_resource>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <kame/aligned_allocator.hpp>
#include <kame/pool_allocator.hpp>
#include <kame/pool_resource.hpp>

#if defined(KP_HAVE_EIGEN) && __has_include(<Eigen/Dense>)
#include <Eigen/Dense>
#include <Eigen/StdVector>
#define KP_EIGEN 1
#endif
#if __has_include(<boost/container/flat_map.hpp>) && __has_include(<boost/container/vector.hpp>)
#include <boost/container/flat_map.hpp>
#include <boost/container/vector.hpp>
#define KP_BOOST 1
#endif

#include "check.h"
#include "kame_pool.h"

namespace {

constexpr size_t MiB = size_t{1} << 20;

template <class T> using pa = kame::pool_allocator<T>;
using pool_string = std::basic_string<char, std::char_traits<char>, pa<char>>;

// A pseudo-random sequence, the same on every run.
struct Rng {
  uint64_t s = 0x9e3779b97f4a7c15u;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

// Runs F, which fills containers with N elements in all, and checks that
// the pool mapped more memory meanwhile: the containers' memory is the
// pool's, not the C library's.
template <class F> void expect_pool_grows(const char *what, F f) {
  size_t before = kame_pool_reserved_bytes();
  size_t during = f();
  EXPECTF(during >= before + 32 * MiB, "%s: the pool mapped %zu bytes before, %zu with the container", what,
          before, during);
}

// ---- kame::pool_allocator ------------------------------------------------------

void check_sequences() {
  CHECK("vector, deque, list, forward_list with pool_allocator equal std::allocator's") {
    std::vector<int> ref;
    std::vector<int, pa<int>> v;
    std::deque<int, pa<int>> d;
    std::list<int, pa<int>> l;
    std::forward_list<int, pa<int>> f;
    Rng r;
    for (int i = 0; i < 100000; i++) {
      int x = static_cast<int>(r.next() % 1000000);
      ref.push_back(x);
      v.push_back(x);
      d.push_front(x);
      l.push_back(x);
      f.push_front(x);
    }
    EXPECT(std::equal(ref.begin(), ref.end(), v.begin(), v.end()));
    EXPECT(std::equal(ref.rbegin(), ref.rend(), d.begin(), d.end()));
    EXPECT(std::equal(ref.begin(), ref.end(), l.begin(), l.end()));
    EXPECT(std::equal(ref.rbegin(), ref.rend(), f.begin(), f.end()));
    l.sort();
    std::vector<int> sorted = ref;
    std::sort(sorted.begin(), sorted.end());
    EXPECT(std::equal(sorted.begin(), sorted.end(), l.begin(), l.end()));
    v.erase(std::remove_if(v.begin(), v.end(), [](int x) { return x % 3 == 0; }), v.end());
    v.shrink_to_fit();
    EXPECT_U_EQ(v.size(), static_cast<size_t>(std::count_if(ref.begin(), ref.end(), [](int x) { return x % 3; })));
    // All pool allocators are equal: moves and swaps take the memory along.
    std::vector<int, pa<int>> w(std::move(v));
    const int *data = w.data();
    std::vector<int, pa<int>> z;
    z = std::move(w);
    EXPECT(z.data() == data);
    z.swap(w);
    EXPECT(w.data() == data);
  }
  CHECK("vector<int, pool_allocator> of 64 MiB is the pool's memory") {
    expect_pool_grows("vector", [] {
      std::vector<int, pa<int>> v(16 * MiB, 7);
      EXPECT(v[16 * MiB - 1] == 7);
      return kame_pool_reserved_bytes();
    });
  }
}

void check_associative() {
  CHECK("map, multimap, set, unordered_map, unordered_set with pool_allocator equal std::allocator's") {
    std::map<uint64_t, uint64_t> ref;
    std::map<uint64_t, uint64_t, std::less<uint64_t>, pa<std::pair<const uint64_t, uint64_t>>> m;
    std::multimap<uint64_t, int, std::less<uint64_t>, pa<std::pair<const uint64_t, int>>> mm;
    std::set<uint64_t, std::less<uint64_t>, pa<uint64_t>> s;
    std::unordered_map<uint64_t, uint64_t, std::hash<uint64_t>, std::equal_to<uint64_t>,
                       pa<std::pair<const uint64_t, uint64_t>>>
        um;
    std::unordered_set<uint64_t, std::hash<uint64_t>, std::equal_to<uint64_t>, pa<uint64_t>> us;
    Rng r;
    for (int i = 0; i < 200000; i++) {
      uint64_t k = r.next() % 50000, v = r.next();
      if (i % 4 == 3) {
        ref.erase(k);
        m.erase(k);
        s.erase(k);
        um.erase(k);
        us.erase(k);
      } else {
        ref[k] = v;
        m[k] = v;
        s.insert(k);
        um[k] = v;
        us.insert(k);
      }
      mm.emplace(k % 100, i);
    }
    EXPECT(std::equal(ref.begin(), ref.end(), m.begin(), m.end()));
    EXPECT_U_EQ(s.size(), ref.size());
    EXPECT_U_EQ(um.size(), ref.size());
    EXPECT_U_EQ(us.size(), ref.size());
    bool same = true;
    for (const auto &kv : ref) same = same && um.count(kv.first) && um[kv.first] == kv.second && s.count(kv.first);
    EXPECT(same);
    EXPECT_U_EQ(mm.size(), 200000);
    EXPECT_U_EQ(mm.count(42), static_cast<size_t>(std::count_if(mm.begin(), mm.end(),
                                                                [](const auto &kv) { return kv.first == 42; })));
  }
  CHECK("map nodes from pool_allocator are the pool's memory") {
    expect_pool_grows("map", [] {
      std::map<int, int, std::less<int>, pa<std::pair<const int, int>>> m;
      for (int i = 0; i < 1 << 20; i++) m.emplace_hint(m.end(), i, i);
      EXPECT_U_EQ(m.size(), 1u << 20);
      return kame_pool_reserved_bytes();
    });
  }
}

void check_strings_and_shared() {
  CHECK("basic_string with pool_allocator, in a vector of the same") {
    std::vector<pool_string, pa<pool_string>> v;
    std::vector<std::string> ref;
    for (int i = 0; i < 20000; i++) {
      std::string s(static_cast<size_t>(i % 300), static_cast<char>('a' + i % 26));
      s += std::to_string(i);
      ref.push_back(s);
      v.emplace_back(s.c_str());
    }
    bool same = v.size() == ref.size();
    for (size_t i = 0; same && i < ref.size(); i++) same = ref[i] == v[i].c_str();
    EXPECT(same);
    pool_string joined;
    for (size_t i = 0; i < 100; i++) joined += v[i];
    std::string joined_ref;
    for (size_t i = 0; i < 100; i++) joined_ref += ref[i];
    EXPECT(joined_ref == joined.c_str());
  }
  CHECK("allocate_shared with pool_allocator") {
    struct Obj {
      int a[10];
    };
    std::vector<std::shared_ptr<Obj>> v;
    for (int i = 0; i < 10000; i++) {
      v.push_back(std::allocate_shared<Obj>(pa<Obj>()));
      v.back()->a[9] = i;
    }
    std::vector<std::shared_ptr<Obj>> copies(v.begin(), v.end());
    v.clear();
    bool ok = true;
    for (size_t i = 0; i < copies.size(); i++) ok = ok && copies[i]->a[9] == static_cast<int>(i);
    EXPECT(ok);
  }
  CHECK("pool_allocator: over-aligned T, and sizes no allocator can serve") {
    struct alignas(256) Block {
      char c[256];
    };
    std::vector<Block, pa<Block>> v(3);
    EXPECT_ALIGNED(v.data(), 256);
    pa<int> a;
    bool overflow = false, too_big = false;
    try {
      (void)a.allocate(SIZE_MAX / 2);
    } catch (const std::bad_array_new_length &) {
      overflow = true;
    }
    try {
      (void)a.allocate(static_cast<size_t>(PTRDIFF_MAX) / sizeof(int) + 1);
    } catch (const std::bad_alloc &) {
      too_big = true;
    }
    EXPECT(overflow);
    EXPECT(too_big);
  }
}

// ---- kame::pool_resource --------------------------------------------------------

int g_handler_calls;
void handler_uninstalls() {
  g_handler_calls++;
  std::set_new_handler(nullptr);
}

void check_resource() {
  std::pmr::memory_resource *pool = kame::pool_memory_resource();
  CHECK("pmr containers over pool_resource, nested strings use it too") {
    std::pmr::vector<std::pmr::string> names(pool);
    std::pmr::map<int, std::pmr::string> m(pool);
    std::pmr::unordered_map<int, int> um(pool);
    for (int i = 0; i < 20000; i++) {
      names.emplace_back(std::to_string(i) + std::string(static_cast<size_t>(i % 64), 'x'));
      m.emplace(i, names.back());
      um[i % 977] += i;
    }
    EXPECT(names[12345].get_allocator().resource() == pool);
    EXPECT(m.at(777).get_allocator().resource() == pool);
    EXPECT(m.at(19999) == names[19999]);
    long sum = 0;
    for (const auto &kv : um) sum += kv.second;
    EXPECT_INT_EQ(sum, 19999L * 20000 / 2);
  }
  CHECK("pmr vector over pool_resource is the pool's memory") {
    expect_pool_grows("pmr vector", [pool] {
      std::pmr::vector<uint64_t> v(8 * MiB, 1, pool);
      EXPECT(v[8 * MiB - 1] == 1);
      return kame_pool_reserved_bytes();
    });
  }
  CHECK("pool_resource: alignments, equality, one instance") {
    for (size_t align = 1; align <= 64 * 1024; align *= 2) {
      for (size_t bytes : {size_t{1}, size_t{8}, size_t{100}, size_t{5000}, 3 * MiB}) {
        void *p = pool->allocate(bytes, align);
        EXPECT_ALIGNED(p, align);
        std::memset(p, 0xab, bytes);
        pool->deallocate(p, bytes, align);
      }
    }
    // Zero bytes at any alignment: still a block of its own.
    void *live = pool->allocate(256, 8);
    for (size_t align = 1; align <= 1 << 20; align *= 4) {
      void *p = pool->allocate(0, align), *q = pool->allocate(0, align);
      EXPECT(p != q && p != live && q != live);
      EXPECT_ALIGNED(p, align);
      EXPECT_U_GE(kame_pool_malloc_usable_size(p), 1);
      pool->deallocate(p, 0, align);
      pool->deallocate(q, 0, align);
    }
    pool->deallocate(live, 256, 8);
    kame::pool_resource other;
    EXPECT(pool->is_equal(other));
    EXPECT(other.is_equal(*pool));
    EXPECT(!pool->is_equal(*std::pmr::new_delete_resource()));
    EXPECT(kame::pool_memory_resource() == pool);
    // Equal resources: a move assignment takes the memory along.
    std::pmr::vector<int> a(1000, 1, pool), b(&other);
    const int *data = a.data();
    b = std::move(a);
    EXPECT(b.data() == data);
  }
  CHECK("pool_resource as the default resource") {
    std::pmr::memory_resource *old = std::pmr::set_default_resource(pool);
    {
      std::pmr::vector<int> v(100, 3);
      EXPECT(v.get_allocator().resource() == pool);
    }
    std::pmr::set_default_resource(old);
  }
  CHECK("pool_resource as the upstream of the standard pool resources") {
    std::pmr::unsynchronized_pool_resource pooled(pool);
    std::pmr::monotonic_buffer_resource mono(pool);
    std::pmr::list<int> l(&pooled);
    std::pmr::vector<int> v(&mono);
    for (int i = 0; i < 100000; i++) {
      l.push_back(i);
      v.push_back(i);
    }
    EXPECT_INT_EQ(std::accumulate(l.begin(), l.end(), 0LL), 99999LL * 100000 / 2);
    EXPECT_INT_EQ(std::accumulate(v.begin(), v.end(), 0LL), 99999LL * 100000 / 2);
  }
  CHECK("pool_resource out of memory: the new-handler loop, then bad_alloc") {
    g_handler_calls = 0;
    std::set_new_handler(handler_uninstalls);
    bool caught = false;
    try {
      (void)pool->allocate(SIZE_MAX / 2, 8);
    } catch (const std::bad_alloc &) {
      caught = true;
    }
    EXPECT(caught);
    EXPECT_INT_EQ(g_handler_calls, 1);
    std::set_new_handler(nullptr);
  }
  CHECK("a pmr container filled by one thread, freed by another") {
    auto *v = new std::pmr::vector<std::pmr::string>(pool);
    std::thread t([v] {
      for (int i = 0; i < 50000; i++) v->emplace_back(std::string(40, 'q'));
    });
    t.join();
    EXPECT_U_EQ(v->size(), 50000);
    std::thread u([v] { delete v; });
    u.join();
  }
}

// ---- kame::aligned_allocator -------------------------------------------------------

struct alignas(64) CacheLine {
  uint64_t words[8];
};

void check_aligned() {
  CHECK("vector of an over-aligned type with aligned_allocator, through growth") {
    std::vector<CacheLine, kame::aligned_allocator<CacheLine>> v;
    bool aligned = true;
    for (uint64_t i = 0; i < 100000; i++) {
      v.push_back(CacheLine{{i, i, i, i, i, i, i, i}});
      aligned = aligned && reinterpret_cast<uintptr_t>(v.data()) % 64 == 0;
    }
    EXPECT(aligned);
    uint64_t sum = 0;
    for (const auto &c : v) sum += c.words[7];
    EXPECT_U_EQ(sum, 99999ull * 100000 / 2);
  }
  CHECK("aligned_allocator<float, 32> and <char, 4096>, <double, 1 MiB>") {
    std::vector<float, kame::aligned_allocator<float, 32>> f(1001, 1.5f);
    EXPECT_ALIGNED(f.data(), 32);
    std::vector<char, kame::aligned_allocator<char, 4096>> page(10000);
    EXPECT_ALIGNED(page.data(), 4096);
    std::vector<double, kame::aligned_allocator<double, 1 << 20>> huge(3);
    EXPECT_ALIGNED(huge.data(), 1 << 20);
    static_assert(kame::aligned_allocator<CacheLine, 16>::alignment == 64, "never below alignof(T)");
  }
  CHECK("rebinding keeps the alignment: list nodes on 128-byte boundaries") {
    std::list<int, kame::aligned_allocator<int, 128>> l;
    for (int i = 0; i < 1000; i++) l.push_back(i);
    bool aligned = true;
    for (const int &x : l) aligned = aligned && reinterpret_cast<uintptr_t>(&x) % 128 < 32;
    EXPECT(aligned);
    std::map<int, int, std::less<int>, kame::aligned_allocator<std::pair<const int, int>, 256>> m;
    for (int i = 0; i < 1000; i++) m[i] = i;
    EXPECT((m.get_allocator() == kame::aligned_allocator<int, 8>()));
  }
}

// ---- Eigen and Boost.Container ----------------------------------------------------

void check_eigen() {
#ifdef KP_EIGEN
  CHECK("Eigen fixed-size matrices in a vector with aligned_allocator, as with Eigen's own") {
    using M = Eigen::Matrix4d;
    std::vector<M, kame::aligned_allocator<M, 32>> ours;
    std::vector<M, Eigen::aligned_allocator<M>> theirs;
    for (int i = 0; i < 5000; i++) {
      M m;
      for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) m(r, c) = ((i * 7 + r * 5 + c * 3) % 17) / 8.0;
      ours.push_back(m);
      theirs.push_back(m);
    }
    EXPECT_ALIGNED(ours.data(), 32);
    M a = M::Identity(), b = M::Identity();
    for (size_t i = 0; i < ours.size(); i++) {
      a = (a * ours[i]).eval() / (1.0 + a.norm());
      b = (b * theirs[i]).eval() / (1.0 + b.norm());
    }
    // Not bit for bit: x87 arithmetic (32-bit x86) keeps intermediates in
    // 80 bits, rounded where the compiler spills them, which differs
    // between the two loops.
    EXPECT(a.isApprox(b, 1e-12));
    // Dynamic-size objects allocate through malloc (the pool only with the
    // override); in a vector with the pool's allocator they still work.
    std::vector<Eigen::VectorXf, kame::aligned_allocator<Eigen::VectorXf>> vs;
    for (int i = 0; i < 100; i++) vs.push_back(Eigen::VectorXf::Constant(i + 1, 2.0f));
    EXPECT(vs[99].sum() == 200.0f);
  }
#else
  std::printf("SKIP Eigen: headers not found (apt-get install libeigen3-dev)\n");
#endif
}

void check_boost() {
#ifdef KP_BOOST
  CHECK("Boost.Container vector and flat_map with pool_allocator") {
    boost::container::vector<int, pa<int>> v;
    boost::container::flat_map<int, int, std::less<int>, pa<std::pair<int, int>>> fm;
    for (int i = 0; i < 10000; i++) {
      v.push_back(i);
      fm.emplace(9999 - i, i);
    }
    EXPECT_INT_EQ(std::accumulate(v.begin(), v.end(), 0L), 9999L * 10000 / 2);
    EXPECT_INT_EQ(fm.begin()->first, 0);
    EXPECT_INT_EQ(fm.at(0), 9999);
  }
#else
  std::printf("SKIP Boost.Container: headers not found (apt-get install libboost-dev)\n");
#endif
}

}  // namespace

int main() {
  check_sequences();
  check_associative();
  check_strings_and_shared();
  check_resource();
  check_aligned();
  check_eigen();
  check_boost();
  return kp_check_summary();
}
