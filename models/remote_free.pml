/* One bucket chunk across threads: cross-thread free in batches, detached
 * chunks, their release by the last free and their adoption
 * (src/remote.c, with the callers in alloc.c, heap.c, free.c and the
 * hit paths of internal.h).
 *
 * The chunk has N slots, all carved (carving is one more source of room,
 * like free slots; it is left out).  Thread 1 owns it as its current
 * chunk.  It allocates ALLOCS times, keeping each slot or handing it to
 * thread 2 or 3; when the chunk has no slot left its malloc detaches it
 * (retire_current -> kp_chunk_detach) and then adopts a chunk from the
 * reusable bitmap or takes a fresh one (another chunk, outside the
 * model).  It frees what it kept between allocations: on its own lists
 * while it owns the chunk, else by kp_remote_free, whose first free of a
 * chunk it detached takes the chunk back if its remote list is empty.
 * It exits (heap_teardown: flush the batches, chunk_abandon).  Threads
 * 2 and 3 free every slot they are given.  Remote frees go into the thread's batch for the chunk,
 * of up to BMAX slots, published when full, on a malloc slow path, at
 * trim and exit, or at any other moment (its place is needed by another
 * chunk).  Thread 3 also allocates AMALLOCS times, which may
 * adopt the chunk from the reusable bitmap (kp_adopt_reusable) and make
 * it current, or put it on its avail list as the C does with a mark from
 * a life of another class; what it gets it frees again.  Both exit like thread 1.  With -DTRIM, threads 1
 * and 3 may also trim their heap once (kp_heap_collect -> chunk_collect).
 *
 * Every access to shared data (the remote word, owner, last_owner,
 * detached_used, the reusable bit, the mailboxes) is one step, in the
 * order of the C code.  Data private to a thread (its locals and heap,
 * the slots it holds, and the chunk's owner-private fields free,
 * local_free and used while it holds the chunk: asserted, see PRIV) is
 * touched in the step next to it, which no other thread can tell apart
 * and which keeps the search small.  `used` carries the current chunk's
 * bias as in the C (BIAS).  Weak CASes are modelled strong: a spurious
 * failure retries with the same word, a state already explored.  The
 * class's reusable_count only lets kp_adopt_reusable skip the bitmap; a
 * nondeterministic skip stands for it.
 *
 * Ghost state: held[s] (the thread holding live slot s), inb[s] (the
 * thread whose unpublished batch holds it), gown (the thread that may
 * touch the private fields: the owner, or the thread that took the
 * detached chunk; 0 while detached), taker (who took the chunk since it
 * was last detached), released.
 *
 * Properties:
 *  - after every step that changes the chunk (check_inv): every slot is
 *    in exactly one place (held, in one batch, on free, on local_free or
 *    on the remote list) and each list is without repeats; the remote
 *    count is the remote list's length; `used` counts the slots off the
 *    owner's lists, plus the free list and the bias while current
 *    [USED-1]; the owner field is 0 or the holder [OWN-1]; a detached
 *    chunk has no owner and no holder; a heap's current or avail chunk is
 *    held by that heap's thread, and by one heap only;
 *  - a slot is handed out only from the free list, to one thread;
 *  - the chunk's private fields are written only by the holder, and read
 *    by another thread only while nobody holds it (PRIV, PRIV_READ): in
 *    particular the owner never collects while an adopter holds it;
 *  - the chunk is taken (adopted or released by a push) by one thread per
 *    detach [DET-2, DET-3], and the owner's take finds it attached [DET-1];
 *  - it is released only with every slot back, nothing on the remote list
 *    or in a batch [CHUNK-3], by its holder, and nobody touches it
 *    afterwards;
 *  - no push reports corruption (kp_corrupt) in a valid program;
 *  - at the end, once every thread exited, the chunk has been released:
 *    no detached chunk whose slots are all free is stranded [DET-2]; no
 *    thread blocks (no invalid end state).
 *
 * Mutations (spin -DBUG_...): each must make verification fail.
 *  BUG_DU_UNCHECKED    a pusher whose count exceeds detached_used reports
 *                      corruption without checking that the word is still
 *                      its own (detached_used may be a later detach's);
 *  BUG_PUSH_OLD_COUNT  the pusher compares the count from before its own
 *                      push with detached_used;
 *  BUG_DETACH_EARLY    detach sets DETACHED before recording
 *                      detached_used;
 *  BUG_ADOPT_STORE     adoption tests DETACHED with a load and takes the
 *                      word with a plain store instead of a CAS;
 *  BUG_RELEASE_BLIND   release_emptied takes the word with a blind store
 *                      instead of a CAS from the exact word;
 *  BUG_RELEASE_WEAK    ... with a weak CAS (which may fail spuriously);
 *  BUG_ROOM_LATE       detach reads the chunk's room after publishing
 *                      DETACHED;
 *  BUG_DETACH_NOCHECK  detach sets DETACHED even when every slot out is
 *                      already on the remote list;
 *  BUG_COLLECT_LOAD    the owner's collect reads the word, then stores 0. */

