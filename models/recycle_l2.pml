/* The recycle cache's global L2 (src/recycle.c): l2_push, l2_take,
 * kp_cache_put_mapping, kp_cache_take_mapping (with its put-back of a
 * block that does not fit) and kp_cache_evict_l2.  Chunks use the same
 * slots with one index (kp_cache_put_chunk, l2_pop_chunk): a subset.
 *
 * L2 is a table of atomic slots, WAYS rows of IDX indexes.  A slot holds
 * a block's address (here: its id 1..3; the drain stamp in the low bits
 * is left out, which only makes an ABA on a slot easier) or 0.  A push
 * scans a band of indexes from the highest, each row from the thread's
 * start way, and puts the block in the first empty slot with one CAS from
 * 0; a pop scans and takes a slot's value with one CAS from that value to
 * 0.  Only then does it own the block and read its real size (the radix
 * entry for mappings, the header for chunks), to account l2_bytes and to
 * check the fit; a block that does not fit is pushed again (at its own
 * index or the one below) or released.  Eviction is the same take
 * followed by the release.  Nothing retries [L2-1, L2-2].
 *
 * Blocks are mappings of 4, 5 or 6 length units, at indexes 0, 1, 2; a
 * request of len accepts a block of len .. len + len / 4 (the code's
 * rule; len / 4 is 1 unit here) and looks at its index and the two above
 * (clamped).  l2_bytes may hold at most CAP units (cap / 2).
 *
 * Thread 1 frees block 1 (4 units) into the cache, then asks for 4
 * units; thread 2 frees block 2 (6) and asks for 5; what each gets it
 * keeps or frees again.  Thread 3 evicts up to 2 blocks (skipping, at its
 * choice, blocks too young for the drain) and maps a new block of a
 * different length at the address of the first one it released (the OS
 * may reuse an address), which it frees into the cache.  Block 3 (5
 * units) is in the cache from the start, at index 0 (the one below its
 * own, where a push puts it when index 1 is full).
 *
 * Every atomic operation is one step.  A relaxed load of a slot followed
 * by a CAS of the same slot is one step that does the CAS only if the
 * load would have let it (the outcomes are the same).  Ghost state:
 * hold[b] (the thread that owns block b), rel[b] (released), and the
 * radix length rsize[b] (0 while unmapped).
 *
 * Properties:
 *  - a taken block is owned by one thread: no two threads hold the same
 *    block, and no block is in two slots (asserts at take and push);
 *  - a block's size is read only by its owner (assert at every read);
 *  - a block handed to a request fits it by its real size; a release
 *    unmaps the block's real length, once (no double release);
 *  - at the end every block is in exactly one place: held by a thread,
 *    released, or in one slot (none lost), and l2_bytes is the length of
 *    the blocks in the slots;
 *  - l2_bytes never goes below zero: a take finds the bytes it subtracts
 *    counted (assert at every take) [L2-4];
 *  - every operation is bounded: each visits each slot of its band at
 *    most once (assert), and the state graph has no cycle at all, so every
 *    run of every thread ends (checked with -DNP and pan -l: no
 *    non-progress cycle, with no progress label anywhere); no thread
 *    blocks.
 *
 * Mutations (spin -DBUG_...): each must make verification fail.
 *  BUG_SIZE_EARLY  the pop reads the block's size before its CAS and uses
 *                  it after (found by the owner-only read check, and with
 *                  -DNO_READ_CHECK by its consequences, through an ABA:
 *                  the block released, its address mapped again with
 *                  another length and cached in the same slot);
 *  BUG_PUSH_BLIND  the push stores into a slot it saw empty, without CAS;
 *  BUG_TAKE_PLAIN  the take loads the slot and then stores 0;
 *  BUG_RETRY       the push retries its scan until it succeeds (found by
 *                  the termination check, and by the bound);
 *  BUG_COUNT_LATE  the push counts the block's bytes after its CAS (as
 *                  the code once did): a take in between finds them not
 *                  counted, and l2_bytes goes below zero [L2-4]. */

#define WAYS 2
#define IDX 3                 /* mapping indexes 0..2: lengths 4..6 */
#define NB 3                  /* blocks 1..3 */
#ifndef CAP
#define CAP 12                /* cap / 2, in length units */
#endif
#define SLOT(way, idx) ((way) * IDX + (idx))
#define INDEX(ln) ((ln) - 4)
#define FITS(have, ln) ((have) >= (ln) && (have) - (ln) <= (ln) / 4)
#define MAXVISITS (IDX * WAYS * (1 + 2 * WAYS))   /* a pop's scan and its put-backs */

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
#define COVER_POINTS 8

byte l2[WAYS * IDX];  /* the slots (atomic) */
short l2_bytes;       /* (atomic, relaxed) */

/* Ghost state. */
byte rsize[NB + 1];   /* the radix entry's length; 0: not mapped */
byte hold[NB + 1];    /* the owning thread, or 0 */
bool rel[NB + 1];     /* released (unmapped) */
byte done;

