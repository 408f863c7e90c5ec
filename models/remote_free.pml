/* One bucket chunk's slots across threads: the owner's allocation and
 * free paths (internal.h kp_malloc_small / kp_free_inline, alloc.c,
 * free.c), cross-thread free (remote.c kp_remote_free,
 * kp_remote_collect), the per-class remote hint, and thread exit with
 * orphaning, adoption and trim (heap.c chunk_abandon, chunk_orphan,
 * kp_heap_adopt_orphan, heap_take_chunk, kp_orphans_release_empty,
 * heap_collect_full, chunk_collect).
 *
 * The chunk has N slots, all carved.  Thread 1 owns it as its current
 * chunk; it allocates ALLOCS times, keeping each slot or handing it to
 * thread 2 or 3, frees what it kept (in any order, between allocations),
 * with -DTRIM also trims its heap once (kp_heap_collect) at any point, and
 * exits.  Threads 2 and 3 free every slot they are given, then each either
 * allocates once (which may adopt the orphaned chunk; the slot is then
 * freed again) or releases emptied orphans (kp_orphans_release_empty, the
 * part of kame_pool_trim that concerns them), and exits.  An allocation
 * that would claim a fresh chunk is outside the model: it returns no slot
 * of this one.  One size class; the unit bitmap is chunk_claim.pml's.
 *
 * Every atomic operation of the C code is one step; plain accesses to the
 * owner's fields are ordinary statements.  Ghost variables (held,
 * released, taker, pend) record who holds what and are updated in the
 * step of the operation that changes it.
 *
 * Properties:
 *  - a slot is never handed out while held or while on another list
 *    (assert at every hand-out);
 *  - the owner's view is consistent: every slot is held, on c->free, on
 *    c->local_free or on the remote list, exactly once, and used counts
 *    the held and remote ones (checked at the owner's quiet points);
 *  - the chunk is released only when every slot is back on its free
 *    lists, and nobody touches it afterwards;
 *  - an orphan is taken by at most one thread per orphaning;
 *  - at the end every slot is back: the chunk was released, or it is an
 *    orphan whose remaining slots wait on its remote list; no thread
 *    blocks (no invalid end state).
 *  - with -DHINT_CHECK: when a thread gives up on its chunks (it would
 *    claim a fresh one), a full chunk of its own never has remote frees
 *    with no hint raised or about to be raised.  The C code reads the
 *    owner after the push (FIX_HINT, the default); -DOLD_HINT models the
 *    earlier code, which read it before the push and FAILS this (README).
 *
 * Mutations (spin -DBUG_...): each must make verification fail.
 *  BUG_ADOPT_PLAIN     adoption tests and clears the orphan bit with a
 *                      plain load and store instead of fetch_and;
 *  BUG_COLLECT_LOAD    collect reads the remote list and then stores NULL
 *                      (two steps) instead of one exchange;
 *  BUG_USED_NO_REMOTE  collect forgets to subtract the collected slots
 *                      from used;
 *  BUG_REMOTE_PLAIN    the remote push is a plain load and store, not a
 *                      CAS;
 *  BUG_FREE_CURRENT    the owner releases its current chunk when its last
 *                      slot comes back (kp_free_owned_slow without the
 *                      current-chunk test);
 *  BUG_HINT_LATE_CLEAR heap_collect_full clears the hint after scanning
 *                      instead of before (checked with -DHINT_CHECK
 *                      -DFIX_HINT, which pass without it). */

#if !defined(OLD_HINT) && !defined(FIX_HINT)
#define FIX_HINT
#endif

#ifndef N
#define N 3       /* slots; ids 1..N, 0 is NULL (at most 3) */
#endif
#ifndef ALLOCS
#define ALLOCS 4  /* allocations by thread 1 */
#endif

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
#define COVER_POINTS 16

#define LIST_NONE 0
#define LIST_AVAIL 1
#define LIST_FULL 2
#define KIND_NONE 0
#define KIND_BUCKET 1

/* kp_chunk: the owner's fields (plain) */
byte c_free;      /* c->free */
byte c_local;     /* c->local_free */
byte c_used;      /* c->used */
byte c_list;      /* c->list */
byte c_kind;      /* c->kind */
byte next[N + 1]; /* every slot's first word: kp_block.next */
/* kp_chunk: atomics */
byte c_owner;  /* c->owner: heap id 1..3, or 0 */
byte c_remote; /* c->remote_free */

