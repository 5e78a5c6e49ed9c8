/* A parallel loop over independent work items on fqcore's own thread pool. */
#ifndef FQ_PARALLEL_H
#define FQ_PARALLEL_H

#include <stddef.h>

/* Runs items [first, end), in order. */
typedef void (*fq_range_fn)(void *context, size_t first, size_t end);

/* Runs the items [0, items) through body on up to `threads` threads: the calling thread and pool
   workers claim runs of adjacent items, so results must not depend on which thread runs an item
   (items write disjoint outputs). One body(context, 0, items) on the calling thread when
   threads == 1, when no worker can be started, or while another call holds the pool. Workers run
   items under the caller's floating-point environment. */
void fq_parallel_for(int threads, size_t items, fq_range_fn body, void *context);

/* The same for a pass whose items the caller wants walked from the last to the first (body walks
   each range it gets backwards): each thread takes its own items from their last, so a pass that
   follows a forward one starts on the data that pass left in the thread's cache. */
void fq_parallel_for_backward(int threads, size_t items, fq_range_fn body, void *context);

/* Starts workers until `threads` threads (the caller included) can run a call; returns how many
   can. When the system refuses threads that is fewer: with `all_or_none`, as many as before (the
   workers just started retire). */
int fq_parallel_reserve(int threads, int all_or_none);

/* Workers started and not asleep: they take part in a call at no cost of waking them. */
int fq_parallel_awake_workers(void);

/* 1 while recent calls found their workers kept off their cores (other processes busy): calls
   should stay on one thread. */
int fq_parallel_backing_off(void);

#endif
