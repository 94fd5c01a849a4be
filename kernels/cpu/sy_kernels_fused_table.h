/* The per-type, per-tile-width entry points of a fused kernel tier, included at the end of
 * sy_kernels_fused_<tier>.c, after its row kernels row_blocks32 and row_kquant. The includer defines
 * SY_FUSED_TARGET (the tier's function attribute), SY_FUSED_TABLE_FN (the name of its table function, declared in
 * sy_kernels_internal.h), and SY_FUSED_TILE, the tile of its kernels (4 or 8 tokens). */
#if !defined(SY_FUSED_TARGET) || !defined(SY_FUSED_TILE)
#error "define SY_FUSED_TARGET, SY_FUSED_TABLE_FN and SY_FUSED_TILE before including sy_kernels_fused_table.h"
#endif

/* Every row of a range; the row loop sits here so that the kernel's set-up is hoisted out of it. */
#define ROWS(nb, call)                                                                                                 \
    for (size_t r = row_begin; r < row_end; r++) {                                                                     \
        const uint8_t *w = W + r * row_bytes;                                                                          \
        float out[nb];                                                                                                 \
        call(nb);                                                                                                      \
        for (int t = 0; t < nb; t++) Y[(size_t)t * ldy + r] = out[t];                                                  \
    }

#define ROWS_PARAMS                                                                                                    \
    const uint8_t *W, size_t row_bytes, size_t row_begin, size_t row_end, size_t n, const sy_qx_row *x, float *Y,      \
        size_t ldy

#define ROW_FUNCS4(name, call)                                                                                         \
    SY_FUSED_TARGET static void name##_1(ROWS_PARAMS) { ROWS(1, call) }                                                \
    SY_FUSED_TARGET static void name##_2(ROWS_PARAMS) { ROWS(2, call) }                                                \
    SY_FUSED_TARGET static void name##_3(ROWS_PARAMS) { ROWS(3, call) }                                                \
    SY_FUSED_TARGET static void name##_4(ROWS_PARAMS) { ROWS(4, call) }

#if SY_FUSED_TILE == 8
#define ROW_FUNCS(name, call)                                                                                        \
    ROW_FUNCS4(name, call)                                                                                             \
    SY_FUSED_TARGET static void name##_5(ROWS_PARAMS) { ROWS(5, call) }                                                \
    SY_FUSED_TARGET static void name##_6(ROWS_PARAMS) { ROWS(6, call) }                                                \
    SY_FUSED_TARGET static void name##_7(ROWS_PARAMS) { ROWS(7, call) }                                                \
    SY_FUSED_TARGET static void name##_8(ROWS_PARAMS) { ROWS(8, call) }
#elif SY_FUSED_TILE == 4
#define ROW_FUNCS ROW_FUNCS4
#else
#error "SY_FUSED_TILE must be 4 or 8"
#endif

#define CALL_Q4_0(nb) row_blocks32(SY_DTYPE_Q4_0, w, n, x, nb, out)
#define CALL_Q4_1(nb) row_blocks32(SY_DTYPE_Q4_1, w, n, x, nb, out)
#define CALL_Q5_0(nb) row_blocks32(SY_DTYPE_Q5_0, w, n, x, nb, out)
#define CALL_Q5_1(nb) row_blocks32(SY_DTYPE_Q5_1, w, n, x, nb, out)
#define CALL_Q8_0(nb) row_blocks32(SY_DTYPE_Q8_0, w, n, x, nb, out)
#define CALL_Q2_K(nb) row_kquant(SY_DTYPE_Q2_K, w, n, x, nb, out)
#define CALL_Q3_K(nb) row_kquant(SY_DTYPE_Q3_K, w, n, x, nb, out)
#define CALL_Q4_K(nb) row_kquant(SY_DTYPE_Q4_K, w, n, x, nb, out)
#define CALL_Q5_K(nb) row_kquant(SY_DTYPE_Q5_K, w, n, x, nb, out)
#define CALL_Q6_K(nb) row_kquant(SY_DTYPE_Q6_K, w, n, x, nb, out)

ROW_FUNCS(q4_0, CALL_Q4_0)
ROW_FUNCS(q4_1, CALL_Q4_1)
ROW_FUNCS(q5_0, CALL_Q5_0)
ROW_FUNCS(q5_1, CALL_Q5_1)
ROW_FUNCS(q8_0, CALL_Q8_0)
ROW_FUNCS(q2_k, CALL_Q2_K)
ROW_FUNCS(q3_k, CALL_Q3_K)
ROW_FUNCS(q4_k, CALL_Q4_K)
ROW_FUNCS(q5_k, CALL_Q5_K)
ROW_FUNCS(q6_k, CALL_Q6_K)

#define SET_FUNCS4(name)                                                                                               \
    do {                                                                                                               \
        out[0] = name##_1;                                                                                             \
        out[1] = name##_2;                                                                                             \
        out[2] = name##_3;                                                                                             \
        out[3] = name##_4;                                                                                             \
    } while (0)

#if SY_FUSED_TILE == 8
#define SET_FUNCS(name)                                                                                              \
    do {                                                                                                               \
        SET_FUNCS4(name);                                                                                              \
        out[4] = name##_5;                                                                                             \
        out[5] = name##_6;                                                                                             \
        out[6] = name##_7;                                                                                             \
        out[7] = name##_8;                                                                                             \
    } while (0)
#else
#define SET_FUNCS SET_FUNCS4
#endif

int SY_FUSED_TABLE_FN(sy_dtype wtype, sy_fused_rows_fn out[SY_FUSED_TILE_MAX]) {
    switch (wtype) {
    case SY_DTYPE_Q4_0: SET_FUNCS(q4_0); return SY_FUSED_TILE;
    case SY_DTYPE_Q4_1: SET_FUNCS(q4_1); return SY_FUSED_TILE;
    case SY_DTYPE_Q5_0: SET_FUNCS(q5_0); return SY_FUSED_TILE;
    case SY_DTYPE_Q5_1: SET_FUNCS(q5_1); return SY_FUSED_TILE;
    case SY_DTYPE_Q8_0: SET_FUNCS(q8_0); return SY_FUSED_TILE;
    case SY_DTYPE_Q2_K: SET_FUNCS(q2_k); return SY_FUSED_TILE;
    case SY_DTYPE_Q3_K: SET_FUNCS(q3_k); return SY_FUSED_TILE;
    case SY_DTYPE_Q4_K: SET_FUNCS(q4_k); return SY_FUSED_TILE;
    case SY_DTYPE_Q5_K: SET_FUNCS(q5_k); return SY_FUSED_TILE;
    case SY_DTYPE_Q6_K: SET_FUNCS(q6_k); return SY_FUSED_TILE;
    default: return 0;
    }
}

#undef SET_FUNCS
#undef SET_FUNCS4
#undef ROW_FUNCS
#undef ROW_FUNCS4
#undef ROWS_PARAMS
#undef ROWS
