/* Tier detection and dispatch, argument checks, conversions, activation quantization, transformer helpers. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sy_kernels_internal.h"

/* ---- tiers ---- */

static const char *const tier_names[SY_CPU_TIER_COUNT_] = {"scalar", "avx2", "avx512", "amx"};

const char *sy_cpu_tier_name(sy_cpu_tier tier) {
    if ((unsigned)tier >= SY_CPU_TIER_COUNT_) return "unknown";
    return tier_names[tier];
}

bool sy_cpu_tier_from_name(const char *name, sy_cpu_tier *out) {
    if (name == NULL) return false;
    for (int t = 0; t < SY_CPU_TIER_COUNT_; t++) {
        if (strcmp(name, tier_names[t]) == 0) {
            if (out != NULL) *out = (sy_cpu_tier)t;
            return true;
        }
    }
    return false;
}

#if SY_KERNELS_X86
#include <cpuid.h>

/* F16C by cpuid (leaf 1, ECX bit 29): not every compiler's __builtin_cpu_supports knows it. Only asked after
 * AVX2 was confirmed, which includes the OS saving the AVX registers. */
static bool cpu_has_f16c(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    return (ecx & (1u << 29)) != 0;
}
#endif

bool sy_cpu_tier_supported(sy_cpu_tier tier) {
    switch (tier) {
    case SY_CPU_TIER_SCALAR:
        return true;
#if SY_KERNELS_X86
    case SY_CPU_TIER_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case SY_CPU_TIER_AVX512:
        /* The AVX-512 tier also uses the AVX2 tier's code paths (F16C included) for tails. */
        return sy_cpu_tier_supported(SY_CPU_TIER_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni");
    case SY_CPU_TIER_AMX:
        return sy_amx_unavailable_reason() == NULL;
#endif
    default:
        return false;
    }
}

const char *sy_cpu_tier_unavailable_reason(sy_cpu_tier tier) {
    if (sy_cpu_tier_supported(tier)) return NULL;
    if (tier == SY_CPU_TIER_AMX) return sy_amx_unavailable_reason();
    if ((unsigned)tier >= SY_CPU_TIER_COUNT_) return "no such tier";
#if SY_KERNELS_X86
    return "the CPU lacks the instructions";
#else
    return "this build has x86 tiers only on x86";
#endif
}

sy_cpu_tier sy_cpu_tier_supported_best(void) {
    for (int t = SY_CPU_TIER_COUNT_ - 1; t > 0; t--) {
        if (sy_cpu_tier_supported((sy_cpu_tier)t)) return (sy_cpu_tier)t;
    }
    return SY_CPU_TIER_SCALAR;
}

const sy_kernels *sy_kernels_for_tier(sy_cpu_tier tier) {
    if (!sy_cpu_tier_supported(tier)) return NULL;
    switch (tier) {
    case SY_CPU_TIER_SCALAR:
        return &sy_kernels_scalar_table;
#if SY_KERNELS_X86
    case SY_CPU_TIER_AVX2:
        return &sy_kernels_avx2_table;
    case SY_CPU_TIER_AVX512:
        return &sy_kernels_avx512_table;
    case SY_CPU_TIER_AMX:
        return &sy_kernels_amx_table;
#endif
    default:
        return NULL;
    }
}

static const sy_kernels *active_kernels;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void choose_active_kernels(void) {
    sy_cpu_tier best = sy_cpu_tier_supported_best();
    sy_cpu_tier chosen = best;
    const char *forced = getenv("SY_CPU_TIER");
    if (forced != NULL && forced[0] != '\0') {
        sy_cpu_tier wanted;
        if (!sy_cpu_tier_from_name(forced, &wanted)) {
            fprintf(stderr, "switchyard: SY_CPU_TIER=%s is not a CPU tier (scalar, avx2, avx512, amx); using %s\n",
                    forced, sy_cpu_tier_name(best));
        } else if (wanted == SY_CPU_TIER_AMX && !sy_cpu_tier_supported(wanted)) {
            fprintf(stderr, "switchyard: SY_CPU_TIER=amx, but AMX is unavailable: %s\n",
                    sy_cpu_tier_unavailable_reason(wanted));
            exit(2);
        } else if (!sy_cpu_tier_supported(wanted)) {
            fprintf(stderr, "switchyard: SY_CPU_TIER=%s is not supported by this CPU; using %s\n", forced,
                    sy_cpu_tier_name(best));
        } else {
            chosen = wanted;
        }
    }
    active_kernels = sy_kernels_for_tier(chosen);
}

const sy_kernels *sy_kernels_active(void) {
    pthread_once(&active_once, choose_active_kernels);
    return active_kernels;
}

char *sy_kernels_describe(const sy_kernels *tier, char *out, size_t size) {
    if (out == NULL || size == 0) return out;
    if (tier == NULL) {
        snprintf(out, size, "none");
        return out;
    }
    const char *bf16 = tier->tier >= SY_CPU_TIER_AVX512 ? "f32 fma, even/odd"
                       : tier->tier == SY_CPU_TIER_AVX2  ? "f32 fma"
                                                         : "f32";
    const char *q8 = tier->tier == SY_CPU_TIER_AMX      ? "amx int8 tiles (16+ tokens), vnni"
                     : tier->tier == SY_CPU_TIER_AVX512 ? "vnni"
                     : tier->tier == SY_CPU_TIER_AVX2   ? "avx2"
                                                        : "scalar";
    if (tier->tier == SY_CPU_TIER_AMX) {
        snprintf(out, size, "%s (bf16: %s; q8_0: %s)", tier->name, bf16, q8);
        return out;
    }
    const char *why = sy_cpu_tier_unavailable_reason(SY_CPU_TIER_AMX);
    snprintf(out, size, "%s (bf16: %s; q8_0: %s; amx %s%s)", tier->name, bf16, q8,
             why != NULL ? "unavailable: " : "not used: SY_CPU_TIER forced a lower tier", why != NULL ? why : "");
    return out;
}

/* ---- argument checks ---- */

bool sy_matmul_supports(sy_dtype wtype) {
    switch (wtype) {
    case SY_DTYPE_F32:
    case SY_DTYPE_F16:
    case SY_DTYPE_BF16:
    case SY_DTYPE_Q8_0:
    case SY_DTYPE_Q4_0:
    case SY_DTYPE_Q4_1:
    case SY_DTYPE_Q5_0:
    case SY_DTYPE_Q5_1:
    case SY_DTYPE_Q2_K:
    case SY_DTYPE_Q3_K:
    case SY_DTYPE_Q4_K:
    case SY_DTYPE_Q5_K:
    case SY_DTYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

bool sy_matmul_wants_quantized_x(sy_dtype wtype) {
    return sy_matmul_supports(wtype) && wtype != SY_DTYPE_F32 && wtype != SY_DTYPE_F16 && wtype != SY_DTYPE_BF16;
}

/* Checks shared by matmul and matmul_qx: the weight type, row size and the Y layout. */
static const char *check_weights_and_output(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin,
                                            size_t row_end, size_t k, size_t n_batch, const float *Y,
                                            size_t ldy) {
    if (!sy_matmul_supports(wtype)) return "matmul: unsupported weight type";
    if (row_begin > row_end) return "matmul: row_begin is past row_end";
    const sy_dtype_traits *traits = sy_dtype_get(wtype);
    if (k % traits->block_elems != 0) return "matmul: k is not a multiple of the weight type's block size";
    size_t packed = sy_dtype_row_bytes(wtype, k);
    if (packed == 0 && k != 0) return "matmul: k is too large for the weight type";
    if (row_bytes < packed) return "matmul: row_bytes is smaller than k elements of the weight type";
    if (row_end != 0 && row_bytes != 0 && row_end - 1 > (SIZE_MAX - packed) / row_bytes)
        return "matmul: row_end * row_bytes overflows";
    if (W == NULL && row_end > row_begin && k > 0) return "matmul: W is NULL";
    if (n_batch == 0 || row_end == row_begin) return NULL;
    if (Y == NULL) return "matmul: Y is NULL";
    if (n_batch > 1 && ldy < row_end) return "matmul: ldy is smaller than row_end";
    if (ldy != 0 && n_batch - 1 > (SIZE_MAX / sizeof(float) - row_end) / ldy) return "matmul: Y extent overflows";
    return NULL;
}

const char *sy_matmul_check(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                            size_t k, const void *X, size_t n_batch, size_t ldx, const float *Y, size_t ldy) {
    const char *err = check_weights_and_output(wtype, W, row_bytes, row_begin, row_end, k, n_batch, Y, ldy);
    if (err != NULL) return err;
    if (n_batch == 0 || row_end == row_begin || k == 0) return NULL;
    if (X == NULL) return "matmul: X is NULL";
    if (n_batch > 1 && ldx < k) return "matmul: ldx is smaller than k";
    if (ldx != 0 && n_batch - 1 > (SIZE_MAX / sizeof(float) - k) / ldx) return "matmul: X extent overflows";
    if (sy_matmul_wants_quantized_x(wtype) && sy_quantize_x_bytes(k, n_batch) == 0)
        return "matmul: quantized activations would overflow";
    return NULL;
}

const char *sy_matmul_qx_check(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                               size_t k, const void *QX, size_t n_batch, const float *Y, size_t ldy) {
    if (!sy_matmul_wants_quantized_x(wtype)) return "matmul_qx: the weight type does not take quantized activations";
    const char *err = check_weights_and_output(wtype, W, row_bytes, row_begin, row_end, k, n_batch, Y, ldy);
    if (err != NULL) return err;
    if (n_batch == 0 || row_end == row_begin || k == 0) return NULL;
    if (QX == NULL) return "matmul_qx: QX is NULL";
    if (((uintptr_t)QX & 3) != 0) return "matmul_qx: QX is not 4-byte aligned";
    if (sy_quantize_x_bytes(k, n_batch) == 0) return "matmul_qx: quantized activations would overflow";
    return NULL;
}

/* ---- quantized activations ---- */

size_t sy_quantize_x_bytes(size_t k, size_t n_batch) {
    if (k % SY_QX_BLOCK != 0) return 0;
    if (k > SIZE_MAX / 4) return 0;
    size_t row = sy_qx_row_bytes(k);
    if (n_batch != 0 && row > SIZE_MAX / n_batch) return 0;
    return row * n_batch;
}

void sy_quantize_row_scalar(const float *x, size_t k, int8_t *q, float *d, float *s16) {
    for (size_t blk = 0; blk < k / SY_QX_BLOCK; blk++) {
        const float *xb = x + blk * SY_QX_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < SY_QX_BLOCK; i++) {
            float v = fabsf(xb[i]);
            /* A NaN never compares greater, so it cannot poison the scale; it quantizes to 0 below. */
            if (v > amax) amax = v;
        }
        if (!isfinite(amax)) amax = 3.4028234663852886e38f; /* infinities saturate instead of all-NaN */
        float scale = amax / 127.0f;
        float inv = scale > 0.0f ? 127.0f / amax : 0.0f;
        int sums[2] = {0, 0};
        for (int i = 0; i < SY_QX_BLOCK; i++) {
            float v = xb[i] * inv;
            int qi = 0;
            if (v == v) {
                /* round half to even without a libm call: for |v| <= 127, adding and subtracting 1.5 * 2^23 leaves
                 * exactly the rounded integer (as lrintf in the default rounding mode, checked for every float) */
                float clamped = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
                qi = (int)((clamped + 12582912.0f) - 12582912.0f);
            }
            q[blk * SY_QX_BLOCK + (size_t)i] = (int8_t)qi;
            sums[i / SY_QX_GROUP] += qi;
        }
        d[blk] = scale;
        s16[2 * blk] = scale * (float)sums[0];
        s16[2 * blk + 1] = scale * (float)sums[1];
    }
}

/* The qi and nsum parts of a quantized row, from its q (see sy_qx_row). */
static void interleave_row(sy_qx_row row, size_t k) {
    size_t n_blocks = k / SY_QX_BLOCK, groups = sy_qx_igroups(k);
    int8_t *qi = (int8_t *)(uintptr_t)row.qi;
    int32_t *nsum = (int32_t *)(uintptr_t)row.nsum;
    size_t used = n_blocks - (groups - 1) * SY_QX_IGROUP_BLOCKS; /* blocks in the last group */
    if (used < SY_QX_IGROUP_BLOCKS) {
        memset(qi + (groups - 1) * SY_QX_IGROUP_BLOCKS * SY_QX_BLOCK, 0, SY_QX_IGROUP_BLOCKS * SY_QX_BLOCK);
        memset(nsum + n_blocks, 0, (SY_QX_IGROUP_BLOCKS - used) * sizeof *nsum);
    }
    for (size_t blk = 0; blk < n_blocks; blk++) {
        const int8_t *q = row.q + blk * SY_QX_BLOCK;
        int8_t *to = qi + (blk / SY_QX_IGROUP_BLOCKS) * SY_QX_IGROUP_BLOCKS * SY_QX_BLOCK +
                     (blk % SY_QX_IGROUP_BLOCKS) * 4;
        int32_t sum = 0;
        for (size_t c = 0; c < SY_QX_BLOCK / 4; c++) memcpy(to + c * SY_QX_IGROUP_BLOCKS * 4, q + 4 * c, 4);
        for (size_t i = 0; i < SY_QX_BLOCK; i++) sum += q[i];
        nsum[blk] = -sum;
    }
}

int sy_quantize_x(const float *X, size_t n_batch, size_t ldx, size_t k, void *QX) {
    if (k % SY_QX_BLOCK != 0 || (sy_quantize_x_bytes(k, n_batch) == 0 && n_batch != 0)) return SY_KERNEL_EINVAL;
    if (n_batch == 0 || k == 0) return SY_KERNEL_OK;
    if (X == NULL || QX == NULL || ((uintptr_t)QX & 3) != 0) return SY_KERNEL_EINVAL;
    if (n_batch > 1 && ldx < k) return SY_KERNEL_EINVAL;
    if (ldx != 0 && n_batch - 1 > (SIZE_MAX / sizeof(float) - k) / ldx) return SY_KERNEL_EINVAL;
    /* the SIMD version gives the same bytes (the same IEEE operations), so the choice only changes the speed */
    void (*quantize_row)(const float *, size_t, int8_t *, float *, float *) = sy_quantize_row_scalar;
#if SY_KERNELS_X86
    if (sy_kernels_active()->tier >= SY_CPU_TIER_AVX2) quantize_row = sy_quantize_row_avx2;
#endif
    for (size_t b = 0; b < n_batch; b++) {
        sy_qx_row row = sy_qx_row_at(QX, k, b);
        quantize_row(X + b * ldx, k, (int8_t *)(uintptr_t)row.q, (float *)(uintptr_t)row.d,
                     (float *)(uintptr_t)row.s16);
        interleave_row(row, k);
    }
    return SY_KERNEL_OK;
}

int sy_matmul_quantized_via_qx(const sy_kernels *tier, sy_dtype wtype, const void *W, size_t row_bytes,
                               size_t row_begin, size_t row_end, size_t k, const float *X, size_t n_batch,
                               size_t ldx, float *Y, size_t ldy) {
    if (n_batch == 0 || row_end == row_begin) return SY_KERNEL_OK;
    if (k == 0) return tier->matmul_qx(wtype, W, row_bytes, row_begin, row_end, k, NULL, n_batch, Y, ldy);
    size_t bytes = sy_quantize_x_bytes(k, n_batch);
    void *qx = malloc(bytes);
    if (qx == NULL) return SY_KERNEL_ENOMEM;
    int rc = sy_quantize_x(X, n_batch, ldx, k, qx);
    if (rc == SY_KERNEL_OK) rc = tier->matmul_qx(wtype, W, row_bytes, row_begin, row_end, k, qx, n_batch, Y, ldy);
    free(qx);
    return rc;
}

void sy_matmul_qx_fused_driver(sy_fused_rows_fn const fns[SY_FUSED_TILE_MAX], int tile, sy_dtype wtype, const void *W,
                               size_t row_bytes, size_t row_begin, size_t row_end, size_t k, const void *QX,
                               size_t n_batch, float *Y, size_t ldy) {
    if (k == 0) {
        for (size_t r = row_begin; r < row_end; r++)
            for (size_t b = 0; b < n_batch; b++) Y[b * ldy + r] = 0.0f;
        return;
    }
    size_t n_blocks = k / sy_dtype_get(wtype)->block_elems;
    /* a few rows at a time meet every group of the batch while they are in L1 */
    const size_t rows_per_pass = n_batch <= (size_t)tile ? row_end - row_begin : 16;
    for (size_t r0 = row_begin; r0 < row_end; r0 += rows_per_pass) {
        size_t r1 = row_end - r0 < rows_per_pass ? row_end : r0 + rows_per_pass;
        for (size_t b0 = 0; b0 < n_batch; b0 += (size_t)tile) {
            size_t nb = n_batch - b0 < (size_t)tile ? n_batch - b0 : (size_t)tile;
            sy_qx_row x[SY_FUSED_TILE_MAX];
            for (size_t t = 0; t < nb; t++) x[t] = sy_qx_row_at(QX, k, b0 + t);
            fns[nb - 1]((const uint8_t *)W, row_bytes, r0, r1, n_blocks, x, Y + b0 * ldy, ldy);
        }
    }
}

/* ---- conversions ---- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

const uint64_t sy_expf_table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

float sy_expf(float x) {
    if (isnan(x)) return x + x;
    if (x < SY_EXPF_UNDER) return 0.0f; /* -inf too */
    if (x > SY_EXPF_OVER) return INFINITY;
    double xd = x, z = SY_EXPF_INVLN2_32 * xd;
    double kd = z + SY_EXPF_SHIFT; /* k = z rounded to the nearest integer, in kd's low bits */
    uint64_t ki;
    memcpy(&ki, &kd, sizeof ki);
    kd -= SY_EXPF_SHIFT;
    double r = fma(SY_EXPF_INVLN2_32, xd, -kd); /* glibc's build fuses z - kd: 2 of the 2^32 inputs need it */
    uint64_t t = sy_expf_table[ki % 32] + (ki << 47);
    double scale;
    memcpy(&scale, &t, sizeof scale);
    double p = fma(SY_EXPF_C0, r, SY_EXPF_C1), r2 = r * r, y = fma(SY_EXPF_C2, r, 1.0);
    y = fma(p, r2, y);
    return (float)(y * scale);
}

float sy_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0) {
        /* zero or subnormal: mantissa * 2^-24, exact in f32 */
        float v = (float)mantissa * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exponent == 31) return bits_f32(sign | 0x7f800000u | (mantissa << 13));
    return bits_f32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t sy_f32_to_f16(float f) {
    uint32_t bits = f32_bits(f);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs_bits >> 13) & 0x1ffu)); /* NaN */
    if (abs_bits >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
    if (abs_bits < 0x38800000u) {
        /* below the smallest normal f16 (2^-14): a subnormal in units of 2^-24 */
        uint32_t exponent = abs_bits >> 23;
        if (exponent < 102) return sign; /* below 2^-25: rounds to zero (2^-25 itself ties to even zero) */
        uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exponent; /* 14..24 */
        uint32_t q = mantissa >> shift;
        uint32_t rem = mantissa & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t rounded = abs_bits - 0x38000000u + 0xfffu + ((abs_bits >> 13) & 1u);
    return (uint16_t)(sign | (rounded >> 13));
}

float sy_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t sy_f32_to_bf16(float f) {
    uint32_t bits = f32_bits(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u); /* quiet the NaN */
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

void sy_f16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = sy_f16_to_f32(src[i]);
}

void sy_f32_to_f16_row(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = sy_f32_to_f16(src[i]);
}

void sy_bf16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = sy_bf16_to_f32(src[i]);
}

