/* The region's unit bitmap (src/region.c): claiming a run of units
 * (kp_units_claim through claim_anywhere and region_claim_units: dirty
 * units first, then any, then a few rescans while a cleaner holds
 * units), giving it back (units_free, through kp_units_free and
 * kp_units_free_dirty_within, called from release.c) and returning the
 * pages of free dirty units to the OS (kp_units_clean_dirty, called by
 * the drain and by kp_trim).
 *
 * One bitmap word of W units is modelled; unit 0 is the region's metadata
 * unit and is claimed from the start, as region_create leaves it.  Two
 * threads claim a run of 1 or 2 units, write to it and give it back, the
 * first twice and the second once (-DB_ROUNDS=2: twice too); a third
 * thread runs one drain's cleaning pass meanwhile (-DCLEANERS=2: a fourth
 * runs a trim's).  Units 1 and 2 start free and dirty (given back earlier
 * with their pages resident).
 *
 * The claim (kp_units_claim):
 *  - reads `cleaned` (seen); then, if dirty_bytes is not 0, looks for a
 *    run of units free and dirty (busy = claimed | ~dirty, the dirty bits
 *    read by a load of their own after each read of the word); then for
 *    any free run.  dirty_bytes is a counter outside the word that only
 *    decides whether the dirty pass runs: the model runs it or not at its
 *    choice;
 *  - while it has no run: reads `cleaning` and `cleaned`, stops if no
 *    cleaner is at work and none finished since `seen`, else keeps the
 *    new `seen` and scans again (the yield changes nothing here), at most
 *    RESCANS times;
 *  - then maps a new region and takes its units there: outside the
 *    modelled word, so the round ends with no effect on it.
 * The stop test reads `cleaning` before `cleaned`, as src/region.c
 * does.  The other way round, a cleaner that lets its units go and
 * finishes between the two loads is missed: the claim stops although the
 * units that hid a run from its scan are free (BUG_STOP_LOADS, found).
 *
 * The cleaner (kp_units_clean_dirty): increments `cleaning`; takes the
 * free dirty units it finds idle with one CAS on the word (cur | take;
 * whether a unit is idle depends on its drain stamp, read unclaimed and
 * perhaps stale, a policy's imprecision: so a drain's pass takes any
 * subset of the free dirty units, a trim's takes them all); learns which
 * are still dirty with a fetch_and of their dirty bits (was); purges each
 * run of adjacent units of `was`, and the OS may refuse a purge (locked
 * pages): those units are stamped again and put back dirty with one
 * fetch_or; lets all its units go with one fetch_and; increments
 * `cleaned`, then decrements `cleaning`.  Stamps are not modelled (the
 * idle choice covers any value).
 *
 * Whether freed units keep their pages is release.c's decision, not
 * region.c's: kp_chunk_release purges the chunk and then frees its units
 * clean (kp_units_free(c, false)), or dirty if the purge was refused;
 * kp_units_free(c, true) and kp_units_free_dirty_within free them dirty,
 * pages resident (stamp, fetch_or of the dirty bits, then fetch_and of
 * the claimed bits; dirty_bytes is not modelled).  The model lets every
 * release take either way, so the mechanism is checked for any policy
 * release.c may adopt.  Releases of dedicated chunks, and of chunks the
 * recycle cache gives back, are the same protocol.
 *
 * Every atomic operation of the C code is one step here; plain accesses
 * to thread-private data are ordinary statements, or part of the
 * neighbouring step.  The plain pass's load of the word only decides its
 * CAS on the word, so the two are one step (a CAS that fails there is a
 * later load).  Ghost variables (owner, resident, held, hid) record who
 * holds a unit, whether its pages may be non-zero, which units cleaners
 * hold, and whether those would have made a free run at a scan's last
 * read of the word; they are updated in the same step as the atomic
 * operation that changes what they record.  Weak CASes may fail
 * spuriously; -DSPURIOUS=k allows at most k failures per thread (the
 * termination check uses 0: a weak CAS fails spuriously only finitely
 * often, and each failure only repeats the attempt).
 *
 * Properties:
 *  - a unit is in at most one live chunk (assert at every claim) [CHUNK-1];
 *  - no unit is purged while anyone else holds it (assert at every purge)
 *    [DIRTY-2];
 *  - a free unit whose dirty bit is clear has zero pages, so a claim that
 *    finds no dirty bit may skip zeroing (monitor, and assert at claim)
 *    [DIRTY-1];
 *  - a claim that stops before its last rescan (and maps a region for
 *    good) never does so right after a scan that found no run only
 *    because of units a cleaner held (assert at every early stop);
 *  - every run of every thread ends: no invalid end state, and with -DNP
 *    and pan -l no non-progress cycle, with no progress label anywhere,
 *    so the state graph has no cycle: a claim no longer waits on a
 *    cleaner's progress.
 *
 * Mutations (spin -DBUG_...): each must make verification fail.
 *  BUG_RELEASE_ORDER  the release clears its claimed bits before marking
 *                     the units dirty or purging them [DIRTY-1];
 *  BUG_PURGE_NOCLAIM  the cleaner computes its set from the word but does
 *                     not claim it before purging [DIRTY-2];
 *  BUG_CLAIM_PLAIN    the claim is a plain load and store, not a CAS
 *                     [CHUNK-1];
 *  BUG_DIRTY_ANY      the dirty pass looks at the dirty bits only, not at
 *                     the word (a unit is claimed and dirty while a claim
 *                     or a release is under way) [CHUNK-1];
 *  BUG_STOP_EARLY     the claim ignores `cleaning`: it stops whenever no
 *                     cleaner finished since its scan (early stop);
 *  BUG_STOP_LOADS     the stop test reads `cleaned` before `cleaning`
 *                     (early stop);
 *  BUG_CLEANING_LATE  the cleaner increments `cleaning` after its CAS
 *                     (early stop);
 *  BUG_COUNT_ORDER    the cleaner decrements `cleaning` before it
 *                     increments `cleaned` (early stop);
 *  BUG_KEPT_LATE      the cleaner lets its units go before it puts the
 *                     refused runs back dirty [DIRTY-1];
 *  BUG_WAIT_CLEANER   the claim rescans without a bound while a cleaner
 *                     is at work (a cycle: the termination check). */