#ifndef N
#define N 4        /* slots; ids 1..N, 0 is NULL (at most 4) */
#endif
#ifndef ALLOCS
#define ALLOCS 5   /* allocations by thread 1 */
#endif
#ifndef AMALLOCS
#define AMALLOCS 1 /* allocations by thread 3 */
#endif
#ifndef BMAX
#define BMAX 2     /* KP_BATCH_MAX */
#endif
#define BIAS 64    /* KP_CURRENT_BIAS */

/* What a heap's current entry of the class points at. */
#define NONE 0     /* kp_empty_chunk */
#define C 1        /* the modelled chunk */
#define OTHER 2    /* another chunk (outside the model) */

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
#define COVER_POINTS 21

/* kp_chunk: owner-private fields */
byte c_free;      /* c->free */
byte c_local;     /* c->local_free */
short c_used;     /* c->used */
byte next[N + 1]; /* every slot's first word: kp_block.next */
/* kp_chunk: atomics */
byte c_owner;     /* c->owner: the owning thread, or 0 */
byte c_last;      /* c->last_owner: the thread that detached it */
short c_du;       /* c->detached_used */
byte r_head;      /* c->remote: head ... */
byte r_cnt;       /* ... count ... */
bool r_det;       /* ... and DETACHED, always changed together */

/* The region's reusable bit for the chunk, in its class. */
bool reusable;

/* Heaps 1..3 (heap k is thread k's): the class's current chunk, and
 * whether the chunk is on the heap's avail list. */
byte h_cur[4];
bool h_avail[4];

/* Slots handed from thread 1 to threads 2 and 3. */
chan box[4] = [N] of { byte };
bool gifts_done;

/* Ghost state. */
byte held[N + 1];
byte inb[N + 1];
byte gown;
byte taker;
bool released;
byte exited;

#define WORD_IS(h, n, d) (r_head == (h) && r_cnt == (n) && r_det == (d))
#define LOAD_WORD() wh = r_head; wc = r_cnt; wd = r_det
#define ZERO_WORD() r_head = 0; r_cnt = 0; r_det = 0
#define PRIV assert(gown == _pid && !released)
#define PRIV_READ assert(gown == _pid || gown == 0 && !released)

/* ---- the invariant ------------------------------------------------------ */

/* Walks list `head`, marking its slots in `seen`; counts them in `cnt`. */
inline walk(head, cnt) {
  x = head;
  cnt = 0;
  do
  :: x != 0 -> assert((seen & (1 << x)) == 0); seen = seen | (1 << x); cnt++; x = next[x]
  :: else -> break
  od
}

/* Inside a d_step; leaves its scratch variables 0. */
inline check_inv() {
  if
  :: released -> skip
  :: else ->
     seen = 0;
     walk(c_free, nf);
     walk(c_local, nl);
     walk(r_head, nr);
     assert(nr == r_cnt);                            /* the count is the list's length */
     x = 1;
     do
     :: x <= N ->
        if
        :: held[x] != 0 -> assert(inb[x] == 0 && (seen & (1 << x)) == 0)
        :: held[x] == 0 && inb[x] != 0 -> assert((seen & (1 << x)) == 0)
        :: held[x] == 0 && inb[x] == 0 -> assert(seen & (1 << x))   /* not lost */
        fi;
        x++
     :: else -> break
     od;
     /* USED-1 */
     if
     :: h_cur[1] == C || h_cur[2] == C || h_cur[3] == C -> assert(c_used == N - nl + BIAS)
     :: else -> assert(c_used == N - nf - nl)
     fi;
     assert(c_owner == 0 || c_owner == gown);        /* OWN-1 */
     x = 1;
     do
     :: x <= 3 ->
        assert(!(h_cur[x] == C && h_avail[x]));
        if :: h_cur[x] == C || h_avail[x] -> assert(gown == x) :: else fi;
        x++
     :: else -> break
     od;
     if
     :: r_det -> assert(c_owner == 0 && gown == 0)
     :: else -> assert(gown != 0)
     fi;
     seen = 0; nf = 0; nl = 0; nr = 0; x = 0
  fi
}

