/* The region's unit bitmap (src/region.c): claiming a run of units
 * (region_claim_units, kp_units_claim), giving it back (kp_units_free,
 * called by release.c's kp_chunk_release) and returning the pages of free
 * dirty units to the OS (kp_units_clean_dirty, called by kp_trim).
 *
 * One bitmap word of W units is modelled; unit 0 is the region's metadata
 * unit and is claimed from the start, as region_create leaves it.  Two
 * threads claim a run of 1 or 2 units, write to it and give it back, the
 * first twice and the second once (-DB_ROUNDS=2: twice too); a third
 * thread runs one cleaning pass meanwhile.  Units 1 and 2 start free and
 * dirty (given back earlier with their pages resident).
 *
 * Whether freed units keep their pages is release.c's decision, not
 * region.c's: kp_chunk_release purges the chunk and then frees its units
 * clean (kp_units_free(c, false)); kp_units_free(c, true) frees them
 * dirty, pages resident.  The model lets every release take either way,
 * so the mechanism is checked for any policy release.c may adopt.
 * Releases of dedicated chunks, and of chunks the recycle cache gives
 * back, are the same protocol.
 *
 * Every atomic operation of the C code is one step here; plain accesses
 * to thread-private data are ordinary statements.  Ghost variables (owner,
 * resident) record who holds a unit and whether its pages may be non-zero;
 * they are updated in the same step as the atomic operation that changes
 * the fact they record.
 *
 * Properties:
 *  - a unit is in at most one live chunk (assert at every claim) [CHUNK-1];
 *  - no unit is purged while anyone else holds it (assert at every purge)
 *    [DIRTY-2];
 *  - a free unit whose dirty bit is clear has zero pages, so a claim that
 *    finds no dirty bit may skip zeroing (monitor, and assert at claim)
 *    [DIRTY-1];
 *  - every thread terminates (no invalid end state).
 *
 * Mutations (spin -DBUG_...): each must make verification fail.
 *  BUG_RELEASE_ORDER  the release clears its claimed bits before marking
 *                     the units dirty or purging them;
 *  BUG_PURGE_NOCLAIM  the cleaner checks that a unit is unclaimed but does
 *                     not claim it before purging;
 *  BUG_CLAIM_PLAIN    the claim is a plain load and store, not a CAS. */

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
#define COVER_POINTS 10

#define W 5                 /* units in the modelled word */
#define ALL ((1 << W) - 1)  /* units past the word's end count as claimed */
#ifndef A_ROUNDS
#define A_ROUNDS 2          /* claim/release cycles of the first thread */
#endif
#ifndef B_ROUNDS
#define B_ROUNDS 1          /* ... and of the second */
#endif
#define META 9              /* ghost owner of the metadata unit */

byte claimed = 1;     /* r->claimed[0]: unit 0 holds the metadata */
byte dirty = 6;       /* r->dirty[0]: units 1 and 2 */

/* Ghost state. */
byte owner[W];    /* 0: free; META; else _pid + 1 of the holder */
bool resident[W]; /* the unit's pages may be non-zero */

#define BIT(x, u) (((x) >> (u)) & 1)
/* A free unit that is not dirty has zero pages. */
#define CLEAN_OK(u) (BIT(claimed, u) || BIT(dirty, u) || !resident[u])
#define CLEAN (CLEAN_OK(0) && CLEAN_OK(1) && CLEAN_OK(2) && CLEAN_OK(3) && CLEAN_OK(4))

/* find_clear_run: lowest bit i such that bits i .. i+n-1 of word are all
 * clear, or -1; the same doubling shifts as the C. */
