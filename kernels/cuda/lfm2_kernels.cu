// CUDA kernels of the lfm2-cuda plugin: see lfm2_kernels.h for the contracts. Plain CUDA C++ (no libraries
// beyond cuda_bf16.h); every launcher guards empty work (a zero-sized grid is a launch error) and returns
// cudaGetLastError().
#include "lfm2_kernels.h"

#include <cuda_bf16.h>
#include <math_constants.h>

namespace {

constexpr int kThreads = 256;
constexpr int kAttnWarps = 4;
constexpr int kAttnQueriesPerWarp = LC_ATTN_QUERIES / kAttnWarps;
constexpr int kDimsPerLane = LC_MAX_HEAD_DIM / 32;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float bf2f(lc_bf16 v) {
    return __uint_as_float(static_cast<unsigned>(v) << 16);
}

// Round to nearest even, NaN kept NaN (as torch and the CPU side's sy_f32_to_bf16).
__device__ __forceinline__ lc_bf16 f2bf(float f) {
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    return *reinterpret_cast<lc_bf16 *>(&b);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
    return v;
}

// Sum over a block of kThreads threads; every thread gets the result.
__device__ float block_sum(float v) {
    __shared__ float partial[kThreads / 32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < kThreads / 32 ? partial[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

unsigned blocks_for(size_t n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

// ---- embedding, norms, elementwise ----

__global__ void embed_kernel(const lc_bf16 *table, int n, const int32_t *tokens, float *x) {
    int r = blockIdx.x;
    const lc_bf16 *src = table + static_cast<size_t>(tokens[r]) * n;
    float *dst = x + static_cast<size_t>(r) * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x) dst[c] = bf2f(src[c]);
}

__global__ void add_rmsnorm_kernel(float *x, const float *delta, const float *bias, const float *weight, int n,
                                   float eps, lc_bf16 *out) {
    int r = blockIdx.x;
    float *xr = x + static_cast<size_t>(r) * n;
    const float *dr = delta ? delta + static_cast<size_t>(r) * n : nullptr;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float v = xr[c];
        if (dr) {
            v += bias ? dr[c] + bias[c] : dr[c];
            xr[c] = v;
        }
        ss += v * v;
    }
    float inv = 1.0f / sqrtf(block_sum(ss) / static_cast<float>(n) + eps);
    lc_bf16 *o = out + static_cast<size_t>(r) * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x) o[c] = f2bf(weight[c] * (xr[c] * inv));
}

__global__ void conv_input_kernel(const float *bcx, const float *in_bias, int n_rows, int n, float *u) {
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<size_t>(n_rows) * n) return;
    size_t r = i / n;
    int c = static_cast<int>(i % n);
    const float *row = bcx + r * 3 * n;
    float b = row[c], xv = row[2 * n + c];
    if (in_bias) b += in_bias[c], xv += in_bias[2 * n + c];
    u[i] = b * xv;
}

__device__ __forceinline__ const float *conv_ring_row(const lc_conv_state &st, int conv, int slot, int pos,
                                                      bool work) {
    const float *base = work ? st.work : st.committed;
    return base + static_cast<size_t>(slot) * st.slot_stride +
           (static_cast<size_t>(conv) * st.ring + static_cast<size_t>(pos % st.ring)) * st.n_embd;
}

__global__ void conv_apply_kernel(lc_rows rows, const float *u, const float *bcx, const float *in_bias,
                                  const float *kernel, const float *conv_bias, int L, lc_conv_state st, int conv,
                                  lc_bf16 *y) {
    int r = blockIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int n = st.n_embd;
    if (c >= n) return;
    int p = rows.pos[r], first = rows.first[r], len = rows.len[r], slot = rows.slot[r];
    float acc = conv_bias ? conv_bias[c] : 0.0f;
    for (int j = 0; j < L; j++) {
        int q = p - (L - 1) + j;
        if (q < 0) continue;
        float v;
        if (q >= first) v = u[static_cast<size_t>(r - (p - q)) * n + c];
        else v = conv_ring_row(st, conv, slot, q, q >= len)[c];
        acc += kernel[static_cast<size_t>(c) * L + j] * v;
    }
    float gate = bcx[static_cast<size_t>(r) * 3 * n + n + c];
    if (in_bias) gate += in_bias[n + c];
    y[static_cast<size_t>(r) * n + c] = f2bf(gate * acc);
}

__global__ void conv_store_kernel(lc_rows rows, const float *u, lc_conv_state st, int conv) {
    int r = blockIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int n = st.n_embd;
    int p = rows.pos[r];
    // only the last `ring` rows of the sequence in this chunk: distinct ring rows, so no two writes collide
    if (c >= n || p + st.ring <= rows.last[r]) return;
    float *dst = const_cast<float *>(conv_ring_row(st, conv, rows.slot[r], p, true));
    dst[c] = u[static_cast<size_t>(r) * n + c];
}

__global__ void conv_commit_kernel(const int32_t *slots, const int32_t *len, const int32_t *n_new,
                                   lc_conv_state st) {
    int item = blockIdx.x, conv = blockIdx.y;
    int end = len[item] + n_new[item];
    int begin = end - st.ring > len[item] ? end - st.ring : len[item];
    for (int p = begin; p < end; p++) {
        const float *src = conv_ring_row(st, conv, slots[item], p, true);
        float *dst = const_cast<float *>(conv_ring_row(st, conv, slots[item], p, false));
        for (int c = threadIdx.x; c < st.n_embd; c += blockDim.x) dst[c] = src[c];
    }
}

__global__ void swiglu_kernel(const float *gu, int n_rows, int ff, lc_bf16 *out) {
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<size_t>(n_rows) * ff) return;
    size_t r = i / ff, k = i % ff;
    float g = gu[r * 2 * ff + k], up = gu[r * 2 * ff + ff + k];
    out[i] = f2bf(g / (1.0f + expf(-g)) * up);
}

