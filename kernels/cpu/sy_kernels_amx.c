/* The AMX tier: the AVX-512 tier, with the Q8_0 matrix products of 16 or more activation rows on AMX INT8 tiles.
 *
 * A tile product C[16 weight rows][16 tokens] += A[16][32 codes] * B[8][16 tokens x 4 codes] (tdpbssd, signed by
 * signed) gives each block's exact integer dot products for 256 row/token pairs at once. A is read straight from the
 * weights (a Q8_0 block's 32 codes, one row per weight row, the tile stride being the row's bytes), B from the
 * activations packed once per call. The f32 work after that is the AVX-512 kernel's, lane for lane: each pair keeps
 * 16 f32 accumulators (block j goes to lane j % 16, scaled by the weight's d times the activation's d and added by
 * FMA in block order) and sums them by the same tree at the end, so every result has the AVX-512 tier's bits. That
 * keeps the tiers batch-invariant together: rows and tokens left over from whole tiles, and calls of fewer than 16
 * tokens (decode), go to the AVX-512 kernels and agree bit for bit with what the tiles compute.
 *
 * Linux hands out the tile registers only to a process that asks (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA);
 * the tier is supported when CPUID reports AMX-TILE and AMX-INT8 and that request succeeds. */
#include "sy_kernels_internal.h"

#if SY_KERNELS_X86 && defined(__linux__)

#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define TILE_ROWS 16   /* weight rows per tile */
#define TILE_TOKENS 16 /* tokens per tile */

static const char *amx_unavailable;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void detect_amx(void) {
    unsigned eax, ebx, ecx, edx;
    if (!sy_cpu_tier_supported(SY_CPU_TIER_AVX512)) {
        amx_unavailable = "the AVX-512 tier it builds on is unsupported";
        return;
    }
    if (__get_cpuid_max(0, NULL) < 7) {
        amx_unavailable = "the CPU reports no AMX (no CPUID leaf 7)";
        return;
    }
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    if (!(edx & (1u << 24)) || !(edx & (1u << 25))) {
        amx_unavailable = "the CPU reports no AMX-TILE/AMX-INT8";
        return;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        amx_unavailable = "the kernel refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
        return;
    }
    amx_unavailable = NULL;
}

const char *sy_amx_unavailable_reason(void) {
    pthread_once(&amx_once, detect_amx);
    return amx_unavailable;
}

