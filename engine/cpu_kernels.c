/* Two hand-written CPU kernels for the decode step, where PyTorch's general-purpose kernels
 * leave most of a small CPU unused. engine/cpu_kernels.py compiles this file once per machine
 * (gcc -O3 -march=native -fopenmp) and the runner calls it through ctypes; without a compiler
 * the runner uses plain PyTorch for the same maths.
 *
 * 1. few_rows_linear: y = x @ W^T for one or two rows (decode at batch 1 or 2). Here the
 *    whole cost is reading W from memory once. PyTorch's fp32 matrix-vector product runs on
 *    one thread (about 11 GB/s on our 2-core test machine), oneDNN's about 24 GB/s; splitting
 *    W's rows over all threads in plain sequential reads streams it at 27-35 GB/s.
 * 2. rms_norm: the whole normalisation in one call (it was five small ops).
 * 3. paged_attention: every query token attends to the keys and values of its own sequence
 *    up to its own position, *where they lie* in the paged cache, walking its block table.
 *    One call serves a whole step: decode tokens and prefill chunks alike (causality is just
 *    "a token at position p sees p+1 keys"). The PyTorch path must first gather each
 *    sequence's keys into a padded tensor (a copy of the context per layer), run attention on
 *    the padding too, and loop over prefill chunks in Python.
 *
 * Tensors are float32 or bfloat16 (`bf16` = 1); bf16 values are widened to float32 for the
 * arithmetic and rounded back once at the end, as PyTorch's CPU kernels do.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}

static inline uint16_t f32_to_bf16(float f) {          /* round to nearest even, as torch does */
    union { float f; uint32_t u; } v = { f };
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);   /* NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

/* Read `n` values starting at element `offset` of a float32 or bf16 array as float32. */
static inline void load_f32(const void *src, int64_t offset, int n, int bf16, float *dst) {
    if (bf16) {
        const uint16_t *s = (const uint16_t *)src + offset;
        #pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
    } else {
        const float *s = (const float *)src + offset;
        #pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = s[i];
    }
}

static inline void store_f32(void *dst, int64_t offset, int n, int bf16, const float *src) {
    if (bf16) {
        uint16_t *d = (uint16_t *)dst + offset;
        for (int i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
    } else {
        float *d = (float *)dst + offset;
        for (int i = 0; i < n; i++) d[i] = src[i];
    }
}

static inline float dot(const float *a, const float *b, int n) {
    float acc = 0.f;
    #pragma omp simd reduction(+:acc)
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* y[m, n] = sum_k x[m, k] * w[n, k] for one or two rows m (decode at batch 1 or 2).
 * With so few rows there is almost no arithmetic: the time is reading w from memory. Threads
 * split w's rows, each thread copies one row at a time (widened to float32) in a plain
 * sequential read, then dots it with the input rows, which stay in the L1 cache. */
void few_rows_linear(const void *x, const void *w, void *y, int M, int N, int K, int bf16) {
    float *yf = malloc(sizeof(float) * (size_t)M * N);
#ifdef __AVX512BF16__
    /* This CPU multiplies bf16 pairs directly (vdpbf16ps: 32 products per instruction, summed
     * in float32), so neither x nor a bf16 weight row need be widened first. */
    if (bf16 && K % 32 == 0) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const uint16_t *wr = (const uint16_t *)w + (int64_t)n * K;
            for (int m = 0; m < M; m++) {
                const uint16_t *xr = (const uint16_t *)x + (int64_t)m * K;
                __m512 acc = _mm512_setzero_ps();
                for (int k = 0; k < K; k += 32)
                    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(xr + k),
                                           (__m512bh)_mm512_loadu_si512(wr + k));
                yf[(int64_t)m * N + n] = _mm512_reduce_add_ps(acc);
            }
        }
    } else
#endif
    {
        float *xf = malloc(sizeof(float) * (size_t)M * K);
        load_f32(x, 0, M * K, bf16, xf);
        #pragma omp parallel
        {
            float *wf = malloc(sizeof(float) * (size_t)K);
            #pragma omp for schedule(static)
            for (int n = 0; n < N; n++) {
                load_f32(w, (int64_t)n * K, K, bf16, wf);
                for (int m = 0; m < M; m++) yf[(int64_t)m * N + n] = dot(xf + (int64_t)m * K, wf, K);
            }
            free(wf);
        }
        free(xf);
    }
    store_f32(y, 0, M * N, bf16, yf);
    free(yf);
}

