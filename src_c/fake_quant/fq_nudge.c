/* TF's Nudge: the quantization grid of one range (shared by every ISA; runs under flush-to-zero). */
#include <math.h>

#include "fq_kernels.h"

/* Kept out of line in its own file: the caller switches MXCSR/FPCR first, and the compiler must
   not move this arithmetic across that switch. */
void fq_nudge(float min, float max, int num_bits, int narrow_range, fq_grid *grid) {
    const float quant_min = fq_quant_min(narrow_range);
    const float quant_max = fq_quant_max(num_bits);
    const float scale = (max - min) / (quant_max - quant_min);
    const float inv_scale = (quant_max - quant_min) / (max - min);
    const float zero_point_from_min = quant_min - min / scale;
    float zero_point;
    if (zero_point_from_min != zero_point_from_min)
        zero_point = 0.0f; /* TF casts to uint16, which turns NaN into 0 (x86 and ARM alike) */
    else if (zero_point_from_min < quant_min)
        zero_point = quant_min;
    else if (zero_point_from_min > quant_max)
        zero_point = quant_max;
    else
        zero_point = roundf(zero_point_from_min); /* half away from zero, as std::round */
    grid->nudged_min = (quant_min - zero_point) * scale;
    grid->nudged_max = (quant_max - zero_point) * scale;
    grid->scale = scale;
    grid->inv_scale = inv_scale;
    /* -nudged_min * inv_scale + 0.5f, written so that no compiler choice can flip the sign of a
       NaN (the SIMD nudges compute exactly this; the values are the same either way). */
    grid->quant_zero = floorf(0.5f - grid->nudged_min * inv_scale);
}

int fq_range_is_ordered(float min, float max) { return min < max; }
