/* OpenMP-backed parallel loop; the serial path is the same loop without the region. */
#include "parallel.h"
#include "fpenv.h"

void fq_parallel_for(int threads, size_t items, fq_item_fn body, void *context) {
#ifdef _OPENMP
    if (threads > 1 && items > 1) {
        const long long count = (long long)items;
#pragma omp parallel num_threads(threads)
        {
            /* Worker threads start with the process's default MXCSR/FPCR. */
            const fq_fpenv saved = fq_fpenv_enter();
#pragma omp for schedule(static)
            for (long long i = 0; i < count; ++i) body(context, (size_t)i);
            fq_fpenv_leave(saved);
        }
        return;
    }
#else
    (void)threads;
#endif
    for (size_t i = 0; i < items; ++i) body(context, i);
}