/* The region's orphan bit for the chunk, and the global orphan count. */
bool orphan_bit;
byte orphan_count;

/* Heaps 1..3 (heap k belongs to thread k): whether the chunk is the
 * heap's current chunk, or on its avail or full list; the hint is atomic. */
bool h_cur[4];
bool h_avail[4];
bool h_full[4];
bool hint[4];

/* Slots handed from thread 1 to threads 2 and 3. */
chan box[4] = [N] of { byte };
bool gifts_done;

/* Ghost state. */
byte held[N + 1]; /* 0, or the thread holding the slot */
bool released;    /* the chunk went back to its region */
byte taker;       /* who took the orphan since it was last orphaned */
byte pend[4];     /* freers about to raise heap k's hint */
byte pend_any;    /* ... about to read whose hint to raise (FIX_HINT) */
byte exited;      /* threads that have finished */

/* ---- ghost checks ------------------------------------------------------ */

/* Marks slot x as seen in a list walk; asserts it was not seen before. */
inline walk(head) {
  x = head;
  do
  :: x != 0 -> assert((seen & (1 << x)) == 0); seen = seen | (1 << x); cnt++; x = next[x]
  :: else -> break
  od
}

/* The holder's view of the chunk: every slot in exactly one place and
 * used == held + remote.  Only called when the caller is not between the
 * steps of a list operation. */
inline check_chunk() {
  d_step {
    seen = 0; cnt = 0;
    walk(c_free);
    walk(c_local);
    k = cnt;                 /* on the owner's lists */
    walk(c_remote);
    x = 1;
    do
    :: x <= N ->
       if
       :: held[x] != 0 -> assert((seen & (1 << x)) == 0); cnt++
       :: else -> assert(seen & (1 << x))
       fi;
       x++
    :: else -> break
    od;
    assert(cnt == N);
    assert(c_used == N - k);
    seen = 0; cnt = 0; k = 0; x = 0
  }
}

/* ---- remote.c ---------------------------------------------------------- */

/* kp_remote_free */
inline remote_free(s) {
#ifndef FIX_HINT
  osnap = c_owner;                                   /* kp_load_relaxed (before the push) */
#endif
  head = c_remote;                                   /* kp_load_relaxed */
  do
  :: next[s] = head;                                 /* b->next = head */
#ifdef BUG_REMOTE_PLAIN
     atomic {
       assert(!released && held[s] == _pid);
       c_remote = s; held[s] = 0; ok = 1;
       if :: head == 0 && osnap != 0 -> pend[osnap]++ :: else fi
     };
#else
     atomic {                                        /* kp_cas_weak_acq_rel */
       if
       :: c_remote == head ->
          assert(!released && held[s] == _pid);
          c_remote = s; held[s] = 0; ok = 1;
#ifdef FIX_HINT
          if :: head == 0 -> pend_any++ :: else fi
#else
          if :: head == 0 && osnap != 0 -> pend[osnap]++ :: else fi
#endif
       :: c_remote == head -> skip                   /* spurious failure */
       :: c_remote != head -> head = c_remote; COVER_AT(1)  /* a racing push */
       fi
     };
#endif
     if :: ok -> break :: else fi
  od;
  ok = 0;
#ifdef FIX_HINT
  if
  :: head == 0 ->
     atomic { osnap = c_owner; pend_any--; if :: osnap != 0 -> pend[osnap]++ :: else fi }  /* kp_load_relaxed */
  :: else
  fi;
#endif
  if
  :: head == 0 && osnap != 0 ->
     atomic { hint[osnap] = 1; pend[osnap]-- }      /* seq_cst store */
  :: else
  fi;
  head = 0; osnap = 0
}