inline find_clear_run(word, n, res) {
  d_step {
    rn = ~word & ALL;
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
}

/* Ghost: the holder's view of its run of units. */
inline take_units(at, n) {
  u = at;
  do
  :: u < at + n -> assert(owner[u] == 0); owner[u] = _pid + 1; u++
  :: else -> break
  od;
  u = 0
}

inline drop_units(at, n) {
  u = at;
  do
  :: u < at + n -> assert(owner[u] == _pid + 1); owner[u] = 0; u++
  :: else -> break
  od;
  u = 0
}

/* kp_purge on units first .. first+n-1: nobody else may hold them. */
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

proctype claimer(byte rounds) {
  byte n, mask, cur, was_dirty, round, u, rn, have, step;
  short first;
  bool got, zeroed;

  do
  :: round == rounds -> break
  :: else ->
     round++;
     if
     :: n = 1
     :: n = 2
     fi;
     mask = (1 << n) - 1;

     /* kp_units_claim -> region_claim_units (one word) */
     got = 0;
     cur = claimed;                                  /* kp_load_relaxed */
     do
     :: find_clear_run(cur, n, first);
        if
        :: first < 0 -> COVER_AT(2); break           /* word full: try elsewhere */
        :: else
        fi;
#ifdef BUG_CLAIM_PLAIN
        claimed = cur | (mask << first);
        d_step { take_units(first, n) };
        got = 1;
        break
#else
        atomic {                                     /* kp_cas_weak_acq_rel */
          if
          :: claimed == cur ->
             claimed = cur | (mask << first); take_units(first, n); got = 1
          :: claimed == cur -> skip                  /* spurious failure */
          :: claimed != cur -> cur = claimed; COVER_AT(1)
          fi
        };
        if
        :: got -> break
        :: else
        fi
#endif
     od;

     if
     :: !got -> skip   /* kp_units_claim would try another region */
     :: got ->
        /* kp_units_claim: take the run's dirty bits */
        atomic {                                     /* kp_fetch_and_acq_rel */
          was_dirty = dirty & (mask << first);
          dirty = dirty & ~(mask << first)
        };
        zeroed = (was_dirty == 0);
        if :: zeroed -> COVER_AT(4) :: else -> COVER_AT(3) fi;
        /* A run reported zeroed must be (calloc skips the memset). */
        assert(!zeroed || !resident[first] && (n == 1 || !resident[first + 1]));
        was_dirty = 0;

        /* The chunk is in use: its pages are written. */
        d_step {
          assert(owner[first] == _pid + 1 && (n == 1 || owner[first + 1] == _pid + 1));
          resident[first] = 1;
          if :: n == 2 -> resident[first + 1] = 1 :: else fi
        };

        /* release.c's choice: kp_units_free(c, true), or kp_chunk_release
         * (kp_purge, then kp_units_free(c, false)) */
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
     zeroed = 0; got = 0; first = 0; cur = 0
  od
}

/* kp_units_clean_dirty over the one word (clean = kp_purge). */
proctype purger() {
  byte snap, m, cur, u, b;
  bool got, was;

  snap = dirty;                                      /* kp_load_relaxed */
  do
  :: snap == 0 -> break
  :: else ->
     d_step {                                        /* __builtin_ctzll */
       b = 0;
       do
       :: (snap & (1 << b)) == 0 -> b++
       :: else -> break
       od;
       m = 1 << b;
       snap = snap & ~m
     };
     cur = claimed;                                  /* kp_load_relaxed */
     if
     :: cur & m -> COVER_AT(7)                      /* in a chunk: leave it */
     :: else ->
#ifdef BUG_PURGE_NOCLAIM
        got = 1;
#else
        atomic {                                     /* strong CAS */
          if
          :: claimed == cur -> claimed = cur | m; take_units(b, 1); got = 1
          :: else -> got = 0; COVER_AT(8)
          fi
        };
#endif
        if
        :: got ->
           atomic { was = (dirty & m) != 0; dirty = dirty & ~m };  /* kp_fetch_and_acq_rel */
           if
           :: was ->
              COVER_AT(9);
              purge_units(b, 1)                      /* clean: kp_purge */
           :: else -> COVER_AT(10)                   /* claimed and released meanwhile */
           fi;
#ifndef BUG_PURGE_NOCLAIM
           atomic { claimed = claimed & ~m; drop_units(b, 1) }      /* kp_fetch_and_acq_rel */
#endif
        :: else
        fi
     fi;
     got = 0; was = 0; cur = 0
  od
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
    run purger()
  }
}
