#include "sy_dtype.h"

static const sy_dtype_traits dtype_table[SY_DTYPE_COUNT_] = {
    [SY_DTYPE_F32] = {"f32", 1, 4},
    [SY_DTYPE_F16] = {"f16", 1, 2},
    [SY_DTYPE_Q4_0] = {"q4_0", 32, 18},
    [SY_DTYPE_Q4_1] = {"q4_1", 32, 20},
    [SY_DTYPE_Q5_0] = {"q5_0", 32, 22},
    [SY_DTYPE_Q5_1] = {"q5_1", 32, 24},
    [SY_DTYPE_Q8_0] = {"q8_0", 32, 34},
    [SY_DTYPE_Q8_1] = {"q8_1", 32, 36},
    [SY_DTYPE_Q2_K] = {"q2_k", 256, 84},
    [SY_DTYPE_Q3_K] = {"q3_k", 256, 110},
    [SY_DTYPE_Q4_K] = {"q4_k", 256, 144},
    [SY_DTYPE_Q5_K] = {"q5_k", 256, 176},
    [SY_DTYPE_Q6_K] = {"q6_k", 256, 210},
    [SY_DTYPE_Q8_K] = {"q8_k", 256, 292},
    [SY_DTYPE_BF16] = {"bf16", 1, 2},
};

const sy_dtype_traits *sy_dtype_get(uint32_t id) {
    if (id >= SY_DTYPE_COUNT_ || dtype_table[id].name == NULL) return NULL;
    return &dtype_table[id];
}

size_t sy_dtype_row_bytes(uint32_t id, uint64_t n) {
    const sy_dtype_traits *t = sy_dtype_get(id);
    if (t == NULL || n % t->block_elems != 0) return 0;
    uint64_t blocks = n / t->block_elems;
    if (blocks > SIZE_MAX / t->block_bytes) return 0;
    return (size_t)(blocks * t->block_bytes);
}