/* kp_chunk_retire (to a cache or to the OS: either way out of the bucket
 * tier): only by the holder, with every slot back.  Inside a d_step. */
inline do_release() {
  PRIV;
  assert(WORD_IS(0, 0, 0));
  x = 1;
  do
  :: x <= N -> assert(held[x] == 0 && inb[x] == 0); x++
  :: else -> break
  od;
  x = 1;
  do
  :: x <= 3 -> assert(h_cur[x] != C && !h_avail[x]); x++
  :: else -> break
  od;
  x = 0;
  assert(c_used == 0);                               /* CHUNK-3 */
  printf("T%d: chunk released\n", _pid);
  released = 1; gown = 0;
  c_owner = 0;                                       /* kp_cache_put_chunk / kp_units_free */
  c_free = 0; c_local = 0
}

/* ---- private steps (inside a d_step) ------------------------------------ */

/* kp_pop_slot's hit */
inline pop(s) {
  PRIV;
  s = c_free;
  assert(s != 0 && held[s] == 0 && inb[s] == 0);
  c_free = next[s]; held[s] = _pid;
  printf("T%d: malloc -> slot %d\n", _pid, s);
  check_inv()
}

/* The owner's free: onto local_free (kp_free_inline, free_owned_checked,
 * and kp_remote_free after taking the chunk back). */
inline free_local(s) {
  PRIV; assert(held[s] == _pid);
  next[s] = c_local; c_local = s; held[s] = 0; c_used--;
  printf("T%d: free slot %d (owner), used %d\n", _pid, s, c_used);
  check_inv()
}

/* kp_remote_free: onto this thread's batch for the chunk */
inline batch_add(s) {
  assert(held[s] == _pid && !released);
  held[s] = 0; inb[s] = _pid;
  if
  :: bn == 0 -> next[s] = 0; bh = s; bt = s; bn = 1
  :: else -> next[s] = bh; bh = s; bn++
  fi;
  printf("T%d: free slot %d into its batch (%d)\n", _pid, s, bn);
  check_inv()
}

/* kp_heap_set_current / kp_heap_unset_current */
inline set_current() {
  PRIV; assert(h_cur[_pid] == NONE);
  x = c_free; k = 0;
  do :: x != 0 -> k++; x = next[x] :: else -> break od;
  c_used = c_used + BIAS + k; h_cur[_pid] = C;
  k = 0; x = 0;
  check_inv()
}

inline unset_current() {
  PRIV; assert(h_cur[_pid] == C);
  x = c_free; k = 0;
  do :: x != 0 -> k++; x = next[x] :: else -> break od;
  c_used = c_used - BIAS - k; h_cur[_pid] = NONE;
  k = 0; x = 0;
  check_inv()
}

/* take_remote: moves a taken list of n slots onto the chunk's own lists.
 * `cur`: the chunk is its owner's current one. */
inline take_remote(lst, n, cur) {
  assert(n <= N);                                    /* kp_corrupt: longer than its chunk */
  if
  :: lst == 0 -> skip
  :: lst != 0 && c_free == 0 ->
     c_free = lst;
     if :: !cur -> c_used = c_used - (n) :: else fi
  :: lst != 0 && c_free != 0 ->
     COVER_AT(1);
     c_used = c_used - (n);
     if
     :: c_local == 0 -> c_local = lst
     :: else ->
        x = lst; k = 1;
        do
        :: k < n -> x = next[x]; k++
        :: else -> break
        od;
        next[x] = c_local;
        c_local = lst;
        x = 0; k = 0
     fi
  fi
}

/* ---- remote.c ---------------------------------------------------------- */

/* kp_remote_collect, inside its caller's step: the relaxed pre-check and
 * the exchange are one step (only the holder takes an attached chunk's
 * list, so a pre-check that sees a list still finds it at the exchange).
 * n = slots taken.  then_release: 0, or 1 to retire the chunk if no slot
 * is out, or 2 to retire it (the caller knows none is).  loaded: the word
 * was read by an earlier step (BUG_COLLECT_LOAD). */