/* Reachability probes: COVER_AT(k) fails when pan runs with KP_COVER=k in
 * its environment, so an error then shows branch k is reachable (the
 * script checks every probe, so no property above holds vacuously).
 * Without KP_COVER it never fails and changes no state. */
c_code {
int kp_cover_k;
__attribute__((constructor)) static void kp_cover_init(void) {
  const char *e = getenv("KP_COVER");
  kp_cover_k = e ? atoi(e) : 0;
}
}
#define COVER_AT(k) assert(c_expr { kp_cover_k != k })
#define COVER_POINTS 20

#define W 5                 /* units in the modelled word */
#define ALL ((1 << W) - 1)  /* units past the word's end count as claimed */
#ifndef A_ROUNDS
#define A_ROUNDS 2          /* claim/release cycles of the first thread */
#endif
#ifndef B_ROUNDS
#define B_ROUNDS 1          /* ... and of the second */
#endif
#ifndef CLEANERS
#define CLEANERS 1          /* 1: a drain's pass; 2: and a trim's */
#endif
#define RESCANS 4           /* KP_CLAIM_RESCANS */
#define META 9              /* ghost owner of the metadata unit */

byte claimed = 1;     /* r->claimed[0]: unit 0 holds the metadata */
byte dirty = 6;       /* r->dirty[0]: units 1 and 2 */
byte cleaning;        /* cleaners at work */
byte cleaned;         /* cleaners finished */

/* Ghost state. */
byte owner[W];    /* 0: free; META; else _pid + 1 of the holder */
bool resident[W]; /* the unit's pages may be non-zero */
byte held;        /* the units cleaners hold claimed */

#define BIT(x, u) (((x) >> (u)) & 1)
/* A free unit that is not dirty has zero pages. */
#define CLEAN_OK(u) (BIT(claimed, u) || BIT(dirty, u) || !resident[u])
#define CLEAN (CLEAN_OK(0) && CLEAN_OK(1) && CLEAN_OK(2) && CLEAN_OK(3) && CLEAN_OK(4))

/* A weak CAS's spurious failure, bounded with -DSPURIOUS. */
#ifdef SPURIOUS
#define SPUR_OK (spur < SPURIOUS)
#define SPUR_DONE spur++
#else
#define SPUR_OK true
#define SPUR_DONE skip
#endif

/* find_clear_run: lowest bit i such that bits i .. i+n-1 of word are all
 * clear, or -1; the same doubling shifts as the C.  Private: callers put
 * it in a d_step, with the load it follows. */
