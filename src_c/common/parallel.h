/* A static parallel loop over independent work items, each thread running under flush-to-zero. */
#ifndef FQ_PARALLEL_H
#define FQ_PARALLEL_H

#include <stddef.h>

typedef void (*fq_item_fn)(void *context, size_t item);

/* Runs body(context, i) for i in [0, items) on `threads` threads (OpenMP, static schedule), or in
   order on the calling thread when threads == 1 or OpenMP is absent. Results must not depend on
   which thread runs an item: items write disjoint outputs. */
void fq_parallel_for(int threads, size_t items, fq_item_fn body, void *context);

#endif