inline collect_body(cur, n, then_release, loaded) {
  PRIV;
  if :: !loaded -> LOAD_WORD() :: else fi;           /* kp_load_relaxed, kp_exchange_acq_rel */
  if :: wh != 0 || wc != 0 -> ZERO_WORD() :: else fi;
  assert(!wd);                                       /* DET-1: the holder's chunk is attached */
  take_remote(wh, wc, cur);
  n = wc;
  if :: wc != 0 -> printf("T%d: collect %d slot(s), used %d\n", _pid, wc, c_used) :: else fi;
  check_inv();
  wh = 0; wc = 0; wd = 0;
  if
  :: then_release == 2 || then_release == 1 && c_used == 0 -> do_release()
  :: else
  fi
}

/* kp_chunk_adopt, up to its CAS (take_detached); the caller's next step
 * stores the owner.  The load is merged with the caller's test of
 * DETACHED just before it (two loads of the same word).  ok = taken;
 * on failure the slot s, if not 0, goes into the batch in the same step
 * (kp_remote_free's fall-through). */
inline took_detached() {
  assert(taker == 0 && gown == 0 && !released);
  taker = _pid; gown = _pid;
  take_remote(wh, wc, 0);
  printf("T%d: adopt: takes %d slot(s), used %d\n", _pid, wc, c_used);
  check_inv()
}

inline adopt(ok, s) {
  ok = 0;
#ifdef BUG_ADOPT_STORE
  d_step { LOAD_WORD(); if :: !wd && s != 0 -> batch_add(s) :: else fi };
  if
  :: wd -> d_step { ZERO_WORD(); ok = 1; took_detached() }
  :: else
  fi;
#else
  d_step {                                           /* kp_load_acquire */
    LOAD_WORD();
    if :: !wd && s != 0 -> batch_add(s) :: else fi
  };
  do
  :: !wd -> COVER_AT(2); break                       /* not detached (any more) */
  :: wd ->
     d_step {                                        /* kp_cas_weak_acq_rel */
       if
       :: WORD_IS(wh, wc, wd) -> ZERO_WORD(); ok = 1; took_detached()
       :: else ->
          LOAD_WORD(); COVER_AT(3);
          if :: !wd && s != 0 -> batch_add(s) :: else fi
       fi
     };
     if :: ok -> break :: else fi
  od;
#endif
  wh = 0; wc = 0; wd = 0
}

/* mark_reusable */
inline mark_reusable() {
  d_step { reusable = 1; printf("T%d: mark reusable\n", _pid) }  /* kp_fetch_or_acq_rel */
}

/* kp_chunk_detach: the holder gives the chunk up (it is current nowhere
 * and on no list). */
inline detach() {
  d_step {
#ifndef BUG_ROOM_LATE
    PRIV_READ; room = (c_free != 0 || c_local != 0); /* kp_chunk_has_room */
#endif
    c_last = _pid                                    /* kp_store_relaxed */
  };
#ifdef BUG_DETACH_EARLY
  d_step { PRIV_READ; u = c_used };
#else
  d_step { PRIV_READ; c_du = c_used };               /* kp_store_relaxed */
#endif
  c_owner = 0;                                       /* kp_store_relaxed */
  d_step { LOAD_WORD() };                            /* kp_load_relaxed */
  do
  :: d_step {
       PRIV_READ;
#ifdef BUG_DETACH_NOCHECK
       z = 0;
#else
       z = (wc == c_used);                           /* all out on the remote list */
#endif
       if
       :: z -> skip
       :: !z && WORD_IS(wh, wc, wd) ->               /* kp_cas_weak_acq_rel */
          PRIV;
          r_det = 1; gown = 0; taker = 0; ok = 1;
          printf("T%d: detach: DETACHED set, count %d, detached_used %d, used %d\n", _pid, r_cnt, c_du, c_used);
          check_inv()
       :: !z && !WORD_IS(wh, wc, wd) -> LOAD_WORD(); COVER_AT(5)
       fi
     };
     if
     :: z ->
        COVER_AT(4);
        c_owner = _pid;                              /* kp_store_relaxed */
        d_step { collect_body(0, n, 2, 0); n = 0 };  /* kp_remote_collect, kp_chunk_retire */
        break
     :: ok ->
#ifdef BUG_DETACH_EARLY
        c_du = u;                                    /* kp_store_relaxed, too late */
        u = 0;
#endif
#ifdef BUG_ROOM_LATE
        d_step { PRIV_READ; room = (c_free != 0 || c_local != 0) };
#endif
        ok = 0;
        if
        :: room || wc != 0 -> COVER_AT(6); mark_reusable()
        :: else
        fi;
        break
     :: else
     fi
  od;
  z = 0; room = 0; wh = 0; wc = 0; wd = 0
}

