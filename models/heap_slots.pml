/* Heap slots (src/heap.c heap_slot_claim, heap_slot_release): per-thread
 * heaps live in slabs that are never unmapped; a slab's in_use bitmap
 * says which of its heaps belong to a live thread, and slabs are pushed
 * on a list that is never popped.
 *
 * Slabs of S heaps (64 in the C) are modelled; three threads each take a
 * heap, use it and give it back, twice (a thread's start and exit).
 * Mapping a fresh slab always succeeds here.
 *
 * Every atomic operation of the C code is one step; plain accesses are
 * ordinary statements.  Ghost variables (owner, mapped) are updated in
 * the step of the operation that changes what they record.
 *
 * Properties:
 *  - a heap belongs to at most one thread at a time (assert at claim);
 *  - a thread only gives back the heap it holds (assert at release);
 *  - no more slabs are mapped than there are threads, however the claims
 *    interleave (assert at every mapping);
 *  - at the end every mapped slab is on the list exactly once, the list
 *    ends, and every in_use bit is clear; no thread blocks.
 *
 * Mutations (spin -DBUG_...): each must make verification fail.
 *  BUG_SLOT_PLAIN     the claim sets the bit with a plain store, not a CAS;
 *  BUG_RELEASE_STORE  the release stores a word computed from an earlier
 *                     load instead of using fetch_and;
 *  BUG_PUSH_PLAIN     a fresh slab is published with a plain store of the
 *                     list head, not a CAS. */

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
#define COVER_POINTS 4

#define T 3                 /* threads */
#define S 2                 /* heaps per slab */
#define FULL ((1 << S) - 1)
#define MAXSLABS T          /* slab ids 1..MAXSLABS; 0 is NULL */
#define ROUNDS 2

byte slab_list;                /* the list head (atomic) */
byte slab_next[MAXSLABS + 1];  /* s->next (plain, written before publishing) */
byte in_use[MAXSLABS + 1];     /* s->in_use (atomic) */

/* Ghost state. */
byte owner[(MAXSLABS + 1) * S]; /* heap (slab, index) -> thread _pid, or 0 */
byte mapped;                    /* slabs mapped so far */
byte done;                      /* threads finished */

proctype thread() {
  byte round, s, cur, i, fresh, head, mine_s, mine_i;
  bool got;

  do
  :: round == ROUNDS -> break
  :: else ->
     round++;
     /* heap_slot_claim */
     got = 0;
     do
     :: got -> break
     :: else ->
        s = slab_list;                               /* kp_load_acquire */
        do
        :: s == 0 || got -> break
        :: else ->
           cur = in_use[s];                          /* kp_load_relaxed */
           do
           :: cur == FULL -> break
           :: else ->
              d_step {                               /* __builtin_ctzll(~cur) */
                i = 0;
                do
                :: cur & (1 << i) -> i++
                :: else -> break
                od
              };
#ifdef BUG_SLOT_PLAIN
              atomic {
                in_use[s] = cur | (1 << i);
                assert(owner[s * S + i] == 0);
                owner[s * S + i] = _pid;
                got = 1
              };
              break
#else
              atomic {                               /* kp_cas_weak_acq_rel */
                if
                :: in_use[s] == cur ->
                   in_use[s] = cur | (1 << i);
                   assert(owner[s * S + i] == 0);
                   owner[s * S + i] = _pid;
                   got = 1
                :: in_use[s] == cur -> skip          /* spurious failure */
                :: in_use[s] != cur -> cur = in_use[s]; COVER_AT(1)
                fi
              };
              if
              :: got -> break
              :: else
              fi
#endif
           od;
           if
           :: got -> mine_s = s; mine_i = i          /* h->slab, h->slab_index */
           :: else -> s = slab_next[s]
           fi
        od;
        if
        :: got -> skip
        :: else ->
           /* kp_os_map: a fresh, zeroed slab */
           atomic {
             assert(mapped < MAXSLABS);
             mapped++;
             fresh = mapped;
             if :: mapped > 1 -> COVER_AT(2) :: else fi
           };
           head = slab_list;                         /* kp_load_relaxed */
#ifdef BUG_PUSH_PLAIN
           slab_next[fresh] = head;
           slab_list = fresh;
#else
           do
           :: slab_next[fresh] = head;               /* fresh->next = head */
              atomic {                               /* kp_cas_weak_acq_rel */
                if
                :: slab_list == head -> slab_list = fresh; fresh = 0
                :: slab_list == head -> skip         /* spurious failure */
                :: slab_list != head -> head = slab_list; COVER_AT(3)
                fi
              };
              if
              :: fresh == 0 -> break
              :: else
              fi
           od;
#endif
           fresh = 0; head = 0
        fi
     od;
     s = 0; cur = 0; i = 0;

     /* The thread runs on its heap; then heap_thread_exit gives it back. */
     if :: mine_s > 1 -> COVER_AT(4) :: else fi;

     /* heap_slot_release */
#ifdef BUG_RELEASE_STORE
     cur = in_use[mine_s];
     atomic {
       in_use[mine_s] = cur & ~(1 << mine_i);
       assert(owner[mine_s * S + mine_i] == _pid);
       owner[mine_s * S + mine_i] = 0
     };
     cur = 0;
#else
     atomic {                                        /* kp_fetch_and_acq_rel */
       in_use[mine_s] = in_use[mine_s] & ~(1 << mine_i);
       assert(owner[mine_s * S + mine_i] == _pid);
       owner[mine_s * S + mine_i] = 0
     };
#endif
     mine_s = 0; mine_i = 0; got = 0
  od;
  done++
}

/* At the end: the list holds every mapped slab once, and no heap is in use. */
proctype final() {
  byte s, n, seen;
  (done == T) ->
  d_step {
    s = slab_list;
    do
    :: s != 0 ->
       assert(n < MAXSLABS && (seen & (1 << s)) == 0);
       seen = seen | (1 << s);
       assert(in_use[s] == 0);
       n++;
       s = slab_next[s]
    :: else -> break
    od;
    assert(n == mapped)
  }
}

init {
  atomic {
    run thread();
    run thread();
    run thread();
    run final()
  }
}
