/* Straight-line programs over float32 vectors (fq_f32_vector_program, see fqcore.h): the fold's
   per-channel arithmetic in one call instead of a numpy call per operation. The vectors are short
   (a layer's channels), so a plain loop per instruction is enough; what the program saves is the
   calls. Built with -ffp-contract=off: each operation rounds to float32 as numpy's does. */
#include <math.h>

#include "../include/fqcore.h"

static int takes_b(int opcode) { return opcode >= FQ_VP_ADD; }

/* The whole program is checked before any instruction runs, so a bad one writes nothing. */
static fq_status check(const int *code, size_t instructions, size_t num_sources,
                       size_t num_registers) {
    const size_t rows = num_sources + num_registers;
    for (size_t k = 0; k < instructions; ++k) {
        const int *in = code + 4 * k;
        if (in[0] < 0 || in[0] >= FQ_VP_OPCODES) return FQ_ERR_BAD_PROGRAM;
        if (in[1] < 0 || (size_t)in[1] < num_sources || (size_t)in[1] >= rows)
            return FQ_ERR_BAD_PROGRAM;
        if (in[2] < 0 || (size_t)in[2] >= rows) return FQ_ERR_BAD_PROGRAM;
        if (takes_b(in[0]) && (in[3] < 0 || (size_t)in[3] >= rows)) return FQ_ERR_BAD_PROGRAM;
    }
    return FQ_OK;
}

fq_status fq_f32_vector_program(const int *code, size_t instructions, const float *const *sources,
                                const unsigned char *broadcast, size_t num_sources,
                                float *registers, size_t num_registers, size_t n) {
    if (instructions > 0 && code == NULL) return FQ_ERR_NULL_POINTER;
    const fq_status status = check(code, instructions, num_sources, num_registers);
    if (status != FQ_OK || instructions == 0 || n == 0) return status;
    if ((num_sources > 0 && (sources == NULL || broadcast == NULL)) ||
        (num_registers > 0 && registers == NULL))
        return FQ_ERR_NULL_POINTER;
    for (size_t k = 0; k < num_sources; ++k)
        if (sources[k] == NULL) return FQ_ERR_NULL_POINTER;
    for (size_t k = 0; k < instructions; ++k) {
        const int *in = code + 4 * k;
        const size_t ra = (size_t)in[2], rb = takes_b(in[0]) ? (size_t)in[3] : ra;
        float *d = registers + ((size_t)in[1] - num_sources) * n;
        /* A source read as broadcast steps by 0: every position reads its one element. */
        const float *a = ra < num_sources ? sources[ra] : registers + (ra - num_sources) * n;
        const float *b = rb < num_sources ? sources[rb] : registers + (rb - num_sources) * n;
        const size_t sa = ra < num_sources && broadcast[ra] ? 0 : 1;
        const size_t sb = rb < num_sources && broadcast[rb] ? 0 : 1;
        switch ((fq_vp_opcode)in[0]) {
        case FQ_VP_COPY:
            for (size_t i = 0; i < n; ++i) d[i] = a[i * sa];
            break;
        case FQ_VP_NEGATE:
            for (size_t i = 0; i < n; ++i) d[i] = -a[i * sa];
            break;
        case FQ_VP_RECIPROCAL:
            for (size_t i = 0; i < n; ++i) d[i] = 1.0f / a[i * sa];
            break;
        case FQ_VP_RSQRT:
            for (size_t i = 0; i < n; ++i) d[i] = 1.0f / sqrtf(a[i * sa]);
            break;
        case FQ_VP_SQUARE:
            for (size_t i = 0; i < n; ++i) d[i] = a[i * sa] * a[i * sa];
            break;
        case FQ_VP_ADD:
            for (size_t i = 0; i < n; ++i) d[i] = a[i * sa] + b[i * sb];
            break;
        case FQ_VP_SUBTRACT:
            for (size_t i = 0; i < n; ++i) d[i] = a[i * sa] - b[i * sb];
            break;
        case FQ_VP_MULTIPLY:
            for (size_t i = 0; i < n; ++i) d[i] = a[i * sa] * b[i * sb];
            break;
        case FQ_VP_DIVIDE:
            for (size_t i = 0; i < n; ++i) d[i] = a[i * sa] / b[i * sb];
            break;
        case FQ_VP_OPCODES:
            break;
        }
    }
    return FQ_OK;
}