__global__ void gather_rows_kernel(const lc_bf16 *src, const int32_t *rows, int n, lc_bf16 *dst) {
    int i = blockIdx.x;
    const lc_bf16 *s = src + static_cast<size_t>(rows[i]) * n;
    lc_bf16 *d = dst + static_cast<size_t>(i) * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x) d[c] = s[c];
}

__global__ void argmax_kernel(const float *logits, int n_vocab, int32_t *out) {
    __shared__ float best_v[kThreads];
    __shared__ int best_i[kThreads];
    const float *row = logits + static_cast<size_t>(blockIdx.x) * n_vocab;
    float bv = -CUDART_INF_F;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
        float v = row[i];
        if (v > bv || (v == bv && i < bi)) bv = v, bi = i; // NaN compares false: never chosen
    }
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float ov = best_v[threadIdx.x + s];
            int oi = best_i[threadIdx.x + s];
            if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x]))
                best_v[threadIdx.x] = ov, best_i[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = best_i[0] == 0x7fffffff ? 0 : best_i[0];
}

__global__ void copy_kv_blocks_kernel(lc_bf16 *const *pools, size_t block_elems, const int32_t *src,
                                      const int32_t *dst) {
    lc_bf16 *pool = pools[blockIdx.y];
    const lc_bf16 *s = pool + static_cast<size_t>(src[blockIdx.x]) * block_elems;
    lc_bf16 *d = pool + static_cast<size_t>(dst[blockIdx.x]) * block_elems;
    for (size_t e = threadIdx.x; e < block_elems; e += blockDim.x) d[e] = s[e];
}

// ---- attention ----

__device__ __forceinline__ size_t kv_offset(const lc_kv_layer &kv, int slot, int pos, int head) {
    int block = kv.page_table[static_cast<size_t>(slot) * kv.max_blocks + pos / LC_KV_BLOCK];
    return ((static_cast<size_t>(block) * kv.n_kv_heads + head) * LC_KV_BLOCK + pos % LC_KV_BLOCK) *
           static_cast<size_t>(kv.head_dim);
}