inline find_clear_run(word, n, res) {
  rn = ~(word) & ALL;
  have = 1;
  do
  :: have < n && rn != 0 ->
     if
     :: have < n - have -> step = have
     :: else -> step = n - have
     fi;
     rn = rn & (rn >> step);
     have = have + step
  :: else -> break
  od;
  if
  :: rn == 0 -> res = -1
  :: else ->
     res = 0;
     do
     :: (rn & (1 << res)) == 0 -> res++
     :: else -> break
     od
  fi;
  rn = 0; have = 0; step = 0
}

/* Ghost: the holder's view of the units of set. */
inline take_set(set) {
  u = 0;
  do
  :: u < W && BIT(set, u) -> assert(owner[u] == 0); owner[u] = _pid + 1; u++
  :: u < W && !BIT(set, u) -> u++
  :: else -> break
  od;
  u = 0
}

inline drop_set(set) {
  u = 0;
  do
  :: u < W && BIT(set, u) -> assert(owner[u] == _pid + 1); owner[u] = 0; u++
  :: u < W && !BIT(set, u) -> u++
  :: else -> break
  od;
  u = 0
}

/* Ghost: the claimer's view of its run of units. */
inline take_units() {
  u = first;
  do
  :: u < first + n -> assert(owner[u] == 0); owner[u] = _pid + 1; u++
  :: else -> break
  od;
  u = 0
}

inline drop_units(at, k) {
  u = at;
  do
  :: u < at + k -> assert(owner[u] == _pid + 1); owner[u] = 0; u++
  :: else -> break
  od;
  u = 0
}

/* kp_purge on units at .. at+n-1: nobody else may hold them. */
inline purge_units(at, n) {
  d_step {
    u = at;
    do
    :: u < at + n -> assert(owner[u] == 0 || owner[u] == _pid + 1); resident[u] = 0; u++
    :: else -> break
    od;
    u = 0
  }
}

/* The plain pass's reading of the word just read into cur: the run to
 * try, or none; and (ghost) whether the units cleaners hold would have
 * made one. */
inline look_plain() {
  find_clear_run(cur, n, first);
  if
  :: first < 0 -> find_clear_run(cur & ~held, n, tmp); hid = (tmp >= 0); tmp = 0
  :: else -> hid = 0
  fi
}

/* region_claim_units(r, n, true): free units that are all dirty.  The
 * word, then the dirty bits, then the CAS: three steps. */
inline scan_dirty() {
  cur = claimed;                                    /* kp_load_relaxed(&r->claimed[w]) */
  do
  :: d_step {                                       /* kp_load_relaxed(&r->dirty[w]) */
#ifdef BUG_DIRTY_ANY
       find_clear_run(~dirty & ALL, n, first)
#else
       find_clear_run(cur | (~dirty & ALL), n, first)
#endif
     };
     if
     :: first < 0 -> cur = 0; break
     :: else
     fi;
#ifdef BUG_CLAIM_PLAIN
     d_step { claimed = cur | (mask << first); take_units(); got = 1; cur = 0 }
#else
     atomic {                                       /* kp_cas_weak_acq_rel */
       if
       :: claimed == cur -> d_step { claimed = cur | (mask << first); take_units(); got = 1; cur = 0 }
       :: claimed == cur && SPUR_OK -> SPUR_DONE    /* spurious failure */
       :: claimed != cur -> cur = claimed; COVER_AT(1)
       fi
     };
#endif
     if
     :: got -> break
     :: else
     fi
  od
}

/* region_claim_units(r, n, false): any free run.  The load of the word
 * only decides the CAS on it, so they are one step (a CAS that fails is
 * then a later load); a spurious failure loads again. */
inline scan_plain() {
  do
#ifdef BUG_CLAIM_PLAIN
  :: d_step { cur = claimed; look_plain() };        /* kp_load_relaxed */
     if
     :: first < 0 -> COVER_AT(2)
     :: else -> d_step { claimed = cur | (mask << first); take_units(); got = 1 }
     fi;
     cur = 0;
#else
  :: atomic {                                       /* kp_load_relaxed, kp_cas_weak_acq_rel */
       d_step { cur = claimed; look_plain() };
       if
       :: first < 0 -> COVER_AT(2)                  /* word full */
       :: first >= 0 -> d_step { claimed = cur | (mask << first); take_units(); got = 1 }
       :: first >= 0 && SPUR_OK -> SPUR_DONE        /* spurious failure */
       fi;
       cur = 0
     };
#endif
     if
     :: got || first < 0 -> break
     :: else
     fi
  od
}

