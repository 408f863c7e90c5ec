// kame::aligned_allocator<T, Align>: a standard allocator whose blocks are
// aligned to Align bytes (at least alignof(T)), for SIMD data and buffers
// kept on cache lines of their own, in the manner of
// Eigen::aligned_allocator:
//
//   std::vector<float, kame::aligned_allocator<float, 64>> samples;
//   std::vector<Eigen::Matrix4d, kame::aligned_allocator<Eigen::Matrix4d>> ms;
//
// Align is a power of two, 64 by default (a cache line; enough for AVX-512).
// The pool serves alignments up to 32 KiB from size classes whose slots are
// naturally aligned, larger ones from its 256 KiB-aligned and 32 MiB-aligned
// tiers, so no block carries padding or a header.  Every aligned_allocator
// equals every other: the pool frees any of its blocks.
// Needs C++17 and linking with kamepoolalloc.
#ifndef KAME_POOL_ALIGNED_ALLOCATOR_HPP
#define KAME_POOL_ALIGNED_ALLOCATOR_HPP

#include <cstddef>
#include <type_traits>

#include <kame/detail/allocate.hpp>

namespace kame {

template <class T, std::size_t Align = 64> class aligned_allocator {
  static_assert(Align != 0 && (Align & (Align - 1)) == 0, "Align must be a power of two");

 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using propagate_on_container_move_assignment = std::true_type;
  using is_always_equal = std::true_type;
  // Rebinding keeps the alignment (allocator_traits cannot deduce it).
  template <class U> struct rebind {
    using other = aligned_allocator<U, Align>;
  };

  static constexpr std::size_t alignment = Align < alignof(T) ? alignof(T) : Align;

  constexpr aligned_allocator() noexcept = default;
  template <class U> constexpr aligned_allocator(const aligned_allocator<U, Align> &) noexcept {}

  [[nodiscard]] T *allocate(std::size_t n) {
    return static_cast<T *>(detail::allocate(detail::array_bytes(n, sizeof(T)), alignment));
  }
  void deallocate(T *p, std::size_t) noexcept { detail::deallocate(p); }
};

template <class T, std::size_t A, class U, std::size_t B>
constexpr bool operator==(const aligned_allocator<T, A> &, const aligned_allocator<U, B> &) noexcept {
  return true;
}
template <class T, std::size_t A, class U, std::size_t B>
constexpr bool operator!=(const aligned_allocator<T, A> &, const aligned_allocator<U, B> &) noexcept {
  return false;
}

}  // namespace kame

#endif
