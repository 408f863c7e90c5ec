// kame::pool_allocator<T>: a standard allocator whose memory comes from the
// pool, for any standard container (or any allocator-aware one, such as
// Boost.Container's), without replacing malloc or operator new:
//
//   std::vector<int, kame::pool_allocator<int>> v;
//   std::map<int, std::string, std::less<int>,
//            kame::pool_allocator<std::pair<const int, std::string>>> m;
//
// Stateless: every pool_allocator equals every other, whatever its T, since
// the pool frees any of its blocks from anywhere.  Over-aligned T get their
// alignment.  Out of memory: the new-handler loop, then std::bad_alloc.
// Needs C++17 and linking with kamepoolalloc.
#ifndef KAME_POOL_ALLOCATOR_HPP
#define KAME_POOL_ALLOCATOR_HPP

#include <cstddef>
#include <type_traits>

#include <kame/detail/allocate.hpp>

namespace kame {

template <class T> class pool_allocator {
 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using propagate_on_container_move_assignment = std::true_type;
  using is_always_equal = std::true_type;

  constexpr pool_allocator() noexcept = default;
  template <class U> constexpr pool_allocator(const pool_allocator<U> &) noexcept {}

  [[nodiscard]] T *allocate(std::size_t n) {
    return static_cast<T *>(detail::allocate(detail::array_bytes(n, sizeof(T)), alignof(T)));
  }
  void deallocate(T *p, std::size_t) noexcept { detail::deallocate(p); }
};

template <class T, class U>
constexpr bool operator==(const pool_allocator<T> &, const pool_allocator<U> &) noexcept {
  return true;
}
template <class T, class U>
constexpr bool operator!=(const pool_allocator<T> &, const pool_allocator<U> &) noexcept {
  return false;
}

}  // namespace kame

#endif