proctype claimer(byte rounds) {
  byte n, mask, cur, was_dirty, round, u, rn, have, step, seen, now, rescans;
  short first, tmp;
  bool got, zeroed, hid, quiet, stop;
#ifdef SPURIOUS
  byte spur;
#endif

  do
  :: round == rounds -> break
  :: else ->
     round++;
     if
     :: n = 1
     :: n = 2
     fi;
     mask = (1 << n) - 1;

     /* kp_units_claim */
     seen = cleaned;                                /* kp_load_acquire(&cleaned) */
     if
     :: scan_dirty();                               /* dirty_bytes != 0 */
        if :: got -> COVER_AT(11) :: else -> COVER_AT(12) fi
     :: skip                                        /* dirty_bytes == 0 */
     fi;
     if
     :: !got -> scan_plain()
     :: else
     fi;
     do
#ifdef BUG_WAIT_CLEANER
     :: got -> break
#else
     :: got || rescans == RESCANS -> break
#endif
     :: else ->
        /* The stop test (after an acquire fence): `cleaning` first.  A
         * cleaner whose hold the scan saw is then still counted there, or
         * it finished, and it increments `cleaned` before it leaves
         * `cleaning`, so `cleaned` has moved past `seen`. */
#if defined(BUG_STOP_EARLY)
        d_step { now = cleaned; stop = (now == seen) }                /* kp_load_acquire(&cleaned) */
#elif defined(BUG_STOP_LOADS)
        now = cleaned;                                               /* kp_load_acquire(&cleaned) */
        d_step { quiet = (cleaning == 0); stop = quiet && now == seen } /* kp_load_acquire(&cleaning) */
#else
        quiet = (cleaning == 0);                                     /* kp_load_acquire(&cleaning) */
        d_step { now = cleaned; stop = quiet && now == seen }         /* kp_load_acquire(&cleaned) */
#endif
        if :: hid -> COVER_AT(17) :: else fi      /* a cleaner's units hid a run */;
        if
        :: stop ->
           /* Early: no cleaner's hold hid a run from the last scan. */
           assert(!hid);
           if :: rescans == 0 -> COVER_AT(13) :: else -> COVER_AT(16) fi;
           break
        :: else ->
           if :: quiet -> COVER_AT(19) :: else fi   /* a cleaner finished since */
        fi;
        d_step { seen = now; now = 0; quiet = 0; hid = 0 };
        scan_plain();                               /* (kp_os_yield from the second on) */
#ifndef BUG_WAIT_CLEANER
        rescans++;
#endif
        if :: got -> COVER_AT(14) :: else fi
     od;
     atomic { seen = 0; now = 0; quiet = 0; stop = 0; hid = 0; cur = 0 };

     if
     :: !got ->
        /* region_create: a run in a new region, outside the model */
        if :: rescans == RESCANS -> COVER_AT(15) :: else fi
     :: got ->
        /* kp_units_claim: take the run's dirty bits */
        d_step {                                     /* kp_fetch_and_acq_rel */
          was_dirty = dirty & (mask << first);
          dirty = dirty & ~(mask << first);
          zeroed = (was_dirty == 0);
          if :: zeroed -> COVER_AT(4) :: else -> COVER_AT(3) fi;
          /* A run reported zeroed must be (calloc skips the memset). */
          assert(!zeroed || !resident[first] && (n == 1 || !resident[first + 1]));
          was_dirty = 0; zeroed = 0;
          /* The chunk is in use (its own holder's business from here
           * on, so in the same step): its pages are written. */
          assert(owner[first] == _pid + 1 && (n == 1 || owner[first + 1] == _pid + 1));
          resident[first] = 1;
          if :: n == 2 -> resident[first + 1] = 1 :: else fi
        };

        /* release.c's choice: kp_units_free(c, true) or
         * kp_units_free_dirty_within (stamp_dirty, then the fetch_or), or
         * kp_chunk_release (kp_purge, then kp_units_free(c, false); a
         * refused purge frees dirty: the first way) */
#ifdef BUG_RELEASE_ORDER
        atomic { claimed = claimed & ~(mask << first); drop_units(first, n) };
#endif
        if
        :: COVER_AT(5);
           dirty = dirty | (mask << first)           /* kp_fetch_or_acq_rel */
        :: COVER_AT(6);
           purge_units(first, n)                     /* kp_purge */
        fi;
#ifndef BUG_RELEASE_ORDER
        atomic { claimed = claimed & ~(mask << first); drop_units(first, n) }  /* kp_fetch_and_acq_rel */
#endif
     fi;
     got = 0; first = 0; rescans = 0
  od
}