/* RMSNorm as the Llama reference computes it: in float32, x / sqrt(mean(x^2) + eps), rounded
 * to the model dtype, then times the weight. One call instead of five small PyTorch ops,
 * which at batch 1 cost more in overhead than in arithmetic. */
void rms_norm(const void *x, const void *weight, void *out, int rows, int dim, float eps, int bf16) {
    float *w = malloc(sizeof(float) * (size_t)dim);          /* the weight, widened once */
    load_f32(weight, 0, dim, bf16, w);
    #pragma omp parallel for schedule(static) if (rows > 16)
    for (int r = 0; r < rows; r++) {
        float buf[dim];
        load_f32(x, (int64_t)r * dim, dim, bf16, buf);
        float ss = 0.f;
        #pragma omp simd reduction(+:ss)
        for (int i = 0; i < dim; i++) ss += buf[i] * buf[i];
        float inv = 1.f / sqrtf(ss / dim + eps);
        for (int i = 0; i < dim; i++) {
            float h = buf[i] * inv;
            if (bf16) h = bf16_to_f32(f32_to_bf16(h));      /* the rounding to the model dtype */
            buf[i] = w[i] * h;
        }
        store_f32(out, (int64_t)r * dim, dim, bf16, buf);
    }
    free(w);
}

/* 16 floats as one value: gcc maps its arithmetic onto the CPU's vector registers (one
 * AVX-512 register, or two AVX2 ones). */
typedef float v16f __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef uint32_t v16u __attribute__((vector_size(64)));

static inline v16f load16(const void *src, int64_t offset, int bf16) {
    v16f f;
    if (bf16) {
        v16h h;
        memcpy(&h, (const uint16_t *)src + offset, sizeof h);
        v16u u = __builtin_convertvector(h, v16u) << 16;     /* bf16 is the top half of a float32 */
        memcpy(&f, &u, sizeof f);
    } else {
        memcpy(&f, (const float *)src + offset, sizeof f);
    }
    return f;
}

static inline float hsum(v16f v) {
    float s = 0.f;
    for (int i = 0; i < 16; i++) s += v[i];
    return s;
}

/* Softmax of each of the `group` rows of scores[group][L], in place. */
static void softmax_rows(float *scores, int group, int64_t L) {
    for (int g = 0; g < group; g++) {
        float *s = scores + g * L, mx = s[0], sum = 0.f;
        for (int64_t t = 1; t < L; t++) mx = s[t] > mx ? s[t] : mx;
        #pragma omp simd reduction(+:sum)
        for (int64_t t = 0; t < L; t++) { s[t] = expf(s[t] - mx); sum += s[t]; }
        float inv = 1.f / sum;
        #pragma omp simd
        for (int64_t t = 0; t < L; t++) s[t] *= inv;
    }
}

/* Token t of a sequence lies in block table[t / block_size], at row t % block_size. These two
 * macros walk a sequence's L tokens block by block, giving each token's slot. */
#define FOR_EACH_SLOT(table, L, block_size, t, slot)                                            \
    for (int64_t t0_ = 0; t0_ < (L); t0_ += (block_size))                                      \
        for (int64_t t = t0_, slot = (table)[t0_ / (block_size)] * (block_size);                 \
             t < (L) && t < t0_ + (block_size); t++, slot++)

#define MAX_GROUP 4    /* the fast path keeps MAX_GROUP x 4 accumulators in vector registers */

/* One (query row, KV head) of attention, for head_dim 64 and a group of at most
 * MAX_GROUP query heads: the common small-model shape. Each key row is four 16-float vectors,
 * and each query head's output accumulates in four vector registers. */