#ifdef NO_READ_CHECK
#define OWNED(b) skip
#else
#define OWNED(b) assert(hold[b] == _pid)
#endif

/* kp_mapping_release: the radix entry cleared, the block unmapped. */
inline release(b, ln) {
  d_step {
    assert(hold[b] == _pid && !rel[b]);              /* no double release */
    assert(ln == rsize[b]);                         /* unmaps its real length */
    rel[b] = 1; hold[b] = 0; rsize[b] = 0;
    printf("T%d: releases block %d\n", _pid, b)
  }
}

/* l2_push(lo, hi, b, len, way0); ok = pushed */
inline l2_push(lo, hi, b, ln, way0) {
  ok = 0;
#ifdef BUG_RETRY
  do
  :: !ok ->
#endif
  if
  :: l2_bytes + ln > CAP -> COVER_AT(1)             /* kp_load_relaxed: over the cap */
  :: else ->
#ifndef BUG_COUNT_LATE
     l2_bytes = l2_bytes + ln;                       /* kp_fetch_add_relaxed, before the CAS */
#endif
     i = hi + 1;
     do
     :: i > lo && !ok ->
        i--;
        k = 0;
        do
        :: k < WAYS && !ok ->
           sl = SLOT((way0 + k) % WAYS, i);
           visits++;
           assert(visits <= MAXVISITS);
#ifdef BUG_PUSH_BLIND
           v = l2[sl];                               /* kp_load_relaxed */
           if
           :: v == 0 ->
              d_step {
                l2[sl] = b;                          /* a plain store */
                assert(hold[b] == _pid); hold[b] = 0; ok = 1
              }
           :: else
           fi;
           v = 0;
#else
           d_step {                                  /* load == 0 && kp_cas_strong_acq_rel */
             if
             :: l2[sl] == 0 ->
                x = 0;
                do
                :: x < WAYS * IDX -> assert(l2[x] != b); x++   /* in no other slot */
                :: else -> break
                od;
                x = 0;
                l2[sl] = b;
                assert(hold[b] == _pid); hold[b] = 0; ok = 1;
                printf("T%d: pushes block %d (length %d) into slot %d\n", _pid, b, ln, sl)
             :: else
             fi
           };
#endif
           k++
        :: else -> break
        od
     :: else -> break
     od;
     if
#ifdef BUG_COUNT_LATE
     :: ok -> l2_bytes = l2_bytes + ln               /* counted after the CAS */
#else
     :: ok -> skip
#endif
     :: else ->
        COVER_AT(2);                                 /* no empty slot */
#ifndef BUG_COUNT_LATE
        l2_bytes = l2_bytes - ln                     /* kp_fetch_sub_relaxed: taken back */
#else
        skip
#endif
     fi;
     i = 0; k = 0; sl = 0
  fi
#ifdef BUG_RETRY
  :: ok -> break
  od
#endif
}

/* l2_take(slot sl, index): b = the block taken, or 0 */
inline l2_take(sl, b) {
#ifdef BUG_TAKE_PLAIN
  v = l2[sl];                                        /* kp_load_relaxed */
  if
  :: v != 0 ->
     d_step {
       l2[sl] = 0;                                   /* a plain store */
       assert(hold[v] == 0 && !rel[v]); hold[v] = _pid; b = v
     }
  :: else -> b = 0
  fi;
#elif defined(BUG_SIZE_EARLY)
  v = l2[sl];                                        /* kp_load_relaxed */
  if
  :: v != 0 ->
     OWNED(v);
     have = rsize[v];                                /* read before owning it */
     d_step {
       if
       :: l2[sl] == v ->
          l2[sl] = 0; assert(hold[v] == 0 && !rel[v]); hold[v] = _pid; b = v;
          printf("T%d: takes block %d (slot %d) with the size %d read before\n", _pid, b, sl, have)
       :: else -> b = 0
       fi
     }
  :: else -> b = 0
  fi;
#else
  d_step {                                           /* kp_load_relaxed, kp_cas_strong_acq_rel */
    if
    :: l2[sl] != 0 ->
       b = l2[sl]; l2[sl] = 0;
       assert(hold[b] == 0 && !rel[b]); hold[b] = _pid;
       printf("T%d: takes block %d (slot %d)\n", _pid, b, sl)
    :: else -> b = 0
    fi
  };
#endif
  v = 0;
  if
  :: b != 0 ->
#ifndef BUG_SIZE_EARLY
     d_step { OWNED(b); have = rsize[b] };           /* block_bytes: after owning it */
#endif
     d_step {                                        /* kp_fetch_sub_relaxed */
       assert(have == rsize[b]);                     /* the size acted on is the block's */
       assert(l2_bytes >= have);                     /* counted already [L2-4] */
       l2_bytes = l2_bytes - have
     }
  :: else
  fi
}

/* kp_cache_put_mapping(NULL, b, len, false), and the release if it is not
 * kept (kp_mapping_retire) */