// One warp per (row, head) of q, k and v: q/k RMSNorm over the head, NEOX RoPE, then q out, k and v to the cache.
__global__ void qk_norm_rope_kv_kernel(lc_rows rows, const float *qkv, int n_head, const float *q_norm,
                                       const float *k_norm, float eps, const float *inv_freq, float *q_out,
                                       lc_kv_layer kv) {
    __shared__ float buf[kAttnWarps][LC_MAX_HEAD_DIM];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int h = blockIdx.y * kAttnWarps + warp;
    int hd = kv.head_dim, n_kv = kv.n_kv_heads;
    if (h >= n_head + 2 * n_kv) return; // whole warps leave; only __syncwarp below
    int r = blockIdx.x, p = rows.pos[r];
    const float *src = qkv + static_cast<size_t>(r) * (n_head + 2 * n_kv) * hd + static_cast<size_t>(h) * hd;
    if (h >= n_head + n_kv) { // v: stored as it is
        lc_bf16 *dst = kv.v + kv_offset(kv, rows.slot[r], p, h - n_head - n_kv);
        for (int d = lane; d < hd; d += 32) dst[d] = f2bf(src[d]);
        return;
    }
    const float *w = h < n_head ? q_norm : k_norm;
    float ss = 0.0f;
    for (int d = lane; d < hd; d += 32) ss += src[d] * src[d];
    float inv = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(hd) + eps);
    float *b = buf[warp];
    for (int d = lane; d < hd; d += 32) b[d] = w[d] * (src[d] * inv);
    __syncwarp();
    int half = hd / 2;
    float *q_dst = q_out + (static_cast<size_t>(r) * n_head + h) * hd;
    lc_bf16 *k_dst = h < n_head ? nullptr : kv.k + kv_offset(kv, rows.slot[r], p, h - n_head);
    for (int d = lane; d < hd; d += 32) {
        int i = d < half ? d : d - half;
        float sn, cs;
        sincosf(static_cast<float>(p) * inv_freq[i], &sn, &cs);
        float v = d < half ? b[d] * cs - b[d + half] * sn : b[d] * cs + b[d - half] * sn;
        if (k_dst) k_dst[d] = f2bf(v);
        else q_dst[d] = v;
    }
}

size_t attention_smem_bytes(int hd) {
    return (static_cast<size_t>(LC_ATTN_QUERIES) * hd + static_cast<size_t>(LC_ATTN_KEYS) * (hd + 1) +
            static_cast<size_t>(LC_ATTN_KEYS) * hd) *
           sizeof(float);
}

