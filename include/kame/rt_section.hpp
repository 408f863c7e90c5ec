// kame::rt_section: marks the calling thread realtime for a scope
// (docs/realtime.md), and tells whether the realtime contract held over it.
//
//   {
//     kame::rt_section rt;                 // KAME_RT_DEFER for this scope
//     control_cycle();
//     if (!rt.held()) log_overrun();       // a mapping was needed, or a forced release
//   }
//
// Sections nest without weakening: an inner section asks for at least its
// level, and keeps an outer STRICT when it asks for DEFER; leaving a
// section restores the mark the thread had when it was entered.  The
// counters are process-wide, so held() reports what any realtime thread
// did while this section was open.  Needs C++11 and linking with
// kamepoolalloc.
#ifndef KAME_RT_SECTION_HPP
#define KAME_RT_SECTION_HPP

#include <kame_pool.h>

namespace kame {

enum class rt_level : int { off = KAME_RT_OFF, defer = KAME_RT_DEFER, strict = KAME_RT_STRICT };

class rt_section {
 public:
  explicit rt_section(rt_level level = rt_level::defer) noexcept
      : previous_(kame_pool_set_realtime_thread(static_cast<int>(level))),
        violations_(kame_pool_rt_violations()),
        forced_(kame_pool_rt_forced_releases()) {
    // The thread was marked higher already: keep that.
    if (previous_ > static_cast<int>(level)) kame_pool_set_realtime_thread(previous_);
  }
  ~rt_section() { kame_pool_set_realtime_thread(previous_); }
  rt_section(const rt_section &) = delete;
  rt_section &operator=(const rt_section &) = delete;

  // The level the thread runs at now (its mark or the process-wide floor).
  static rt_level current() noexcept { return static_cast<rt_level>(kame_pool_get_realtime_thread()); }
  // Counted since the section was entered.
  unsigned long long violations() const noexcept { return kame_pool_rt_violations() - violations_; }
  unsigned long long forced_releases() const noexcept { return kame_pool_rt_forced_releases() - forced_; }
  // The contract held over the section so far.
  bool held() const noexcept { return violations() == 0 && forced_releases() == 0; }

 private:
  int previous_;
  unsigned long long violations_, forced_;
};

}  // namespace kame

#endif
