/* The CPUs this process may use and the load other processes put on them (cpu_budget.c; the
   public fq_usable_cpus, fq_other_cpu_load and fq_free_cpus are declared in fqcore.h). */
#ifndef FQ_CPU_BUDGET_H
#define FQ_CPU_BUDGET_H

#include <stdint.h>

#include "../include/fqcore.h"

/* One reading: clock, busy clock ticks of the CPUs, this process's CPU time. */
typedef struct {
    int64_t wall_ns;
    long long busy_ticks;
    int64_t own_cpu_ns;
} fq_cpu_sample;

/* Other processes' busy cores between two readings, within [0, cpus]. */
double fq_cpu_other_load_from(const fq_cpu_sample *previous, const fq_cpu_sample *now, int cpus,
                              long ticks_per_second);

/* fq_free_cpus from the figures: `usable` CPUs (after any quota) of `cpus` in the mask,
   `other_load` cores of those busy elsewhere. */
int fq_free_cpus_for(int usable, int cpus, double other_load);

#endif