// Block: one task and kv head blockIdx.y; 4 warps, each owning up to 8 of the task's (row, head) queries with an
// online softmax; K and V tiles of 32 keys staged in shared memory as F32 (K rows padded so that lane j reading
// key j does not conflict). Lane j scores key j; lane l accumulates dims l, l+32, ...
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(const lc_attn_task *tasks, int group, float scale, const float *q, lc_kv_layer kv,
                     lc_bf16 *out, float *partial, int max_splits) {
    extern __shared__ float smem[];
    const lc_attn_task task = tasks[blockIdx.x];
    const int g = blockIdx.y, hd = kv.head_dim, n_head = group * kv.n_kv_heads;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n_queries = task.n_rows * group;
    float *Qs = smem;                           // [LC_ATTN_QUERIES][hd]
    float *Ks = Qs + LC_ATTN_QUERIES * hd;      // [LC_ATTN_KEYS][hd + 1]
    float *Vs = Ks + LC_ATTN_KEYS * (hd + 1);   // [LC_ATTN_KEYS][hd]

    for (int i = threadIdx.x; i < n_queries * hd; i += blockDim.x) {
        int qi = i / hd, d = i % hd;
        int row = task.row0 + qi / group, head = g * group + qi % group;
        Qs[i] = q[(static_cast<size_t>(row) * n_head + head) * hd + d] * scale;
    }

    float m[kAttnQueriesPerWarp], l[kAttnQueriesPerWarp], acc[kAttnQueriesPerWarp][kDimsPerLane];
#pragma unroll
    for (int t = 0; t < kAttnQueriesPerWarp; t++) {
        m[t] = -CUDART_INF_F;
        l[t] = 0.0f;
#pragma unroll
        for (int k = 0; k < kDimsPerLane; k++) acc[t][k] = 0.0f;
    }

    const int last_pos = task.pos0 + task.n_rows - 1;
    const int k_end = task.k_end < last_pos + 1 ? task.k_end : last_pos + 1;
    for (int k0 = task.k_begin; k0 < k_end; k0 += LC_ATTN_KEYS) {
        const int nk = k_end - k0 < LC_ATTN_KEYS ? k_end - k0 : LC_ATTN_KEYS;
        __syncthreads(); // the previous tile is consumed (and, the first time, Qs is written)
        for (int i = threadIdx.x; i < nk * hd; i += blockDim.x) {
            int j = i / hd, d = i % hd;
            size_t off = kv_offset(kv, task.slot, k0 + j, g) + d;
            Ks[j * (hd + 1) + d] = bf2f(kv.k[off]);
            Vs[j * hd + d] = bf2f(kv.v[off]);
        }
        __syncthreads();
#pragma unroll
        for (int t = 0; t < kAttnQueriesPerWarp; t++) {
            const int qi = warp + t * kAttnWarps;
            if (qi >= n_queries) continue; // uniform over the warp
            const int qpos = task.pos0 + qi / group;
            float s = -CUDART_INF_F;
            if (lane < nk && k0 + lane <= qpos) {
                const float *qv = Qs + qi * hd, *kr = Ks + lane * (hd + 1);
                float dot = 0.0f;
                for (int d = 0; d < hd; d++) dot += qv[d] * kr[d];
                s = dot;
            }
            const float tile_max = warp_max(s);
            if (tile_max == -CUDART_INF_F) continue; // every key of this tile lies after the query
            const float m_new = fmaxf(m[t], tile_max);
            const float corr = expf(m[t] - m_new); // 0 when m[t] is -inf
            const float pj = s == -CUDART_INF_F ? 0.0f : expf(s - m_new);
            l[t] = l[t] * corr + warp_sum(pj);
#pragma unroll
            for (int k = 0; k < kDimsPerLane; k++) acc[t][k] *= corr;
            for (int j = 0; j < nk; j++) {
                const float pv = __shfl_sync(kFullMask, pj, j);
                const float *vr = Vs + j * hd;
#pragma unroll
                for (int k = 0; k < kDimsPerLane; k++) {
                    int d = lane + 32 * k;
                    if (d < hd) acc[t][k] += pv * vr[d];
                }
            }
            m[t] = m_new;
        }
    }

#pragma unroll
    for (int t = 0; t < kAttnQueriesPerWarp; t++) {
        const int qi = warp + t * kAttnWarps;
        if (qi >= n_queries) continue;
        const int row = task.row0 + qi / group, head = g * group + qi % group;
        if (task.split < 0) {
            const float inv = l[t] > 0.0f ? 1.0f / l[t] : 0.0f;
            lc_bf16 *o = out + (static_cast<size_t>(row) * n_head + head) * hd;
#pragma unroll
            for (int k = 0; k < kDimsPerLane; k++) {
                int d = lane + 32 * k;
                if (d < hd) o[d] = f2bf(acc[t][k] * inv);
            }
        } else {
            float *pp = partial + ((static_cast<size_t>(row) * n_head + head) * max_splits + task.split) * (hd + 2);
            if (lane == 0) pp[0] = m[t], pp[1] = l[t];
#pragma unroll
            for (int k = 0; k < kDimsPerLane; k++) {
                int d = lane + 32 * k;
                if (d < hd) pp[2 + d] = acc[t][k];
            }
        }
    }
}

__global__ void attention_combine_kernel(const int32_t *splits, int n_head, int hd, int max_splits,
                                         const float *partial, lc_bf16 *out) {
    int r = blockIdx.x, head = blockIdx.y, n = splits[r];
    if (n <= 0) return;
    const float *base = partial + (static_cast<size_t>(r) * n_head + head) * max_splits * (hd + 2);
    float M = -CUDART_INF_F;
    for (int s = 0; s < n; s++) M = fmaxf(M, base[s * (hd + 2)]);
    float L = 0.0f;
    for (int s = 0; s < n; s++) {
        float ms = base[s * (hd + 2)];
        if (ms != -CUDART_INF_F) L += base[s * (hd + 2) + 1] * expf(ms - M);
    }
    float inv = L > 0.0f ? 1.0f / L : 0.0f;
    lc_bf16 *o = out + (static_cast<size_t>(r) * n_head + head) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < n; s++) {
            float ms = base[s * (hd + 2)];
            if (ms != -CUDART_INF_F) v += base[s * (hd + 2) + 2 + d] * expf(ms - M);
        }
        o[d] = f2bf(v * inv);
    }
}