/* palette 1: tmm0 = A (16 x 32 bytes), tmm1 = B (8 x 64 bytes), tmm2 = C (16 x 64 bytes) */
typedef struct tile_config {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

AMX static void configure_tiles(void) {
    _Alignas(64) tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = TILE_ROWS;
    cfg.colsb[0] = SY_QX_BLOCK;
    cfg.rows[1] = SY_QX_BLOCK / 4;
    cfg.colsb[1] = TILE_TOKENS * 4;
    cfg.rows[2] = TILE_ROWS;
    cfg.colsb[2] = TILE_TOKENS * 4;
    _tile_loadconfig(&cfg);
}

/* Tokens b0 .. b0 + 15 as B tiles, one of 512 bytes per block (B[kk][4 n + i] = code 4 kk + i of token n), and their
 * block scales, 16 per block. */
static void pack_tokens(const void *QX, size_t k, size_t b0, int8_t *packed, float *dx) {
    size_t n_blocks = k / SY_QX_BLOCK;
    for (int n = 0; n < TILE_TOKENS; n++) {
        sy_qx_row row = sy_qx_row_at(QX, k, b0 + (size_t)n);
        for (size_t j = 0; j < n_blocks; j++) {
            const int8_t *q = row.q + j * SY_QX_BLOCK;
            int8_t *to = packed + j * 512 + 4 * n;
            for (int kk = 0; kk < SY_QX_BLOCK / 4; kk++) memcpy(to + 64 * kk, q + 4 * kk, 4);
            dx[j * TILE_TOKENS + (size_t)n] = row.d[j];
        }
    }
}

/* Rows r0 .. r0 + 15 against the packed tokens; out[n * ldy + m] for token n, row r0 + m. acc: 16 lanes x 16 rows x
 * 16 tokens of f32 scratch. */
AMX static void q8_0_tile(const uint8_t *W, size_t row_bytes, size_t r0, size_t n_blocks, const int8_t *packed,
                          const float *dx, float *acc, float *out, size_t ldy) {
    memset(acc, 0, sizeof(float) * 16 * TILE_ROWS * TILE_TOKENS);
    const uint8_t *rows = W + r0 * row_bytes;
    _Alignas(64) int32_t c[TILE_ROWS][TILE_TOKENS];
    for (size_t j = 0; j < n_blocks; j++) {
        const uint8_t *blk = rows + j * 34;
        _tile_loadd(0, blk + 2, (long)row_bytes);
        _tile_loadd(1, packed + j * 512, 64);
        _tile_zero(2);
        _tile_dpbssd(2, 0, 1);
        _tile_stored(2, c, 64);
        const __m512 dxv = _mm512_loadu_ps(dx + j * TILE_TOKENS);
        float *lane = acc + (j % 16) * TILE_ROWS * TILE_TOKENS;
        for (int m = 0; m < TILE_ROWS; m++) {
            uint16_t h;
            memcpy(&h, blk + (size_t)m * row_bytes, 2);
            const __m512 dw = _mm512_set1_ps(_cvtsh_ss(h));
            __m512 a = _mm512_loadu_ps(lane + m * TILE_TOKENS);
            a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[m])), _mm512_mul_ps(dw, dxv), a);
            _mm512_storeu_ps(lane + m * TILE_TOKENS, a);
        }
    }
    /* the AVX-512 kernel's horizontal sum per pair: lane j + j + 8, then + 4, + 2, + 1 */
    for (int m = 0; m < TILE_ROWS; m++) {
        __m512 s[8];
#define LANE(l) _mm512_loadu_ps(acc + (l) * TILE_ROWS * TILE_TOKENS + m * TILE_TOKENS)
        for (int l = 0; l < 8; l++) s[l] = _mm512_add_ps(LANE(l), LANE(l + 8));
#undef LANE
        for (int l = 0; l < 4; l++) s[l] = _mm512_add_ps(s[l], s[l + 4]);
        for (int l = 0; l < 2; l++) s[l] = _mm512_add_ps(s[l], s[l + 2]);
        _Alignas(64) float r[TILE_TOKENS];
        _mm512_store_ps(r, _mm512_add_ps(s[0], s[1]));
        for (int n = 0; n < TILE_TOKENS; n++) out[(size_t)n * ldy + (size_t)m] = r[n];
    }
}

AMX static int matmul_qx_amx(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                         size_t k, const void *QX, size_t n_batch, float *Y, size_t ldy) {
    const sy_kernels *base = &sy_kernels_avx512_table;
    size_t n_rows = row_end - row_begin;
    if (wtype != SY_DTYPE_Q8_0 || n_batch < TILE_TOKENS || row_end < row_begin || n_rows < TILE_ROWS || k == 0 ||
        sy_matmul_qx_check(wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy) != NULL ||
        row_bytes > (size_t)LONG_MAX)
        return base->matmul_qx(wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy);
    size_t n_blocks = k / SY_QX_BLOCK;
    int8_t *packed = aligned_alloc(64, (n_blocks * 512 + 63) / 64 * 64);
    float *dx = malloc(n_blocks * TILE_TOKENS * sizeof(float));
    float *acc = aligned_alloc(64, sizeof(float) * 16 * TILE_ROWS * TILE_TOKENS);
    if (packed == NULL || dx == NULL || acc == NULL) {
        free(packed);
        free(dx);
        free(acc);
        return SY_KERNEL_ENOMEM;
    }
    size_t whole_rows = n_rows / TILE_ROWS * TILE_ROWS, whole_tokens = n_batch / TILE_TOKENS * TILE_TOKENS;
    configure_tiles();
    for (size_t b0 = 0; b0 < whole_tokens; b0 += TILE_TOKENS) {
        pack_tokens(QX, k, b0, packed, dx);
        for (size_t r0 = row_begin; r0 < row_begin + whole_rows; r0 += TILE_ROWS)
            q8_0_tile((const uint8_t *)W, row_bytes, r0, n_blocks, packed, dx, acc, Y + b0 * ldy + r0, ldy);
    }
    _tile_release();
    free(packed);
    free(dx);
    free(acc);
    /* what the tiles left: the last rows for the whole tiles' tokens, and the last tokens for every row; the
     * AVX-512 kernels give the same bits (see above) */
    size_t qx_row = sy_quantize_x_bytes(k, 1);
    int rc = SY_KERNEL_OK;
    if (whole_rows < n_rows)
        rc = base->matmul_qx(wtype, W, row_bytes, row_begin + whole_rows, row_end, k, QX, whole_tokens, Y, ldy);
    if (rc == SY_KERNEL_OK && whole_tokens < n_batch)
        rc = base->matmul_qx(wtype, W, row_bytes, row_begin, row_end, k, (const uint8_t *)QX + whole_tokens * qx_row,
                             n_batch - whole_tokens, Y + whole_tokens * ldy, ldy);
    return rc;
}