/* kp_remote_collect; n = slots taken */
inline collect(n) {
  n = 0;
  if
  :: c_remote == 0 -> skip                           /* kp_load_relaxed */
  :: else ->
#ifdef BUG_COLLECT_LOAD
     lst = c_remote;
     atomic { assert(!released); c_remote = 0 };
#else
     atomic { assert(!released); lst = c_remote; c_remote = 0 };  /* exchange */
#endif
     if
     :: lst == 0 -> skip
     :: else ->
        n = 1;
        tail = lst;
        do
        :: next[tail] != 0 -> tail = next[tail]; n++
        :: else -> break
        od;
        next[tail] = c_free;
        c_free = lst;
#ifndef BUG_USED_NO_REMOTE
        c_used = c_used - n;
#endif
        lst = 0; tail = 0
     fi
  fi
}

/* ---- chunk lists (heap.c) ---------------------------------------------- */

inline list_push(which) {                            /* kp_heap_list_push */
  c_list = which;
  if
  :: which == LIST_FULL -> h_full[_pid] = 1
  :: else -> h_avail[_pid] = 1
  fi
}

inline list_remove() {                               /* kp_heap_list_remove */
  if
  :: c_list == LIST_NONE -> skip
  :: c_list == LIST_FULL -> h_full[_pid] = 0; c_list = LIST_NONE
  :: c_list == LIST_AVAIL -> h_avail[_pid] = 0; c_list = LIST_NONE
  fi
}

/* kp_chunk_release: only with every slot back on the owner's lists. */
inline release() {
  d_step {
    assert(!released);
    assert(c_remote == 0);
    seen = 0; cnt = 0;
    walk(c_free);
    walk(c_local);
    assert(cnt == N);
    x = 1;
    do
    :: x <= N -> assert(held[x] == 0); x++
    :: else -> break
    od;
    seen = 0; cnt = 0; x = 0;
    released = 1
  };
  c_kind = KIND_NONE;
  c_owner = 0;                                       /* kp_store_relaxed */
  c_free = 0;
  c_local = 0
  /* the claimed bits are cleared here: see chunk_claim.pml */
}

/* ---- allocation (internal.h kp_malloc_small, alloc.c) ------------------ */

/* Takes the head of c->free. */
inline pop(s) {
  s = c_free;
  d_step {                                           /* ghost: a fresh hand-out */
    assert(!released && s != 0 && held[s] == 0);
    seen = 0; cnt = 0;
    walk(c_remote);
    walk(c_local);
    assert((seen & (1 << s)) == 0);
    seen = 0; cnt = 0; x = 0;
    held[s] = _pid
  };
  c_free = next[s];
  c_used++
}

/* chunk_refill */
inline refill(ok2) {
  if
  :: c_local != 0 -> c_free = c_local; c_local = 0; ok2 = 1; COVER_AT(2)
  :: else ->
     collect(n);
     ok2 = (n != 0);                                 /* no carving: all slots carved */
     if :: ok2 -> COVER_AT(3) :: else fi;
     n = 0
  fi
}

/* heap_collect_full */
inline collect_full() {
#ifndef BUG_HINT_LATE_CLEAR
  atomic { hint[_pid] = 0 };                         /* seq_cst store */
#endif
  if
  :: h_full[_pid] ->
     collect(n);
     if
     :: n != 0 ->
        list_remove();
        if
        :: c_used == 0 -> COVER_AT(4); release()
        :: else -> COVER_AT(5); list_push(LIST_AVAIL)
        fi
     :: else
     fi;
     n = 0
  :: else
  fi;
#ifdef BUG_HINT_LATE_CLEAR
  atomic { hint[_pid] = 0 };
#endif
  skip
}

/* heap_take_chunk */
inline take_chunk() {
  c_owner = _pid;                                    /* kp_store_relaxed */
  collect(n);
  n = 0;
  c_list = LIST_NONE;
  if
  :: c_used == 0 -> COVER_AT(6); release()
  :: else ->
     if
     :: c_free != 0 || c_local != 0 -> COVER_AT(7); list_push(LIST_AVAIL)
     :: else -> COVER_AT(8); list_push(LIST_FULL)
     fi;
     check_chunk()
  fi
}