/* release_emptied: take the chunk from the exact word the push made, and
 * retire it. */
inline release_emptied(h, n) {
  atomic {
#ifdef BUG_RELEASE_BLIND
    ok = 1;
#else
    if
    :: WORD_IS(h, n, 1) -> ok = 1                    /* kp_cas_strong_acq_rel */
#ifdef BUG_RELEASE_WEAK
    :: WORD_IS(h, n, 1) -> ok = 0                    /* spurious failure */
#endif
    :: else -> ok = 0
    fi;
#endif
    if
    :: ok ->
       ZERO_WORD();
       assert(taker == 0 && gown == 0 && !released);
       taker = _pid; gown = _pid;
       c_used = c_used - (n);
       assert(c_used == 0);                          /* DET-2 */
       COVER_AT(7);
       do_release()
    :: else -> COVER_AT(8)                           /* someone adopted it */
    fi;
    ok = 0
  }
}

/* batch_flush -> push_list: publishes this thread's batch bh..bt of bn
 * slots. */
inline flush() {
  d_step { LOAD_WORD() };                            /* kp_load_relaxed */
  do
  :: d_step {                                        /* kp_cas_weak_acq_rel */
       if
       :: WORD_IS(wh, wc, wd) ->
          assert(!released && wc + bn <= N);         /* kp_corrupt: more than its capacity */
          next[bt] = wh;                             /* tail->next = head(w) */
          r_head = bh; r_cnt = wc + bn;
          x = bh; k = 0;
          do
          :: k < bn -> assert(inb[x] == _pid); inb[x] = 0; x = next[x]; k++
          :: else -> break
          od;
          x = 0; k = 0;
          ok = 1;
          printf("T%d: push %d slot(s): remote count %d -> %d, detached %d\n", _pid, bn, wc, r_cnt, wd);
          check_inv()
       :: else -> LOAD_WORD(); COVER_AT(9)
       fi
     };
     if :: ok -> break :: else fi
  od;
  ok = 0;
  if
  :: wd ->
     d_step {
       out = c_du;                                   /* kp_load_relaxed */
       printf("T%d: reads detached_used = %d\n", _pid, out);
#ifdef BUG_PUSH_OLD_COUNT
       n = wc
#else
       n = wc + bn
#endif
     };
     if
     :: n == out -> release_emptied(bh, wc + bn)
     :: n > out ->
#ifndef BUG_DU_UNCHECKED
        /* Corruption only if the word is still the one this push made
         * (detached_used is then of the same detach); else the chunk was
         * taken since, and the taker owns the decision. */
        d_step {                                     /* kp_load_relaxed */
          COVER_AT(11);
          assert(!WORD_IS(bh, wc + bn, 1))           /* kp_corrupt */
        };
        if :: wc == 0 -> mark_reusable() :: else fi
#else
        assert(n <= out)                             /* kp_corrupt: "more slots freed than were live" */
#endif
     :: n < out ->
        if
        :: wc == 0 -> COVER_AT(10); mark_reusable()
        :: else
        fi
     fi;
     out = 0; n = 0
  :: else
  fi;
  bh = 0; bt = 0; bn = 0; wh = 0; wc = 0; wd = 0
}

/* kp_remote_free; s is a live slot this thread holds, of a chunk it does
 * not own. */
inline remote_free(s) {
  d_step {                                           /* kp_load_relaxed(&c->last_owner) */
    z = (c_last == _pid);
    if :: !z -> batch_add(s) :: else fi
  };
  if
  :: z ->                                            /* kp_load_relaxed(&c->remote) */
     d_step {
       z = (r_det && r_cnt == 0);                    /* detached, the list empty */
       if :: !z -> batch_add(s) :: else fi
     }
  :: else
  fi;
  if
  :: z ->                                            /* kp_chunk_adopt */
     z = 0;
     adopt(ok, s);
     if
     :: ok ->                                        /* taken back */
        d_step {
          c_owner = _pid;                            /* kp_store_relaxed */
          free_local(s);
          if
          :: c_used == 0 -> COVER_AT(12); do_release()   /* kp_chunk_retire */
          :: else -> COVER_AT(13); h_avail[_pid] = 1; check_inv()
          fi;
          ok = 0
        }
     :: else
     fi
  :: else
  fi;
  if
  :: bn >= BMAX -> flush()
  :: else
  fi
}

