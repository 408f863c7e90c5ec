// kame::rt_section: nesting never weakens an enclosing section, leaving
// restores the mark, and held() sees the counters move.
#include "check.h"

#include <kame/rt_section.hpp>

#include <thread>

static const std::size_t big = std::size_t(80) << 20; // above the cache's top

int main()
{
    using kame::rt_level;
    using kame::rt_section;
    CHECK("a section marks the thread and restores it") {
        EXPECT(rt_section::current() == rt_level::off);
        {
            rt_section s;
            EXPECT(rt_section::current() == rt_level::defer);
            int other = -1;
            std::thread([&] { other = kame_pool_get_realtime_thread(); }).join();
            EXPECT_INT_EQ(other, KAME_RT_OFF); // per thread
        }
        EXPECT(rt_section::current() == rt_level::off);
    }
    CHECK("an inner DEFER keeps an outer STRICT; an inner STRICT raises an outer DEFER") {
        {
            rt_section outer(rt_level::strict);
            {
                rt_section inner(rt_level::defer);
                EXPECT(rt_section::current() == rt_level::strict);
                {
                    rt_section off(rt_level::off);
                    EXPECT(rt_section::current() == rt_level::strict);
                }
            }
            EXPECT(rt_section::current() == rt_level::strict);
        }
        EXPECT(rt_section::current() == rt_level::off);
        {
            rt_section outer(rt_level::defer);
            {
                rt_section inner(rt_level::strict);
                EXPECT(rt_section::current() == rt_level::strict);
            }
            EXPECT(rt_section::current() == rt_level::defer);
        }
        EXPECT(rt_section::current() == rt_level::off);
    }
    CHECK("held() is false once a section needed a mapping or forced a release") {
        kame_pool_set_rt_os_policy(KAME_RT_OS_COUNT);
        void *warm = kame_pool_malloc(64);
        // The address map's leaf for big blocks, made outside the section
        // (its mapping would count too).
        kame_pool_free(kame_pool_malloc(big));
        {
            rt_section s;
            kame_pool_free(warm);
            EXPECT(s.held());
            void *p = kame_pool_malloc(big); // a new mapping: counted
            EXPECT_U_EQ(s.violations(), 1);
            EXPECT(!s.held());
            kame_pool_set_rt_pending_cap(0);
            kame_pool_free(p); // no room to park: released inline
            EXPECT_U_EQ(s.forced_releases(), 1);
            kame_pool_set_rt_pending_cap(std::size_t(1) << 30);
        }
        kame_pool_set_rt_os_policy(KAME_RT_OS_ALLOW);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), 0);
    }
    return kp_check_summary();
}