void sy_f32_to_bf16_row(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = sy_f32_to_bf16(src[i]);
}

void sy_quantize_q8_0_row(const float *x, void *blocks, size_t n) {
    uint8_t *out = blocks;
    for (size_t b = 0; b < n / SY_Q8_0_BLOCK_ELEMS; b++, x += SY_Q8_0_BLOCK_ELEMS, out += SY_Q8_0_BLOCK_BYTES) {
        float amax = 0.0f;
        for (size_t j = 0; j < SY_Q8_0_BLOCK_ELEMS; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t h = sy_f32_to_f16(d);
        out[0] = (uint8_t)(h & 0xffu), out[1] = (uint8_t)(h >> 8);
        for (size_t j = 0; j < SY_Q8_0_BLOCK_ELEMS; j++) out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

void sy_q8_0_to_f32_row(const void *blocks, float *dst, size_t n_blocks) {
    const uint8_t *in = blocks;
    for (size_t b = 0; b < n_blocks; b++, in += SY_Q8_0_BLOCK_BYTES, dst += SY_Q8_0_BLOCK_ELEMS) {
        float d = sy_f16_to_f32((uint16_t)(in[0] | (in[1] << 8)));
        for (size_t j = 0; j < SY_Q8_0_BLOCK_ELEMS; j++) dst[j] = d * (float)(int8_t)in[2 + j];
    }
}

/* ---- transformer helpers ---- */

void sy_rmsnorm_f32(float *out, const float *x, const float *weight, size_t n, float eps) {
    if (n == 0) return;
    double sum_sq = 0.0;
    for (size_t i = 0; i < n; i++) sum_sq += (double)x[i] * (double)x[i];
    float scale = (float)(1.0 / sqrt(sum_sq / (double)n + (double)eps));
    for (size_t i = 0; i < n; i++) out[i] = x[i] * scale * (weight != NULL ? weight[i] : 1.0f);
}

void sy_softmax_f32(float *x, size_t n) {
    if (n == 0) return;
    float max = x[0];
    for (size_t i = 1; i < n; i++) {
        if (x[i] > max) max = x[i];
    }
    if (max == -INFINITY) {
        /* every score masked out: a uniform row keeps the output finite */
        for (size_t i = 0; i < n; i++) x[i] = 1.0f / (float)n;
        return;
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++) x[i] *= inv;
}

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

void sy_silu_f32(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = silu(x[i]);
}

/* silu(gate) * up with the exponentials of a chunk at once through the tier's exp_f32 (sy_expf: glibc's expf, bit
 * for bit, on every tier), so the result is that of the scalar form, vectorised. */
void sy_swiglu_f32(float *out, const float *gate, const float *up, size_t n) {
    const sy_kernels *kern = sy_kernels_active();
    float e[256];
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        const size_t m = n - i0 < 256 ? n - i0 : 256;
        for (size_t i = 0; i < m; i++) e[i] = -gate[i0 + i];
        kern->exp_f32(e, e, m);
        for (size_t i = 0; i < m; i++) out[i0 + i] = gate[i0 + i] / (1.0f + e[i]) * up[i0 + i];
    }
}

void sy_rope_inv_freq(float *inv_freq, size_t rot_dims, double base) {
    for (size_t i = 0; i < rot_dims / 2; i++) inv_freq[i] = (float)pow(base, -(double)(2 * i) / (double)rot_dims);
}

int sy_rope_f32(float *x, size_t n_heads, size_t head_dim, size_t rot_dims, float pos, const float *inv_freq,
                sy_rope_style style) {
    if (rot_dims == 0 || n_heads == 0) return SY_KERNEL_OK;
    if (rot_dims % 2 != 0 || rot_dims > head_dim || rot_dims > SY_ROPE_MAX_DIMS) return SY_KERNEL_EINVAL;
    if (x == NULL || inv_freq == NULL) return SY_KERNEL_EINVAL;
    if (style != SY_ROPE_NORM && style != SY_ROPE_NEOX) return SY_KERNEL_EINVAL;
    float cos_t[SY_ROPE_MAX_DIMS / 2], sin_t[SY_ROPE_MAX_DIMS / 2];
    size_t half = rot_dims / 2;
    for (size_t i = 0; i < half; i++) {
        float angle = pos * inv_freq[i];
        cos_t[i] = cosf(angle);
        sin_t[i] = sinf(angle);
    }
    for (size_t h = 0; h < n_heads; h++) {
        float *head = x + h * head_dim;
        for (size_t i = 0; i < half; i++) {
            size_t i0 = style == SY_ROPE_NORM ? 2 * i : i;
            size_t i1 = style == SY_ROPE_NORM ? 2 * i + 1 : i + half;
            float x0 = head[i0], x1 = head[i1];
            head[i0] = x0 * cos_t[i] - x1 * sin_t[i];
            head[i1] = x0 * sin_t[i] + x1 * cos_t[i];
        }
    }
    return SY_KERNEL_OK;
}