static void attend_d64(const float *qf, const void *k_cache, const void *v_cache, const int64_t *table,
                       int64_t L, int kv_heads, int h, int group, int block_size, float scale,
                       float *scores, float *outf, int bf16) {
    v16f qv[MAX_GROUP][4];
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 4; c++) memcpy(&qv[g][c], qf + g * 64 + c * 16, sizeof(v16f));
    FOR_EACH_SLOT(table, L, block_size, t, slot) {            /* pass 1: scores */
        int64_t off = (slot * kv_heads + h) * 64;
        v16f k0 = load16(k_cache, off, bf16), k1 = load16(k_cache, off + 16, bf16),
             k2 = load16(k_cache, off + 32, bf16), k3 = load16(k_cache, off + 48, bf16);
        for (int g = 0; g < MAX_GROUP; g++)
            if (g < group)
                scores[g * L + t] = hsum(qv[g][0] * k0 + qv[g][1] * k1 + qv[g][2] * k2 + qv[g][3] * k3) * scale;
    }
    softmax_rows(scores, group, L);
    v16f acc[MAX_GROUP][4] = {{0}};
    FOR_EACH_SLOT(table, L, block_size, t, slot) {            /* pass 2: weighted values */
        int64_t off = (slot * kv_heads + h) * 64;
        v16f v0 = load16(v_cache, off, bf16), v1 = load16(v_cache, off + 16, bf16),
             v2 = load16(v_cache, off + 32, bf16), v3 = load16(v_cache, off + 48, bf16);
        for (int g = 0; g < MAX_GROUP; g++) {
            if (g < group) {
                float p = scores[g * L + t];
                acc[g][0] += p * v0; acc[g][1] += p * v1; acc[g][2] += p * v2; acc[g][3] += p * v3;
            }
        }
    }
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 4; c++) memcpy(outf + g * 64 + c * 16, &acc[g][c], sizeof(v16f));
}

/* The same for any head_dim and group, with the row and accumulators in memory (slower). */
static void attend_any(const float *qf, const void *k_cache, const void *v_cache, const int64_t *table,
                       int64_t L, int kv_heads, int h, int group, int d, int block_size, float scale,
                       float *scores, float *row, float *outf, int bf16) {
    FOR_EACH_SLOT(table, L, block_size, t, slot) {
        load_f32(k_cache, (slot * kv_heads + h) * d, d, bf16, row);
        for (int g = 0; g < group; g++) scores[g * L + t] = dot(qf + g * d, row, d) * scale;
    }
    softmax_rows(scores, group, L);
    for (int i = 0; i < group * d; i++) outf[i] = 0.f;
    FOR_EACH_SLOT(table, L, block_size, t, slot) {
        load_f32(v_cache, (slot * kv_heads + h) * d, d, bf16, row);
        for (int g = 0; g < group; g++) {
            float p = scores[g * L + t], *o = outf + g * d;
            #pragma omp simd
            for (int j = 0; j < d; j++) o[j] += p * row[j];
        }
    }
}

/* Attention over a paged KV cache, one query token per row b.
 *   q, out:           [B, kv_heads * group, d]
 *   k_cache, v_cache: [num_slots, kv_heads, d]  one layer of the cache (this step's keys included)
 *   block_tables:     [B, max_blocks]  the block table of row b's sequence: key t of it is at slot
 *                     block_tables[b][t / block_size] * block_size + t % block_size
 *   context_lens:     [B]  how many keys row b sees: its position + 1
 * Query head j uses key/value head j / group (grouped-query attention), so one pass over a
 * KV head's keys serves its whole group of query heads. Threads share out the
 * (row, KV head) pairs. */
void paged_attention(const void *q, const void *k_cache, const void *v_cache,
                            const int64_t *block_tables, int max_blocks, const int64_t *context_lens,
                            int B, int kv_heads, int group, int d, int block_size, float scale,
                            void *out, int bf16) {
    int64_t longest = 1;
    for (int b = 0; b < B; b++) if (context_lens[b] > longest) longest = context_lens[b];
    int fast = d == 64 && group <= MAX_GROUP;
    #pragma omp parallel
    {
        float *scores = malloc(sizeof(float) * (size_t)group * longest);   /* [group, L] */
        float *qf = malloc(sizeof(float) * (size_t)group * d);
        float *outf = malloc(sizeof(float) * (size_t)group * d);
        float *row = malloc(sizeof(float) * (size_t)d);
        #pragma omp for schedule(dynamic, 1)
        for (int job = 0; job < B * kv_heads; job++) {
            int b = job / kv_heads, h = job % kv_heads;
            const int64_t *table = block_tables + (int64_t)b * max_blocks;
            int64_t offset = ((int64_t)b * kv_heads + h) * group * d;
            load_f32(q, offset, group * d, bf16, qf);
            if (fast)
                attend_d64(qf, k_cache, v_cache, table, context_lens[b], kv_heads, h, group, block_size,
                           scale, scores, outf, bf16);
            else
                attend_any(qf, k_cache, v_cache, table, context_lens[b], kv_heads, h, group, d, block_size,
                           scale, scores, row, outf, bf16);
            store_f32(out, offset, group * d, bf16, outf);
        }
        free(scores);
        free(qf);
        free(outf);
        free(row);
    }
}
