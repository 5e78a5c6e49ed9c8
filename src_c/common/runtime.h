/* Library-internal view of the run-time state: the active ISA and the thread budget. */
#ifndef FQ_RUNTIME_H
#define FQ_RUNTIME_H

#include <stddef.h>
#include "../include/fqcore.h"

/* The ISA every kernel family dispatches on; resolved once (environment, CPU) on first use. */
fq_isa fq_runtime_isa(void);

/* Threads for one call over `work` elements: 1 below the size where a parallel region pays off,
   never more than fq_get_num_threads() nor more than `max_items` independent work items. */
int fq_runtime_threads_for(size_t work, size_t max_items);

#endif