/* kp_heap_adopt_orphan; ok2 = the heap now has an avail chunk */
inline adopt_orphan(ok2) {
  ok2 = 0;
  if
  :: orphan_count == 0 -> skip                       /* kp_load_relaxed */
  :: else ->
     if
     :: orphan_bit ->                                /* kp_load_relaxed */
#ifdef BUG_ADOPT_PLAIN
        was = orphan_bit;
        orphan_bit = 0;
        d_step { if :: was -> assert(taker == 0); taker = _pid :: else fi };
#else
        atomic {                                     /* kp_fetch_and_acq_rel */
          was = orphan_bit; orphan_bit = 0;
          if :: was -> assert(taker == 0); taker = _pid :: else fi
        };
#endif
        if
        :: was ->
           orphan_count--;                           /* kp_fetch_sub_relaxed */
           take_chunk();
           ok2 = h_avail[_pid]
        :: else
        fi;
        was = 0
     :: else
     fi
  fi
}

/* kp_malloc_small and kp_malloc_small_slow; s = 0 when the thread would
 * claim a fresh chunk. */
inline malloc(s) {
  s = 0;
  if
  :: h_cur[_pid] && c_free != 0 -> pop(s)             /* the hit path */
  :: else ->
     do
     :: h_cur[_pid] ->
        if
        :: c_free != 0 -> pop(s); break
        :: else ->
           refill(ok);
           if
           :: ok -> ok = 0; pop(s); break
           :: else
           fi;
           list_push(LIST_FULL);
           h_cur[_pid] = 0
        fi
     :: else ->
        if
        :: hint[_pid] -> collect_full()               /* kp_load_relaxed */
        :: else
        fi;
        if
        :: h_avail[_pid] -> skip
        :: else -> adopt_orphan(ok); ok = 0
        fi;
        if
        :: h_avail[_pid] -> list_remove(); h_cur[_pid] = 1
        :: else ->
#ifdef HINT_CHECK
           d_step {
             assert(!(h_full[_pid] && c_remote != 0 && !hint[_pid] &&
                      pend[_pid] == 0 && pend_any == 0))
           };
#endif
           break                                     /* kp_chunk_claim */
        fi
     od
  fi;
  if :: h_cur[_pid] || h_avail[_pid] || h_full[_pid] -> check_chunk() :: else fi
}

/* ---- free (internal.h kp_free_inline, free.c) -------------------------- */

/* kp_free_owned_slow */
inline free_owned_slow() {
  if
  :: c_list == LIST_FULL -> COVER_AT(9); list_remove(); list_push(LIST_AVAIL)
  :: else
  fi;
  if
#ifdef BUG_FREE_CURRENT
  :: c_used == 0 -> list_remove(); release()
#else
  :: c_used == 0 && !h_cur[_pid] -> COVER_AT(10); list_remove(); release()
#endif
  :: else
  fi
}

inline free(s) {
  if
  :: c_owner == _pid ->                              /* kp_load_relaxed */
     next[s] = c_local;
     d_step { assert(!released && held[s] == _pid); c_local = s; held[s] = 0 };
     c_used--;
     if
     :: c_used != 0 && c_list != LIST_FULL -> skip
     :: else -> free_owned_slow()
     fi;
     if :: h_cur[_pid] || h_avail[_pid] || h_full[_pid] -> check_chunk() :: else fi
  :: else ->
     assert(c_kind == KIND_BUCKET);                  /* kp_free_generic */
     remote_free(s)
  fi
}

/* ---- thread exit and trim (heap.c) ------------------------------------- */

/* chunk_orphan */
inline orphan() {
  c_list = LIST_NONE;
  c_owner = 0;                                       /* kp_store_relaxed */
  orphan_count++;                                    /* kp_fetch_add_relaxed */
  atomic { assert(!orphan_bit); orphan_bit = 1; taker = 0 }  /* kp_fetch_or_acq_rel */
}

/* heap_thread_exit -> chunk_abandon */
inline thread_exit() {
  if
  :: h_cur[_pid] || h_avail[_pid] || h_full[_pid] ->
     h_cur[_pid] = 0;
     list_remove();
     collect(n);
     n = 0;
     if
     :: c_used == 0 -> COVER_AT(11); release()
     :: else -> COVER_AT(12); orphan()
     fi
  :: else
  fi
}

/* kp_heap_collect -> chunk_collect (kame_pool_trim on the thread's heap) */
inline heap_collect() {
  if
  :: h_cur[_pid] || h_avail[_pid] || h_full[_pid] ->
     collect(n);
     n = 0;
     if
     :: c_used != 0 ->
        if
        :: c_list == LIST_FULL && (c_free != 0 || c_local != 0) ->
           COVER_AT(15);
           list_remove();
           list_push(LIST_AVAIL)
        :: else
        fi;
        check_chunk()
     :: else ->
        COVER_AT(16);
        h_cur[_pid] = 0;
        list_remove();
        release()
     fi
  :: else
  fi
}