inline put_mapping(b, ln, way0) {
  if
  :: INDEX(ln) > 0 -> l2_push(INDEX(ln) - 1, INDEX(ln), b, ln, way0)
  :: else -> l2_push(INDEX(ln), INDEX(ln), b, ln, way0)
  fi;
  if
  :: !ok -> COVER_AT(3); release(b, ln)
  :: else
  fi;
  ok = 0
}

/* kp_cache_take_mapping's L2 part; got = the block, or 0 */
inline take_mapping(ln, got) {
  got = 0;
  j = INDEX(ln);
  do
  :: j <= INDEX(ln) + 2 && j < IDX && got == 0 ->
     w = 0;
     do
     :: w < WAYS && got == 0 ->
        visits++;
        assert(visits <= MAXVISITS);
        l2_take(SLOT((start + w) % WAYS, j), p);
        if
        :: p == 0 -> skip
        :: p != 0 ->
#ifndef BUG_SIZE_EARLY
           d_step { OWNED(p); have = rsize[p] };     /* KP_MAP_LEN(kp_radix_get(p)) */
#endif
           if
           :: FITS(have, ln) -> got = p; COVER_AT(4)
           :: else ->
              COVER_AT(5);
              put_mapping(p, have, 0)               /* back, or released */
           fi
        fi;
        p = 0; have = 0;
        w++
     :: else -> break
     od;
     j++
  :: else -> break
  od;
  j = 0; w = 0;
  if
  :: got != 0 ->
     d_step {
       assert(hold[got] == _pid && FITS(rsize[got], ln));   /* fits by its real size */
       have = 0
     }
  :: else
  fi
}

/* kp_cache_evict_l2(2, older_than): freed = the first block released */
inline evict(freed) {
  freed = 0;
  n = 0;
  w = 0;
  do
  :: w < WAYS && n < 2 ->
     j = 0;
     do
     :: j < IDX && n < 2 ->
        if
        :: true -> skip                              /* empty or too young: kp_load_relaxed */
        :: true ->
           l2_take(SLOT(w, j), p);
           if
           :: p != 0 ->
              d_step { OWNED(p); have = rsize[p] };  /* block_bytes */
              release(p, have);
              COVER_AT(6);
              if :: freed == 0 -> freed = p :: else fi;
              n++
           :: else
           fi;
           p = 0; have = 0
        fi;
        j++
     :: else -> break
     od;
     w++
  :: else -> break
  od;
  n = 0; w = 0; j = 0
}

proctype thread() {
  byte mine, got, freed, ln, start;
  byte i, k, j, w, n, sl, v, p, x, have;
  byte visits;
  bool ok;

  start = _pid % WAYS;                               /* start_way */
  if
  :: _pid == 1 || _pid == 2 ->
     mine = _pid;
     visits = 0;
     ln = rsize[mine];
     put_mapping(mine, ln, 0);                      /* a free: kp_mapping_retire */
     mine = 0;
     visits = 0;
     if :: _pid == 1 -> ln = 4 :: else -> ln = 5 fi;
     take_mapping(ln, got);                         /* a malloc */
     if
     :: got != 0 -> skip                             /* in use */
     :: got != 0 -> visits = 0; ln = rsize[got]; put_mapping(got, ln, 0); COVER_AT(7)
     :: got == 0
     fi
  :: else ->
     visits = 0;
     evict(freed);
     if
     :: freed != 0 ->                                /* a new mapping at the same address */
        d_step {
          assert(rel[freed] && hold[freed] == 0);
          rel[freed] = 0; hold[freed] = _pid;
          printf("T%d: maps a new block at the address of block %d\n", _pid, freed)
        };
        atomic {                                     /* another length */
          if
          :: freed != 1 -> rsize[freed] = 4
          :: freed != 3 -> rsize[freed] = 5
          :: freed != 2 -> rsize[freed] = 6
          fi
        };
        COVER_AT(8);
        visits = 0;
        ln = rsize[freed];
        put_mapping(freed, ln, 0)
     :: else
     fi
  fi;
  done++
}

/* At the end: every block in exactly one place, and l2_bytes right. */
proctype final() {
  byte b, s, in, sum;
  (done == 3) ->
  d_step {
    b = 1;
    do
    :: b <= NB ->
       in = 0; s = 0;
       do
       :: s < WAYS * IDX -> if :: l2[s] == b -> in++ :: else fi; s++
       :: else -> break
       od;
       assert(in + (hold[b] != 0) + rel[b] == 1);    /* not lost, not twice */
       b++
    :: else -> break
    od;
    s = 0;
    do
    :: s < WAYS * IDX -> if :: l2[s] != 0 -> sum = sum + rsize[l2[s]] :: else fi; s++
    :: else -> break
    od;
    assert(l2_bytes == sum)
  }
}

init {
  atomic {
    rsize[1] = 4; hold[1] = 1;
    rsize[2] = 6; hold[2] = 2;
    rsize[3] = 5; l2[SLOT(0, 0)] = 3; l2_bytes = 5;  /* at the index below its own */
    run thread();
    run thread();
    run thread();
    run final()
  }
}
