/* Library-internal view of the run-time state: the thread budget of one call (the active ISA is
   the public fq_get_isa()). */
#ifndef FQ_RUNTIME_H
#define FQ_RUNTIME_H

#include <stddef.h>

/* Threads for one call over `work` elements: 1 below the size where a parallel region pays off,
   never more than fq_get_num_threads() nor more than `max_items` independent work items. */
int fq_runtime_threads_for(size_t work, size_t max_items);

/* Parallel calls split their work into items of about this many elements: enough items for the
   threads to share the work however late a worker starts, each long enough to keep the hardware
   prefetchers streaming. */
#define FQ_ITEM_ELEMENTS ((size_t)32768)

#endif