/* ---- alloc.c ---------------------------------------------------------- */

/* kp_adopt_reusable; ok = the chunk was adopted and has room. */
inline adopt_reusable(ok) {
  ok = 0;
  if
  :: true -> skip                                    /* reusable_count read as 0 */
  :: d_step { was = reusable; reusable = 0 };        /* kp_load_relaxed, kp_fetch_and_acq_rel */
     if
     :: was ->
        was = 0;
        if
        :: released -> skip                          /* kind != KP_CHUNK_BUCKET */
        :: else ->
           adopt(ok, 0);
           if
           :: ok ->
              d_step {
                c_owner = _pid;                      /* kp_store_relaxed */
                if
                :: c_used == 0 -> COVER_AT(15); do_release(); ok = 0
                :: c_used != 0 && c_free == 0 && c_local == 0 -> ok = 0; z = 1
                :: c_used != 0 && (c_free != 0 || c_local != 0) -> z = 2
                fi
              };
              if
              :: z == 1 -> z = 0; COVER_AT(16); detach()  /* a stale mark: nothing to give */
              :: z == 2 ->
                 z = 0;
                 if
                 :: d_step { COVER_AT(17); set_current() }  /* the caller's kp_heap_set_current */
                 :: d_step {
                      /* kp_heap_avail_push: the mark was of an earlier
                       * life, of another class (the model has one) */
                      COVER_AT(21); h_avail[_pid] = 1; ok = 0; check_inv()
                    }
                 fi
              :: else
              fi
           :: else
           fi
        fi
     :: else
     fi
  fi
}

/* kp_malloc_small and kp_malloc_small_slow; s = 0 when the slot comes
 * from another chunk. */