/* kp_units_clean_dirty over the one word (clean = kp_purge); all: a
 * trim's pass (idle_ticks 0: every free dirty unit is idle). */
proctype cleaner(bool all) {
  byte cur, take, left, kept, span, b, rl, u;
  bool got;
#ifdef SPURIOUS
  byte spur;
#endif

#ifndef BUG_CLEANING_LATE
  cleaning++;                                        /* kp_fetch_add_acq_rel(&cleaning) */
#endif
  cur = claimed;                                     /* kp_load_relaxed(&r->claimed[w]) */
  do
  :: atomic {                                        /* kp_load_relaxed(&r->dirty[w]) */
       /* idle_dirty: any subset of the free dirty units (all of them) */
       take = 0;
       do
       :: b == W -> break
       :: b < W && BIT(dirty & ~cur, b) -> take = take | (1 << b); b++  /* idle */
       :: b < W && !(all && BIT(dirty & ~cur, b)) -> b++  /* not idle yet */
       od;
       b = 0
     };
     if
     :: take == 0 -> break
     :: else
     fi;
#ifdef BUG_PURGE_NOCLAIM
     break
#else
     atomic {                                        /* kp_cas_weak_acq_rel */
       if
       :: claimed == cur -> d_step { claimed = cur | take; held = held | take; take_set(take); got = 1 }
       :: claimed == cur && SPUR_OK -> SPUR_DONE     /* spurious failure */
       :: claimed != cur -> cur = claimed; COVER_AT(18)
       fi
     };
     if
     :: got -> break
     :: else
     fi
#endif
  od;
#ifdef BUG_CLEANING_LATE
  cleaning++;
#endif
  cur = 0;
  if
  :: take == 0 -> COVER_AT(7)                        /* nothing to clean here */
  :: else ->
     atomic { left = dirty & take; dirty = dirty & ~take };  /* kp_fetch_and_acq_rel: was */
     if :: left != take -> COVER_AT(10) :: else fi   /* claimed and freed clean meanwhile */
     do
     :: left == 0 -> break
     :: else ->
        atomic {
          d_step {                                   /* the next run of adjacent units */
            b = 0;
            do
            :: !BIT(left, b) -> b++
            :: else -> break
            od;
            rl = 0;
            do
            :: b + rl < W && BIT(left, b + rl) -> rl++
            :: else -> break
            od;
            span = ((1 << rl) - 1) << b;
            left = left & ~span;
            if :: left != 0 -> COVER_AT(20) :: else fi  /* another run follows */
          };
          if
          :: purge_units(b, rl); COVER_AT(9)         /* clean: kp_purge */
          :: kept = kept | span; COVER_AT(8)         /* refused (locked pages) */
          fi;
          b = 0; rl = 0; span = 0
        }
     od;
#ifdef BUG_KEPT_LATE
     atomic { claimed = claimed & ~take; held = held & ~take; drop_set(take) };
#endif
     if
     :: kept != 0 -> dirty = dirty | kept            /* stamp_dirty, kp_fetch_or_acq_rel */
     :: else
     fi;
#ifndef BUG_KEPT_LATE
     atomic { claimed = claimed & ~take; held = held & ~take; drop_set(take) }  /* kp_fetch_and_acq_rel */
#endif
  fi;
  take = 0; kept = 0;
#ifdef BUG_COUNT_ORDER
  cleaning--;
  cleaned++
#else
  cleaned++;                                         /* kp_fetch_add_acq_rel(&cleaned) */
  cleaning--                                         /* kp_fetch_sub_acq_rel(&cleaning) */
#endif
}

/* Checks the invariant in every reachable state. */
proctype monitor() {
end: atomic { !CLEAN -> assert(CLEAN) }
}

init {
  atomic {
    owner[0] = META;
    resident[1] = 1;
    resident[2] = 1;
    run monitor();
    run claimer(A_ROUNDS);
    run claimer(B_ROUNDS);
    run cleaner(0);
#if CLEANERS > 1
    run cleaner(1);
#endif
  }
}