static int matmul_amx(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end, size_t k,
                      const float *X, size_t n_batch, size_t ldx, float *Y, size_t ldy) {
    if (wtype != SY_DTYPE_Q8_0)
        return sy_kernels_avx512_table.matmul(wtype, W, row_bytes, row_begin, row_end, k, X, n_batch, ldx, Y, ldy);
    if (sy_matmul_check(wtype, W, row_bytes, row_begin, row_end, k, X, n_batch, ldx, Y, ldy) != NULL)
        return SY_KERNEL_EINVAL;
    return sy_matmul_quantized_via_qx(&sy_kernels_amx_table, wtype, W, row_bytes, row_begin, row_end, k, X, n_batch,
                                      ldx, Y, ldy);
}

static float dot_f32_amx(const float *a, const float *b, size_t n) { return sy_kernels_avx512_table.dot_f32(a, b, n); }
static void axpy_f32_amx(float *y, float alpha, const float *x, size_t n) {
    sy_kernels_avx512_table.axpy_f32(y, alpha, x, n);
}
static void exp_f32_amx(const float *x, float *y, size_t n) { sy_kernels_avx512_table.exp_f32(x, y, n); }
static void gelu_f32_amx(const float *x, float *y, size_t n) { sy_kernels_avx512_table.gelu_f32(x, y, n); }
static void attend_f32_amx(const float *q, const float *K, const float *V, size_t stride, size_t n, size_t hd,
                           float scale, float *max, float *sum, float *out) {
    sy_kernels_avx512_table.attend_f32(q, K, V, stride, n, hd, scale, max, sum, out);
}

/* The KV cache conversions have no tile work: the AVX-512 tier's. */
static void f16_to_f32_amx(const uint16_t *src, float *dst, size_t n) { sy_kernels_avx512_table.f16_to_f32(src, dst, n); }
static void f32_to_f16_amx(const float *src, uint16_t *dst, size_t n) { sy_kernels_avx512_table.f32_to_f16(src, dst, n); }
static void q8_0_to_f32_amx(const void *blocks, float *dst, size_t n_blocks) {
    sy_kernels_avx512_table.q8_0_to_f32(blocks, dst, n_blocks);
}

const sy_kernels sy_kernels_amx_table = {
    .tier = SY_CPU_TIER_AMX,
    .name = "amx",
    .dot_f32 = dot_f32_amx,
    .axpy_f32 = axpy_f32_amx,
    .matmul = matmul_amx,
    .matmul_qx = matmul_qx_amx,
    .exp_f32 = exp_f32_amx,
    .gelu_f32 = gelu_f32_amx,
    .attend_f32 = attend_f32_amx,
    .f16_to_f32 = f16_to_f32_amx,
    .f32_to_f16 = f32_to_f16_amx,
    .q8_0_to_f32 = q8_0_to_f32_amx,
};

#else

const char *sy_amx_unavailable_reason(void) { return "this build has no AMX tier (x86-64 Linux only)"; }

#endif