inline malloc(s) {
  s = 0;
  d_step {
    if
    :: h_cur[_pid] == C && c_free != 0 -> pop(s); z = 1   /* the hit path */
    :: h_cur[_pid] == OTHER -> z = 2
    :: else -> z = 0
    fi
  };
  if
  :: z == 1 -> z = 0
  :: z == 2 -> z = 0                                 /* a slot of the other chunk */
  :: z != 1 ->                                       /* kp_malloc_small_slow */
     z = 0;
     if :: bn != 0 -> flush() :: else fi;           /* kp_remote_flush_all */
     do
     :: d_step {
          if
          :: h_cur[_pid] == C && c_free != 0 -> pop(s); z = 1
          :: h_cur[_pid] == C && c_free == 0 && c_local != 0 ->   /* chunk_refill */
             PRIV; COVER_AT(14);
             c_free = c_local; c_local = 0; c_used = N + BIAS;
             pop(s); z = 1
          :: h_cur[_pid] == C && c_free == 0 && c_local == 0 -> z = 2
          :: h_cur[_pid] == OTHER -> h_cur[_pid] = NONE; z = 0    /* it ran dry: retired */
          :: h_cur[_pid] == NONE && h_avail[_pid] ->
             PRIV; h_avail[_pid] = 0; set_current(); z = 0
          :: h_cur[_pid] == NONE && !h_avail[_pid] -> z = 3
          fi
        };
        if
        :: z == 1 -> break
        :: z == 0 -> skip
        :: z == 2 ->                                 /* chunk_refill: the remote list */
           z = 0;
#ifdef BUG_COLLECT_LOAD
           d_step { PRIV; LOAD_WORD() };
           d_step {
             collect_body(1, n, 0, 1);
#else
           d_step {
             collect_body(1, n, 0, 0);
#endif
             if
             :: n != 0 -> pop(s); z = 1
             :: else -> unset_current()             /* retire_current */
             fi;
             n = 0
           };
           if
           :: z == 1 -> break
           :: else -> detach()
           fi
        :: z == 3 ->
           z = 0;
           adopt_reusable(ok);
           if
           :: ok -> ok = 0
           :: else -> h_cur[_pid] = OTHER; break     /* kp_chunk_obtain: a fresh chunk */
           fi
        fi
     od;
     z = 0                                           /* (where the loop's breaks land) */
  fi
}

/* ---- free (internal.h kp_free_inline, free.c) -------------------------- */

inline free(s) {
  d_step {
    if
    :: c_owner == _pid ->                            /* kp_load_relaxed */
       free_local(s);
       z = 1 + (c_used == 0)
    :: else -> z = 0
    fi
  };
  if
  :: z == 2 ->                                       /* kp_free_owned_slow */
     COVER_AT(18);
     d_step {
       PRIV; assert(h_avail[_pid]); h_avail[_pid] = 0;
       collect_body(0, n, 2, 0);
       n = 0
     }
  :: z == 1 -> skip
  :: z == 0 -> remote_free(s)
  fi;
  z = 0
}

/* ---- thread exit and trim (heap.c) ------------------------------------- */

/* heap_teardown: kp_remote_flush_all, then chunk_abandon */
inline thread_exit() {
  if :: bn != 0 -> flush() :: else fi;
  d_step {
    if
    :: h_cur[_pid] == C || h_avail[_pid] ->
       if
       :: h_cur[_pid] == C -> unset_current()
       :: else -> PRIV; h_avail[_pid] = 0; check_inv()
       fi;
       collect_body(0, n, 1, 0);
       n = 0;
       z = !released
    :: else -> z = 0
    fi;
    h_cur[_pid] = NONE
  };
  if
  :: z -> z = 0; detach()
  :: else
  fi
}

/* kp_heap_collect -> chunk_collect */
inline trim() {
  if :: bn != 0 -> flush() :: else fi;
  d_step {
    if
    :: h_cur[_pid] == C || h_avail[_pid] ->
       z = (h_cur[_pid] == C);
       collect_body(z, n, 0, 0);
       n = 0;
       if :: z -> unset_current() :: else fi;
       if
       :: c_used == 0 ->
          COVER_AT(19);
          if :: !z -> h_avail[_pid] = 0 :: else fi;
          do_release()
       :: c_used != 0 && z -> COVER_AT(20); set_current()
       :: else
       fi;
       z = 0
    :: else
    fi
  }
}

/* ---- the threads ------------------------------------------------------- */

proctype thread(byte lim) {
  byte s, kept, allocs, n, x, k, z, nf, nl, nr, wh, wc, bh, bt, bn;
  short out, u;
  int seen;
  bool ok, was, room, wd, trimmed;

  do
  :: allocs < lim ->
     allocs++;
     malloc(s);
     atomic {                                        /* a choice: d_step would fix it */
       if
       :: s == 0 -> skip
       :: s != 0 -> kept = kept | (1 << s)
       :: s != 0 && _pid == 1 -> box[2]!s; held[s] = 2; printf("T1: hands slot %d to T2\n", s)
       :: s != 0 && _pid == 1 -> box[3]!s; held[s] = 3; printf("T1: hands slot %d to T3\n", s)
       fi;
       s = 0
     }
  :: kept != 0 ->
     atomic {
       if
       :: kept & 2 -> s = 1
       :: kept & 4 -> s = 2
       :: kept & 8 -> s = 3
       :: kept & 16 -> s = 4
       fi;
       kept = kept & ~(1 << s)
     };
     free(s);
     s = 0
  :: _pid != 1 && nempty(box[_pid]) -> box[_pid]?s; free(s); s = 0
  :: bn != 0 -> flush()                             /* the batch's place is needed */
#ifdef TRIM
  :: !trimmed && _pid != 2 -> trimmed = 1; trim()   /* kame_pool_trim */
#endif
  :: allocs == lim && kept == 0 && (_pid == 1 || gifts_done && empty(box[_pid])) -> break
  od;
  if :: _pid == 1 -> gifts_done = 1 :: else fi;
  printf("T%d: exits\n", _pid);
  thread_exit();
  exited++
}

/* At the end the chunk went back: nothing is stranded. */
proctype final() {
  (exited == 3) ->
  assert(released)
}

init {
  byte k;
  atomic {
    /* kp_chunk_init_bucket, kp_heap_set_current, chunk_carve: thread 1's
     * current chunk, every slot on its free list 1 -> 2 -> .. -> N */
    c_owner = 1; gown = 1; h_cur[1] = C;
    c_free = 1;
    k = 1;
    do
    :: k < N -> next[k] = k + 1; k++
    :: else -> break
    od;
    c_used = N + BIAS;
    run thread(ALLOCS);   /* _pid 1 */
    run thread(0);        /* _pid 2 */
    run thread(AMALLOCS); /* _pid 3 */
    run final()
  }
}