// ---- seeded fills ----

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ float uniform_at(uint64_t seed, size_t i, float lo, float hi) {
    uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i)));
    float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f); // [0, 1)
    return lo + (hi - lo) * u;
}

__global__ void fill_bf16_kernel(lc_bf16 *dst, size_t n, uint64_t seed, float lo, float hi) {
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dst[i] = f2bf(uniform_at(seed, i, lo, hi));
}

__global__ void fill_f32_kernel(float *dst, size_t n, uint64_t seed, float lo, float hi) {
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dst[i] = uniform_at(seed, i, lo, hi);
}

unsigned fill_blocks(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 65536 ? (b ? b : 1) : 65536);
}

} // namespace

extern "C" {

cudaError_t lc_kernels_init(void) {
    return cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(attention_smem_bytes(LC_MAX_HEAD_DIM)));
}

cudaError_t lc_embed(cudaStream_t stream, const lc_bf16 *table, int32_t n_embd, const int32_t *tokens,
                     int32_t n_rows, float *x) {
    if (n_rows <= 0) return cudaSuccess;
    embed_kernel<<<n_rows, kThreads, 0, stream>>>(table, n_embd, tokens, x);
    return cudaGetLastError();
}

cudaError_t lc_add_rmsnorm(cudaStream_t stream, float *x, const float *delta, const float *bias,
                           const float *weight, int32_t n_rows, int32_t n, float eps, lc_bf16 *out) {
    if (n_rows <= 0) return cudaSuccess;
    add_rmsnorm_kernel<<<n_rows, kThreads, 0, stream>>>(x, delta, bias, weight, n, eps, out);
    return cudaGetLastError();
}

cudaError_t lc_conv_input(cudaStream_t stream, const float *bcx, const float *in_bias, int32_t n_rows, int32_t n,
                          float *u) {
    size_t total = static_cast<size_t>(n_rows) * n;
    if (total == 0) return cudaSuccess;
    conv_input_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(bcx, in_bias, n_rows, n, u);
    return cudaGetLastError();
}

cudaError_t lc_conv_apply(cudaStream_t stream, lc_rows rows, const float *u, const float *bcx,
                          const float *in_bias, const float *kernel, const float *conv_bias, int32_t L,
                          lc_conv_state st, int32_t conv, lc_bf16 *y) {
    if (rows.n <= 0) return cudaSuccess;
    if (L < 1 || L > LC_MAX_CONV_KERNEL || st.ring < L - 1) return cudaErrorInvalidValue;
    dim3 grid(blocks_for(st.n_embd, kThreads), rows.n);
    conv_apply_kernel<<<grid, kThreads, 0, stream>>>(rows, u, bcx, in_bias, kernel, conv_bias, L, st, conv, y);
    return cudaGetLastError();
}

cudaError_t lc_conv_store(cudaStream_t stream, lc_rows rows, const float *u, lc_conv_state st, int32_t conv) {
    if (rows.n <= 0) return cudaSuccess;
    dim3 grid(blocks_for(st.n_embd, kThreads), rows.n);
    conv_store_kernel<<<grid, kThreads, 0, stream>>>(rows, u, st, conv);
    return cudaGetLastError();
}

cudaError_t lc_conv_commit(cudaStream_t stream, const int32_t *slots, const int32_t *len, const int32_t *n_new,
                           int32_t n_items, int32_t n_conv, lc_conv_state st) {
    if (n_items <= 0 || n_conv <= 0) return cudaSuccess;
    dim3 grid(n_items, n_conv);
    conv_commit_kernel<<<grid, kThreads, 0, stream>>>(slots, len, n_new, st);
    return cudaGetLastError();
}