/* kp_orphans_release_empty */
inline trim_orphans() {
  if
  :: orphan_count == 0 -> skip                       /* kp_load_relaxed */
  :: else ->
     if
     :: orphan_bit ->                                /* kp_load_relaxed */
        atomic {                                     /* kp_fetch_and_acq_rel */
          was = orphan_bit; orphan_bit = 0;
          if :: was -> assert(taker == 0); taker = _pid :: else fi
        };
        if
        :: was ->
           collect(n);
           n = 0;
           check_chunk();
           if
           :: c_used == 0 ->
              orphan_count--;                        /* kp_fetch_sub_relaxed */
              COVER_AT(13);
              release()
           :: else ->
              COVER_AT(14);
              atomic { orphan_bit = 1; taker = 0 }   /* kp_fetch_or_acq_rel */
           fi
        :: else
        fi;
        was = 0
     :: else
     fi
  fi
}

/* ---- the threads ------------------------------------------------------- */

proctype thread() {
  byte s, kept, allocs, n, lst, tail, head, osnap, x, k, cnt;
  int seen;
  bool ok, was, trimmed;

  if
  :: _pid == 1 ->
     do
     :: allocs < ALLOCS ->
        allocs++;
        malloc(s);
        if
        :: s == 0 -> skip
        :: s != 0 -> kept = kept | (1 << s)
        :: s != 0 -> atomic { box[2]!s; held[s] = 2 }  /* handed over */
        :: s != 0 -> atomic { box[3]!s; held[s] = 3 }
        fi;
        s = 0
     :: kept != 0 ->                                 /* free one kept slot */
        if
        :: kept & 2 -> s = 1
        :: kept & 4 -> s = 2
        :: kept & 8 -> s = 3
        fi;
        kept = kept & ~(1 << s);
        free(s);
        s = 0
#ifdef TRIM
     :: !trimmed -> trimmed = 1; heap_collect()    /* kame_pool_trim */
#endif
     :: allocs == ALLOCS && kept == 0 -> break
     od;
     gifts_done = 1;
     thread_exit()
  :: else ->
     do
     :: box[_pid]?s -> free(s); s = 0
     :: empty(box[_pid]) && gifts_done -> break
     od;
     /* The guards keep the inner ifs' else branches local to them. */
     if
     :: true -> malloc(s);
        if
        :: s != 0 -> free(s); s = 0
        :: else
        fi
     :: true -> trim_orphans()
     fi;
     thread_exit()
  fi;
  exited++
}

/* At the end every slot is back and the chunk is accounted for. */
proctype final() {
  byte x, k, cnt;
  int seen;
  (exited == 3) ->
  d_step {
    x = 1;
    do
    :: x <= N -> assert(held[x] == 0); x++
    :: else -> break
    od;
    assert(orphan_count == orphan_bit);
    assert(!h_cur[1] && !h_avail[1] && !h_full[1]);
    assert(!h_cur[2] && !h_avail[2] && !h_full[2]);
    assert(!h_cur[3] && !h_avail[3] && !h_full[3]);
    if
    :: released -> assert(!orphan_bit)
    :: else ->
       /* an orphan whose live slots were all freed remotely */
       assert(orphan_bit && c_owner == 0 && c_used > 0);
       seen = 0; cnt = 0;
       walk(c_free);
       walk(c_local);
       k = cnt;
       walk(c_remote);
       assert(cnt == N && c_used == N - k)
    fi
  }
}

init {
  atomic {
    /* kp_chunk_init_bucket, all slots carved: free = 1 -> 2 -> .. -> N */
    c_kind = KIND_BUCKET;
    c_free = 1;
    next[1] = (N > 1 -> 2 : 0);
    next[2] = (N > 2 -> 3 : 0);
    c_owner = 1;
    h_cur[1] = 1;
    run thread();   /* _pid 1 */
    run thread();   /* _pid 2 */
    run thread();   /* _pid 3 */
    run final()
  }
}
