// kame::pool_resource: a std::pmr::memory_resource over the pool, for every
// std::pmr container (and through std::pmr::polymorphic_allocator, any
// allocator-aware container), without replacing malloc or operator new:
//
//   std::pmr::vector<std::pmr::string> names{kame::pool_memory_resource()};
//   std::pmr::set_default_resource(kame::pool_memory_resource());
//
// The resource has no state and takes no lock: any thread may allocate and
// any thread may free, and every pool_resource equals every other (with
// RTTI; without it, only itself), since the pool frees any of its blocks.
// pool_memory_resource() returns one instance that is never destroyed, so
// containers of static storage duration may still free into it at exit.
// Out of memory: the new-handler loop, then std::bad_alloc.
// Needs C++17 and linking with kamepoolalloc.
#ifndef KAME_POOL_RESOURCE_HPP
#define KAME_POOL_RESOURCE_HPP

#include <cstddef>
#include <memory_resource>
#include <new>

#include <kame/detail/allocate.hpp>

namespace kame {

class pool_resource : public std::pmr::memory_resource {
 protected:
  void *do_allocate(std::size_t bytes, std::size_t align) override {
    return detail::allocate(bytes, align);
  }
  void do_deallocate(void *p, std::size_t, std::size_t) override { detail::deallocate(p); }
  bool do_is_equal(const std::pmr::memory_resource &other) const noexcept override {
#if defined(__cpp_rtti) || defined(__GXX_RTTI)
    return this == &other || dynamic_cast<const pool_resource *>(&other) != nullptr;
#else
    return this == &other;
#endif
  }
};

inline pool_resource *pool_memory_resource() noexcept {
  alignas(pool_resource) static unsigned char storage[sizeof(pool_resource)];
  static pool_resource *const resource = ::new (static_cast<void *>(storage)) pool_resource();
  return resource;
}

}  // namespace kame

#endif