cudaError_t lc_qk_norm_rope_kv(cudaStream_t stream, lc_rows rows, const float *qkv, int32_t n_head,
                               const float *q_norm, const float *k_norm, float eps, const float *inv_freq,
                               float *q_out, lc_kv_layer kv) {
    if (rows.n <= 0) return cudaSuccess;
    if (kv.head_dim < 2 || kv.head_dim > LC_MAX_HEAD_DIM || kv.head_dim % 2 != 0) return cudaErrorInvalidValue;
    int heads = n_head + 2 * kv.n_kv_heads;
    dim3 grid(rows.n, (heads + kAttnWarps - 1) / kAttnWarps);
    qk_norm_rope_kv_kernel<<<grid, kAttnWarps * 32, 0, stream>>>(rows, qkv, n_head, q_norm, k_norm, eps, inv_freq,
                                                                 q_out, kv);
    return cudaGetLastError();
}

cudaError_t lc_attention(cudaStream_t stream, const lc_attn_task *tasks, int32_t n_tasks, int32_t group,
                         float scale, const float *q, lc_kv_layer kv, lc_bf16 *out, float *partial,
                         int32_t max_splits) {
    if (n_tasks <= 0) return cudaSuccess;
    if (kv.head_dim < 2 || kv.head_dim > LC_MAX_HEAD_DIM || group < 1 || group > LC_ATTN_QUERIES)
        return cudaErrorInvalidValue;
    dim3 grid(n_tasks, kv.n_kv_heads);
    attention_kernel<<<grid, kAttnWarps * 32, attention_smem_bytes(kv.head_dim), stream>>>(
        tasks, group, scale, q, kv, out, partial, max_splits);
    return cudaGetLastError();
}

cudaError_t lc_attention_combine(cudaStream_t stream, const int32_t *splits, int32_t n_rows, int32_t n_head,
                                 int32_t hd, int32_t max_splits, const float *partial, lc_bf16 *out) {
    if (n_rows <= 0) return cudaSuccess;
    dim3 grid(n_rows, n_head);
    attention_combine_kernel<<<grid, 64, 0, stream>>>(splits, n_head, hd, max_splits, partial, out);
    return cudaGetLastError();
}

cudaError_t lc_swiglu(cudaStream_t stream, const float *gu, int32_t n_rows, int32_t ff, lc_bf16 *out) {
    size_t total = static_cast<size_t>(n_rows) * ff;
    if (total == 0) return cudaSuccess;
    swiglu_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(gu, n_rows, ff, out);
    return cudaGetLastError();
}

cudaError_t lc_gather_rows(cudaStream_t stream, const lc_bf16 *src, const int32_t *rows, int32_t n_sel, int32_t n,
                           lc_bf16 *dst) {
    if (n_sel <= 0) return cudaSuccess;
    gather_rows_kernel<<<n_sel, kThreads, 0, stream>>>(src, rows, n, dst);
    return cudaGetLastError();
}

cudaError_t lc_argmax(cudaStream_t stream, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t *out) {
    if (n_rows <= 0) return cudaSuccess;
    argmax_kernel<<<n_rows, kThreads, 0, stream>>>(logits, n_vocab, out);
    return cudaGetLastError();
}

cudaError_t lc_copy_kv_blocks(cudaStream_t stream, lc_bf16 *const *pools, int32_t n_pools, size_t block_elems,
                              const int32_t *src, const int32_t *dst, int32_t n) {
    if (n <= 0 || n_pools <= 0) return cudaSuccess;
    dim3 grid(n, n_pools);
    copy_kv_blocks_kernel<<<grid, kThreads, 0, stream>>>(pools, block_elems, src, dst);
    return cudaGetLastError();
}

cudaError_t lc_fill_uniform_bf16(cudaStream_t stream, lc_bf16 *dst, size_t n, uint64_t seed, float lo, float hi) {
    if (n == 0) return cudaSuccess;
    fill_bf16_kernel<<<fill_blocks(n), kThreads, 0, stream>>>(dst, n, seed, lo, hi);
    return cudaGetLastError();
}

cudaError_t lc_fill_uniform_f32(cudaStream_t stream, float *dst, size_t n, uint64_t seed, float lo, float hi) {
    if (n == 0) return cudaSuccess;
    fill_f32_kernel<<<fill_blocks(n), kThreads, 0, stream>>>(dst, n, seed, lo, hi);
    return cudaGetLastError();
}

} // extern "C"
