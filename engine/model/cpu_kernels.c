/* Hand-written CPU kernels for the steps where PyTorch's general-purpose kernels leave most
 * of a small CPU unused. engine/model/cpu_kernels.py compiles this file once per machine and
 * path (gcc -O3 -march=native -fopenmp, less the instructions above the path) and the runner
 * calls it through ctypes; without a compiler the runner uses plain PyTorch for the same
 * maths. Vector loops are written in the register width the build allows (VW below), so
 * they neither assume AVX-512 nor spill on AVX2. The same file is built once for each vector
 * path a CPU may have, and cpu_kernels.py loads the widest this CPU runs (or the one
 * BATCHING_LAB_KERNELS names):
 *   avx512_bf16  16 floats a register, and bf16 dot products for a bf16 model's products and
 *                prefill attention (BF16_DOT);
 *   avx512       16 floats a register, bf16 widened to float32 for the arithmetic;
 *   avx2         8 floats a register (the code for AVX-512 compiled out);
 *   portable     gcc's vector extensions in 8-float vectors, for a CPU with none of the above.
 *
 * 1. few_rows_linear: y = x @ W^T for a few rows (decode at small batches). Here the whole
 *    cost is reading W from memory once. Each thread reads four rows side by side from four
 *    distant parts of W, four streams at once, which two cores read faster than one stream
 *    each (the bench's profile prints the figures on this machine).
 * 1b. packed_linear: y = x @ W^T for more rows (decode at larger batches, prefill), on a copy
 *    of W laid out in panels by pack_weight. These products are bound by arithmetic: a block of
 *    y stays in registers while each loaded value feeds many multiply-adds. gated_linear is
 *    the MLP's gate/up product that stores silu(gate) * up in place of its output.
 * 2. rms_norm (with the residual add before it), rope_store (rotary embedding and the KV
 *    cache write) and silu_mul: the small per-layer steps, one call each where PyTorch took
 *    three to ten small ops, each with its own dispatch and, above a few rows, its own threads.
 * 3. paged_attention: every query token attends to the keys and values of its own sequence
 *    up to its own position, *where they lie* in the paged cache, walking its block table.
 *    One call serves a whole step: decode tokens and prefill chunks alike (causality is just
 *    "a token at position p sees p+1 keys"). The PyTorch path must first gather each
 *    sequence's keys into a padded tensor (a copy of the context per layer), run attention on
 *    the padding too, and loop over prefill chunks in Python. The rows of a prefill chunk go
 *    QTILE at a time (attend_tile): each key and value row read serves the whole tile, the
 *    scores come out as a small matrix product, and the keys go KEY_BLOCK at a time with the
 *    softmax taken online, as flash attention takes it; a decode row goes with all its KV heads
 *    at once, reading its cache rows front to back (attend_fast).
 *
 * 4. layers_in_one_call: every layer of a decode step in one call, the kernels above in the
 *    runner's order: at one row the calls between kernels cost as much as the kernels.
 *
 * Tensors are float32 or bfloat16 (`bf16` = 1); bf16 values are widened to float32 for the
 * arithmetic and rounded back once at the end, as PyTorch's CPU kernels do.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}

static inline uint16_t f32_to_bf16(float f) {          /* round to nearest even, as torch does */
    union { float f; uint32_t u; } v = { f };
    uint32_t rounded = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16, quiet = (v.u >> 16) | 0x40;
    return (uint16_t)((v.u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);   /* a NaN stays one, quiet */
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
        #pragma omp simd
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

/* One vector register of floats, chosen when the file is compiled for a path. Loops below are
 * written in these vectors, so they use the width the build allows and keep their accumulators
 * in the registers it has.
 * AVX-512: 16 floats a register and 32 registers. Each instruction does twice an AVX2 one's
 *   work, and the panel product (tile) keeps 24 sums in registers where AVX2 keeps 12, so each
 *   value it loads feeds twice the multiply-adds; a memory-bound loop reads a 64-byte cache line
 *   with one load.
 * AVX2 (and the portable path): 8 floats a register and 16 registers. */
#ifdef __AVX512F__
#define VW 16
#else
#define VW 8
#endif
typedef float vf __attribute__((vector_size(VW * 4)));
typedef uint16_t vh __attribute__((vector_size(VW * 2)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef float v4f __attribute__((vector_size(16)));

static inline vf loadv(const void *src, int64_t offset, int bf16) {
    vf f;
    if (bf16) {                                              /* bf16 is the top half of a float32 */
        const void *at = (const uint16_t *)src + offset;
#if VW == 16
        __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)at)), 16);
#elif defined(__AVX2__)
        __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)at)), 16);
#else
        vh h;
        memcpy(&h, at, sizeof h);
        vu u = __builtin_convertvector(h, vu) << 16;
#endif
        memcpy(&f, &u, sizeof f);
    } else {
        memcpy(&f, (const float *)src + offset, sizeof f);
    }
    return f;
}

static inline float hsum(vf v) {                             /* halve the vector until one float is left */
#if VW == 16
    typedef float v8f __attribute__((vector_size(32)));
    v8f a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)
          + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    vf a = v;
#endif
    v4f b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    b += __builtin_shufflevector(b, b, 2, 3, 0, 1);
    return b[0] + b[1];
}

#define ROWS 4     /* weight rows read side by side, each from its own stream (see few_rows_linear) */
#define MAX_M 2    /* input rows of the vector path: ROWS x MAX_M accumulators in registers */

/* ROWS weight rows (their indices in `row`), times M input rows. Always inlined with M and bf16
 * constants, so the compiler drops the tests on them from the inner loop and keeps acc in
 * registers. In bf16 each row's stream continues at the next row, which is asked for while this
 * one is read: a bf16 row (1,152 bytes at 576 wide) is too short for the CPU's own prefetcher to
 * get going on four streams at once (an fp32 row is twice as long, and there asking did not pay). */
static inline __attribute__((always_inline))
void rows_times_x(const float *xf, const void *w, void *y, const int64_t *row, int N, int K, const int M,
                  const int bf16) {
    vf acc[ROWS][MAX_M] = {{0}};
    for (int k = 0; k < K; k += VW) {
        vf xv[MAX_M];
        for (int m = 0; m < M; m++) memcpy(&xv[m], xf + (int64_t)m * K + k, sizeof xv[m]);
        for (int r = 0; r < ROWS; r++) {
            if (bf16) __builtin_prefetch((const char *)w + ((row[r] + 1) * K + k) * 2);
            vf wv = loadv(w, row[r] * K + k, bf16);
            for (int m = 0; m < M; m++) acc[r][m] += wv * xv[m];
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < ROWS; r++) {
            int64_t at = (int64_t)m * N + row[r];
            if (bf16) ((uint16_t *)y)[at] = f32_to_bf16(hsum(acc[r][m]));
            else ((float *)y)[at] = hsum(acc[r][m]);
        }
}

/* The same for bf16 weights, two bf16 values at a time: one 32-bit lane holds w[k] in its low
 * half and w[k+1] in its high half, so a shift widens the first to float32 and a mask the
 * second, exactly, with no shuffle across the vector. The input rows are laid out to match
 * (pair_up: per block of 2*VW values, the VW even ones, then the VW odd ones). */
static inline __attribute__((always_inline))
void bf16_rows_times_x(const float *xp, const uint16_t *w, uint16_t *y, const int64_t *row, int N, int K,
                       const int M) {
    vf acc[ROWS][MAX_M] = {{0}};
    const vu high = (vu){0} + 0xFFFF0000u;
    for (int k = 0; k < K; k += 2 * VW) {
        vf xe[MAX_M], xo[MAX_M];
        for (int m = 0; m < M; m++) {
            memcpy(&xe[m], xp + (int64_t)m * K + k, sizeof xe[m]);
            memcpy(&xo[m], xp + (int64_t)m * K + k + VW, sizeof xo[m]);
        }
        for (int r = 0; r < ROWS; r++) {
            __builtin_prefetch(w + (row[r] + 1) * K + k);
            vu u, lo, hi;
            memcpy(&u, w + row[r] * K + k, sizeof u);
            lo = u << 16;
            hi = u & high;
            vf wl, wh;
            memcpy(&wl, &lo, sizeof wl);
            memcpy(&wh, &hi, sizeof wh);
            for (int m = 0; m < M; m++) acc[r][m] += wl * xe[m] + wh * xo[m];
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < ROWS; r++) y[(int64_t)m * N + row[r]] = f32_to_bf16(hsum(acc[r][m]));
}

/* x's rows widened to float32 with each block of 2*VW values reordered evens first, odds next. */
static void pair_up(const uint16_t *x, float *xp, int64_t n) {
    for (int64_t b = 0; b < n; b += 2 * VW)
        for (int j = 0; j < VW; j++) {
            xp[b + j] = bf16_to_f32(x[b + 2 * j]);
            xp[b + VW + j] = bf16_to_f32(x[b + 2 * j + 1]);
        }
}

/* One weight row at a time, any width: the general path, and the rows left over. */
static void one_row_times_x(const float *xf, const void *w, void *y, int64_t n, int M, int N, int K, int bf16,
                            int pairs, float *wf) {
    if (pairs) pair_up((const uint16_t *)w + n * K, wf, K);       /* laid out as x is */
    else load_f32(w, n * K, K, bf16, wf);
    for (int m = 0; m < M; m++) {
        float v = dot(xf + (int64_t)m * K, wf, K);
        store_f32(y, (int64_t)m * N + n, 1, bf16, &v);
    }
}

/* y[m, n] = sum_k x[m, k] * w[n, k] for a few rows m (decode at small batches).
 * With few rows there is little arithmetic: the time is reading w from memory once. Each thread
 * reads ROWS weight rows side by side, widening bf16 in registers, and multiplies them with the
 * input rows, which stay in the L1 cache; independent accumulators (one per weight row and input
 * row) keep the adds from waiting on each other. The ROWS rows come from ROWS quarters of w (rows
 * g, g + Q, g + 2Q, g + 3Q for Q = N / ROWS), so each thread reads ROWS streams far apart in
 * memory, one after another through its quarters: two cores reach about half as much bandwidth
 * again from distant streams as from one. More than MAX_M input rows go MAX_M at a time over the
 * same ROWS weight rows, which the first pass left in the L1/L2 cache: w still comes from memory
 * once. */
void few_rows_linear(const void *x, const void *w, void *y, int M, int N, int K, int bf16) {
    if (M <= 0) return;                        /* a step where nobody samples: no head rows */
    float *xf = malloc(sizeof(float) * (size_t)M * K);
    int pairs = bf16 && K % (2 * VW) == 0;     /* bf16 rows that split into whole pairs of vectors */
    if (pairs) pair_up(x, xf, (int64_t)M * K);
    else load_f32(x, 0, M * K, bf16, xf);
    int64_t Q = K % VW == 0 ? N / ROWS : 0;    /* rows in each quarter; 0: all by the general path */
    size_t elem = bf16 ? 2 : 4;
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int64_t g = 0; g < Q; g++) {
            int64_t row[ROWS];
            for (int r = 0; r < ROWS; r++) row[r] = g + r * Q;
            for (int m = 0; m < M; m += MAX_M) {
                const float *xm = xf + (int64_t)m * K;
                void *ym = (char *)y + (size_t)m * N * elem;
                if (pairs && M - m == 1) bf16_rows_times_x(xm, w, ym, row, N, K, 1);
                else if (pairs) bf16_rows_times_x(xm, w, ym, row, N, K, 2);
                else if (M - m == 1 && bf16) rows_times_x(xm, w, ym, row, N, K, 1, 1);
                else if (M - m == 1) rows_times_x(xm, w, ym, row, N, K, 1, 0);
                else if (bf16) rows_times_x(xm, w, ym, row, N, K, 2, 1);
                else rows_times_x(xm, w, ym, row, N, K, 2, 0);
            }
        }
        if (ROWS * Q < N) {                        /* the rows past the quarters (fewer than ROWS), or all */
            float *wf = malloc(sizeof(float) * (size_t)K);
            #pragma omp for schedule(static)
            for (int64_t n = ROWS * Q; n < N; n++)
                one_row_times_x(xf, w, y, n, M, N, K, bf16, pairs, wf);
            free(wf);
        }
    }
    free(xf);
}

/* y = x @ W^T for more rows than few_rows_linear takes (decode at larger batches, prefill), with
 * W re-laid out once by pack_weight into panels of NR weight rows. Here the products are bound by
 * arithmetic, not by reading W: each loaded value must feed as many multiply-adds as possible.
 * A panel holds, for each k, its NR weights side by side (two vectors); tile() keeps an MR x NR
 * block of y in MR x 2 vector registers and for each k loads the panel's two vectors once and
 * each input row's x[m, k] once (broadcast), for 2 * MR multiply-adds. The panel (K x NR floats,
 * 72 KB at K = 576) stays in the L1/L2 cache while every block of MR input rows goes over it;
 * rows go at most MC at a time so that the input rows a panel meets stay in the cache too.
 * Packed weights are float32 (bf16 weights widened once, exactly; the inputs are widened and the
 * outputs rounded, as a CPU without bf16 products multiplies them), except where the CPU has
 * bf16 dot products (AVX512-BF16): there a bf16 panel holds pairs (w[n][k], w[n][k+1]) in each
 * 32-bit lane, and one instruction multiplies a pair of weights by a pair of inputs and adds both
 * products to a float32 accumulator (tile_pairs), twice the work of an fp32 multiply-add. */
#define NR (2 * VW)                 /* weight rows per panel: two vector registers */
#if VW == 16
#define MR 12                       /* input rows per tile: 24 accumulators of 32 registers, with the
                                       panel's two vectors (14 rows: no faster; 16 spilled in bf16) */
#else
#define MR 6                        /* 12 accumulators of 16 registers, with 3 left for loads */
#endif
#define MC 64                       /* most input rows a thread takes over every panel before the next rows */
/* AVX512-BF16: one instruction (vdpbf16ps) multiplies 32 bf16 values by 32 others and adds
 * each lane's two products into that lane's float32 sum, twice an fp32 multiply-add's work,
 * from panels of half the bytes. A bf16 model's products and its prefill attention use it; without it bf16 is widened to
 * float32 and multiplied as fp32 is. */
#if defined(__AVX512BF16__) && VW == 16
#define BF16_DOT 1
#else
#define BF16_DOT 0
#endif

int bf16_dot(void) { return BF16_DOT; }

/* The vector path this library was built as (kernel_paths.py PATHS), from the compiler's macros:
 * the loader checks it against the path it asked for. */
const char *kernel_path(void) {
#if BF16_DOT
    return "avx512_bf16";
#elif VW == 16
    return "avx512";
#elif defined(__AVX2__)
    return "avx2";
#else
    return "portable";
#endif
}

/* Are this weight's panels bf16 pairs (else float32)? */
static inline int pairs_for(int K, int bf16) { return BF16_DOT && bf16 && K % 2 == 0; }

/* 32-bit elements of the packed copy of w [N, K] */
int64_t packed_size(int N, int K, int bf16) {
    return (int64_t)((N + NR - 1) / NR) * NR * (pairs_for(K, bf16) ? K / 2 : K);
}

/* The row of w at row j of panel p: p * NR + j, or for a gated weight (its N / 2 gate rows, then
 * its up rows) VW gate rows and the VW up rows of the same outputs (gated_linear); -1 past the end */
static inline int64_t panel_row(int p, int j, int N, int gated) {
    if (!gated) return (int64_t)p * NR + j < N ? (int64_t)p * NR + j : -1;
    int64_t out = (int64_t)p * VW + j % VW;                    /* the output this row is for */
    return out < N / 2 ? (j < VW ? out : N / 2 + out) : -1;
}

/* float32 panels: packed[p][k][j] = w[panel_row(p, j)][k]; bf16 pairs: packed[p][k / 2][j] holds
 * that row's [k] in its low half and [k + 1] in its high half; zero past the last row */
void pack_weight(const void *w, uint32_t *packed, int N, int K, int bf16, int gated) {
    int P = (N + NR - 1) / NR, pairs = pairs_for(K, bf16);
    #pragma omp parallel for schedule(static)
    for (int p = 0; p < P; p++) {
        float row[K];
        for (int j = 0; j < NR; j++) {
            int64_t n = panel_row(p, j, N, gated);
            if (n >= 0) load_f32(w, n * K, K, bf16, row);
            else memset(row, 0, sizeof row);
            if (pairs) {
                for (int k = 0; k < K; k += 2)       /* bf16 values widen and narrow back exactly */
                    packed[((int64_t)p * K / 2 + k / 2) * NR + j] =
                        f32_to_bf16(row[k]) | (uint32_t)f32_to_bf16(row[k + 1]) << 16;
            } else {
                for (int k = 0; k < K; k++) memcpy(&packed[((int64_t)p * K + k) * NR + j], &row[k], 4);
            }
        }
    }
}

/* Ask for the next panel, `step` bytes (one or two lines) a turn of a tile's loop, while this
 * panel's arithmetic runs. Where a product's rows are one chunk (MC: decode steps), each panel is
 * met once, straight from memory, and without asking its first tile would wait for it; with more
 * rows the panels are met again from the cache, the CPU's own prefetcher keeps up, and asking as
 * well only costs. Into the L1 cache, where the next panel's first tile reads it: asked into L2
 * only, whole bf16 decode steps of 8 to 64 rows took 1-6% longer (fp32 the same). */
#define ASK_AHEAD(ahead, end, step)                                                   \
    if (ahead < end) {                                                                \
        __builtin_prefetch(ahead, 0, 3);                                              \
        if (step > 64) __builtin_prefetch(ahead + 64, 0, 3);                          \
        ahead += step;                                                                \
    }

/* Keep v in a register from here on. Where registers are spare (a tile of 1 to 4 rows on AVX2),
 * gcc reads a panel's vector again from the cache for each row's multiply-add: with the rows'
 * broadcasts, 1.5 loads a multiply-add, where a core does two of each a cycle, so the loads set
 * the pace. An empty asm that may change v makes the compiler keep the one load
 * (test_panel_tiles_load_each_panel_vector_once reads the assembly). */
#if defined(__AVX__)
#define IN_REGISTER(v) __asm__("" : "+v"(v))
#else
#define IN_REGISTER(v) ((void)0)
#endif

/* Rounded to the model dtype, as PyTorch rounds each op's result (bf16), or left as it is. */
static inline float as_dtype(float v, int bf16) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; }

/* The MLP's activation on n values: g[j] = silu(g[j]) * u[j], silu rounded to the model dtype
 * before the product as PyTorch rounds it (silu_mul, and a gated product's tiles) */
static inline void silu_times(float *g, const float *u, int n, int bf16) {
    #pragma omp simd
    for (int j = 0; j < n; j++) g[j] = as_dtype(g[j] / (1.f + expf(-g[j])), bf16) * u[j];
}

/* y[0:mr, 0:ncols] of one float32 panel, for mr (a constant once inlined) input rows. gated: the
 * panel's columns are VW gate columns and their VW up columns, and y gets silu(gate) * up; bf16:
 * the model is bf16, multiplied here in float32 (a CPU without bf16 products), its y rounded later */
static inline __attribute__((always_inline))
void tile(const float *x, int K, const float *panel, float *y, int64_t ldy, int ncols, const int mr,
          const char *ahead, const char *ahead_end, int step, int gated, int bf16) {
    vf acc[MR][2];
    for (int m = 0; m < mr; m++) acc[m][0] = acc[m][1] = (vf){0};
    for (int k = 0; k < K; k++) {
        ASK_AHEAD(ahead, ahead_end, step);
        vf b0, b1;
        memcpy(&b0, panel + (int64_t)k * NR, sizeof b0);
        memcpy(&b1, panel + (int64_t)k * NR + VW, sizeof b1);
        IN_REGISTER(b0);
        IN_REGISTER(b1);
        for (int m = 0; m < mr; m++) {
            vf a = (vf){0} + x[(int64_t)m * K + k];
            acc[m][0] += a * b0;
            acc[m][1] += a * b1;
        }
    }
    if (gated) {           /* VW gate columns, then their VW up columns: all rows' at once, after the sums */
        float g[MR * VW], u[MR * VW];
        for (int m = 0; m < mr; m++) {
            memcpy(g + m * VW, &acc[m][0], sizeof acc[m][0]);
            memcpy(u + m * VW, &acc[m][1], sizeof acc[m][1]);
        }
        if (bf16)                                     /* a bf16 model's gate and up, as rounded unfused */
            for (int j = 0; j < mr * VW; j++) g[j] = as_dtype(g[j], 1), u[j] = as_dtype(u[j], 1);
        silu_times(g, u, mr * VW, bf16);
        for (int m = 0; m < mr; m++) memcpy(y + m * ldy, g + m * VW, sizeof(float) * ncols);
        return;
    }
    for (int m = 0; m < mr; m++) {
        float out[NR];
        memcpy(out, &acc[m][0], sizeof acc[m][0]);
        memcpy(out + VW, &acc[m][1], sizeof acc[m][1]);
        memcpy(y + m * ldy, out, sizeof(float) * ncols);
    }
}

#if BF16_DOT
/* The same for bf16 inputs x [mr, K] on a panel of bf16 pairs; y rounded to bf16 */
static inline __attribute__((always_inline))
void tile_pairs(const uint16_t *x, int K, const uint32_t *panel, uint16_t *y, int64_t ldy, int ncols,
                const int mr, const char *ahead, const char *ahead_end, int step, int gated) {
    __m512 acc[MR][2];
    for (int m = 0; m < mr; m++) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 2) {
        ASK_AHEAD(ahead, ahead_end, step);
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(panel + (int64_t)k / 2 * NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(panel + (int64_t)k / 2 * NR + VW);
        for (int m = 0; m < mr; m++) {
            uint32_t pair;                                        /* x[m, k] and x[m, k + 1] */
            memcpy(&pair, x + (int64_t)m * K + k, sizeof pair);
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)pair);
            acc[m][0] = _mm512_dpbf16_ps(acc[m][0], a, b0);
            acc[m][1] = _mm512_dpbf16_ps(acc[m][1], a, b1);
        }
    }
    if (gated) {           /* from the rounded gate and up, as unfused: all rows' at once, after the sums */
        float g[MR * VW], u[MR * VW];
        for (int m = 0; m < mr; m++) {
            __m256bh lo = _mm512_cvtneps_pbh(acc[m][0]), hi = _mm512_cvtneps_pbh(acc[m][1]);
            load_f32(&lo, 0, VW, 1, g + m * VW);
            load_f32(&hi, 0, VW, 1, u + m * VW);
        }
        silu_times(g, u, mr * VW, 1);
        for (int m = 0; m < mr; m++) store_f32(y + m * ldy, 0, ncols, 1, g + m * VW);
        return;
    }
    for (int m = 0; m < mr; m++) {
        uint16_t out[NR];
        __m256bh lo = _mm512_cvtneps_pbh(acc[m][0]), hi = _mm512_cvtneps_pbh(acc[m][1]);
        memcpy(out, &lo, sizeof lo);
        memcpy(out + VW, &hi, sizeof hi);
        memcpy(y + m * ldy, out, sizeof(uint16_t) * ncols);
    }
}
#endif

/* TILE(rows) with rows a constant from 1 to MR, as `mr` says: each inlined copy of a tile keeps
 * exactly its rows' sums in registers */
#if MR == 12
#define WITH_ROWS(mr, TILE)                                                                      \
    ((mr) == 12 ? TILE(12) : (mr) == 11 ? TILE(11) : (mr) == 10 ? TILE(10) : (mr) == 9 ? TILE(9) : \
     (mr) == 8 ? TILE(8) : (mr) == 7 ? TILE(7) : (mr) == 6 ? TILE(6) : (mr) == 5 ? TILE(5) :      \
     (mr) == 4 ? TILE(4) : (mr) == 3 ? TILE(3) : (mr) == 2 ? TILE(2) : TILE(1))
#else
#define WITH_ROWS(mr, TILE)                                                                      \
    ((mr) == 6 ? TILE(6) : (mr) == 5 ? TILE(5) : (mr) == 4 ? TILE(4) : (mr) == 3 ? TILE(3) :   \
     (mr) == 2 ? TILE(2) : TILE(1))
#endif

/* The fewest tiles (of at most MR rows) that hold `rows` rows */
static inline int tiles_for(int rows) { return (rows + MR - 1) / MR; }

/* The rows of the next tile, with `left` rows to go: the rows shared evenly between the fewest
 * tiles that hold them (25 rows: 9, 8 and 8, not 12, 12 and 1). A tile of few rows keeps few sums
 * going, so its loop waits on each multiply-add's latency: it took nearly as long as a full one. */
static inline int tile_rows(int left) {
    int tiles = tiles_for(left);
    return (left + tiles - 1) / tiles;
}

/* One panel's share of y for input rows m0..m1, tile by tile. The tiles share out asking for
 * `next` (the panel after this one, `bytes` long, or NULL). */
static void panel_rows(const void *x, const uint32_t *panel, void *y, int m0, int m1, int n0, int ncols,
                       int N, int K, int bf16, int pairs, const char *next, int64_t bytes, int gated) {
    int64_t ldy = gated ? N / 2 : N;                             /* gated: N / 2 columns, VW a panel */
    int tiles = tiles_for(m1 - m0);
    int turns = pairs ? K / 2 : K;                              /* turns of one tile's loop */
    int64_t share = next ? (bytes + tiles - 1) / tiles : 0;
    int step = share > (int64_t)turns * 64 ? 128 : 64;
    for (int m = m0, i = 0; m < m1; i++) {
        int mr = tile_rows(m1 - m);
        int64_t at_x = (int64_t)m * K, at_y = (int64_t)m * ldy + n0;
        const char *ahead = next ? next + i * share : NULL;
        const char *end = next ? next + ((i + 1) * share < bytes ? (i + 1) * share : bytes) : NULL;
#if BF16_DOT
#define PAIRS(rows) tile_pairs((const uint16_t *)x + at_x, K, panel, (uint16_t *)y + at_y, ldy, ncols, rows, ahead, end, step, gated)
        if (pairs) WITH_ROWS(mr, PAIRS);
        else
#endif
#define FLOATS(rows) tile((const float *)x + at_x, K, (const float *)panel, (float *)y + at_y, ldy, ncols, rows, ahead, end, step, gated, bf16)
        WITH_ROWS(mr, FLOATS);
        m += mr;
    }
}

/* x [M, K] (float32 or bf16) times W [N, K] packed by pack_weight -> y [M, N] in x's dtype;
 * gated: as gated_linear */
static void packed_product(const void *x, const uint32_t *packed, void *y, int M, int N, int K, int bf16,
                           int gated) {
    int pairs = pairs_for(K, bf16), cols = gated ? N / 2 : N, width = gated ? VW : NR;   /* y's columns, a panel's */
    const void *xin = x;
    void *yout = y;
    if (bf16 && !pairs) {                      /* multiplied in float32: widen x, round y at the end */
        float *wide = malloc(sizeof(float) * (size_t)M * K);
        load_f32(x, 0, M * K, 1, wide);
        xin = wide;
        yout = malloc(sizeof(float) * (size_t)M * cols);
    }
    /* The rows in the fewest chunks of at most MC, shared evenly (65 rows: 33 and 32, not 64 and 1).
     * The threads split the (chunk, panel) pairs in equal runs, so equal chunks are equal work;
     * with a short last chunk one thread would multiply most of the rows alone. */
    int P = (N + NR - 1) / NR, chunks = (M + MC - 1) / MC;
    int64_t panel_size = (int64_t)NR * (pairs ? K / 2 : K);
    int streamed = chunks == 1;                  /* each panel met once, from memory (decode steps) */
    #pragma omp parallel
    {
        int asked = -1;                          /* the panel this thread asked for while it worked */
        #pragma omp for collapse(2) schedule(static)
        for (int c = 0; c < chunks; c++)
            for (int p = 0; p < P; p++) {
                int start = (int)((int64_t)c * M / chunks), end = (int)((int64_t)(c + 1) * M / chunks);
                int ncols = cols - p * width < width ? cols - p * width : width;
                const char *here = (const char *)(packed + p * panel_size);
                const char *next = streamed && p + 1 < P ? here + panel_size * 4 : NULL;
                /* A thread's first panel of a decode product: nobody asked for it, and its first
                 * tile, reading a line at a time from memory, took as long as several whole panels.
                 * Asked for all at once, it arrives in the time memory takes to stream it. */
                if (streamed && p != asked)
                    for (int64_t b = 0; b < panel_size * 4; b += 64) __builtin_prefetch(here + b, 0, 3);
                panel_rows(xin, (const uint32_t *)here, yout, start, end, p * width, ncols, N, K, bf16, pairs,
                           next, panel_size * 4, gated);
                asked = p + 1;
            }
    }
    if (bf16 && !pairs) {
        store_f32(y, 0, M * cols, 1, yout);
        free((void *)xin);
        free(yout);
    }
}

void packed_linear(const void *x, const uint32_t *packed, void *y, int M, int N, int K, int bf16) {
    packed_product(x, packed, y, M, N, K, bf16, 0);
}

/* silu(gate) * up [M, N / 2], the MLP's activation, from x [M, K] and W [N, K] (gate rows, then up
 * rows) packed by pack_weight with `gated`: taken as each tile is stored, the same to the bit as
 * packed_linear then silu_mul, without writing and reading back the [M, N] product */
void gated_linear(const void *x, const uint32_t *packed, void *y, int M, int N, int K, int bf16) {
    packed_product(x, packed, y, M, N, K, bf16, 1);
}

/* RMSNorm as the Llama reference computes it: in float32, x / sqrt(mean(x^2) + eps), rounded
 * to the model dtype, then times the weight. With `residual` (else NULL), first x += residual in
 * place, rounded to the model dtype as PyTorch's add is: a layer's residual add and the next
 * norm, one call instead of an add and five small ops. */
void rms_norm(void *x, const void *residual, const void *weight, void *out, int rows, int dim, float eps,
              int bf16) {
    float *w = malloc(sizeof(float) * (size_t)dim);          /* the weight, widened once */
    load_f32(weight, 0, dim, bf16, w);
    #pragma omp parallel for schedule(static) if (rows > 16)
    for (int r = 0; r < rows; r++) {
        float buf[dim];
        load_f32(x, (int64_t)r * dim, dim, bf16, buf);
        if (residual) {
            float add[dim];
            load_f32(residual, (int64_t)r * dim, dim, bf16, add);
            for (int i = 0; i < dim; i++) buf[i] += add[i];
            store_f32(x, (int64_t)r * dim, dim, bf16, buf);
            if (bf16) load_f32(x, (int64_t)r * dim, dim, bf16, buf);     /* the sum as rounded */
        }
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

/* After the q/k/v product of a layer, in one call: rotary position embedding (Llama's "rotate
 * half": x * cos + rotate_half(x) * sin, each product and the sum rounded as PyTorch rounds
 * them) on the query and key heads, the rotated queries into q_out [T, heads, d], and each
 * token's key and value into the paged cache at its slot.
 *   qkv: [T, (heads + 2 * kv_heads) * d]   cos, sin: [positions, d]   positions, slots: [T]
 *   k_cache, v_cache: [slots, kv_heads, d]  one layer of the cache */
void rope_store(const void *qkv, const void *cos, const void *sin, const int64_t *positions,
                const int64_t *slots, void *q_out, void *k_cache, void *v_cache,
                int T, int heads, int kv_heads, int d, int bf16) {
    int width = (heads + 2 * kv_heads) * d, half = d / 2;
    int64_t slot_bytes = (int64_t)kv_heads * d << (2 - bf16);  /* one slot's keys (or values), all heads */
    #pragma omp parallel if (T > 16)
    {
        /* The new slots' lines, asked for (to be written) before any is written: they are in no
         * cache, and written one after another each waited for memory in turn, longer than the
         * arithmetic. The same static share of rows as the loop below: a thread asks for its own. */
        #pragma omp for schedule(static) nowait
        for (int t = 0; t < T; t++)
            for (int64_t b = 0; b < slot_bytes; b += 64) {
                __builtin_prefetch((char *)k_cache + slots[t] * slot_bytes + b, 1, 3);
                __builtin_prefetch((char *)v_cache + slots[t] * slot_bytes + b, 1, 3);
            }
        #pragma omp for schedule(static)
        for (int t = 0; t < T; t++) {
            float c[d], sn[d], x[d], y[d];
            load_f32(cos, positions[t] * d, d, bf16, c);
            load_f32(sin, positions[t] * d, d, bf16, sn);
            for (int h = 0; h < heads + kv_heads; h++) {        /* query heads, then key heads */
                load_f32(qkv, (int64_t)t * width + h * d, d, bf16, x);
                #pragma omp simd
                for (int i = 0; i < half; i++)                     /* rotate_half: (-x2, x1) */
                    y[i] = as_dtype(as_dtype(x[i] * c[i], bf16) + as_dtype(-x[i + half] * sn[i], bf16), bf16);
                #pragma omp simd
                for (int i = half; i < d; i++)
                    y[i] = as_dtype(as_dtype(x[i] * c[i], bf16) + as_dtype(x[i - half] * sn[i], bf16), bf16);
                if (h < heads) store_f32(q_out, ((int64_t)t * heads + h) * d, d, bf16, y);
                else store_f32(k_cache, (slots[t] * kv_heads + h - heads) * d, d, bf16, y);
            }
            for (int h = 0; h < kv_heads; h++) {                 /* values as they are */
                load_f32(qkv, (int64_t)t * width + (heads + kv_heads + h) * d, d, bf16, x);
                store_f32(v_cache, (slots[t] * kv_heads + h) * d, d, bf16, x);
            }
        }
    }
}

/* The MLP's activation: out[r, j] = silu(gate[r, j]) * up[r, j], with gate_up [rows, 2 * n]
 * holding gate then up (one stacked product), silu rounded before the product as PyTorch does. */
void silu_mul(const void *gate_up, void *out, int rows, int n, int bf16) {
    #pragma omp parallel for schedule(static) if (rows > 16)
    for (int r = 0; r < rows; r++) {
        float g[n], u[n];
        load_f32(gate_up, (int64_t)r * 2 * n, n, bf16, g);
        load_f32(gate_up, (int64_t)r * 2 * n + n, n, bf16, u);
        silu_times(g, u, n, bf16);
        store_f32(out, (int64_t)r * n, n, bf16, g);
    }
}

static inline vf vmax(vf a, vf b) {
#if VW == 16
    return (vf)_mm512_max_ps((__m512)a, (__m512)b);
#elif defined(__AVX__)
    return (vf)_mm256_max_ps((__m256)a, (__m256)b);
#else
    for (int i = 0; i < VW; i++) a[i] = b[i] > a[i] ? b[i] : a[i];
    return a;
#endif
}

/* The largest of s[0..n), n >= 1, a vector at a time (by hand: see exp_shifted) */
static inline float max_of(const float *s, int64_t n) {
    float mx = s[0];
    int64_t t = 0;
    vf m = (vf){0} + mx;
    for (; t + VW <= n; t += VW) {
        vf x;
        memcpy(&x, s + t, sizeof x);
        m = vmax(m, x);
    }
    for (int i = 0; i < VW; i++) mx = m[i] > mx ? m[i] : mx;
    for (; t < n; t++) mx = s[t] > mx ? s[t] : mx;
    return mx;
}

/* s[t] = exp(s[t] - mx), in place, for mx at least the largest s; returns their sum. The max
 * (max_of) and the sum are taken a vector at a time by hand: where this is inlined into
 * attend_tile the compiler made both scalar loops, each add waiting on the one before (a third
 * of prefill attention). */
static float exp_below(float *s, int64_t L, float mx) {
    float sum = 0.f;
    int64_t whole = L / VW * VW, t;
    vf acc = {0};
    #pragma omp simd
    for (t = 0; t < L; t++) s[t] = expf(s[t] - mx);
    for (t = 0; t < whole; t += VW) {
        vf x;
        memcpy(&x, s + t, sizeof x);
        acc += x;
    }
    sum = hsum(acc);
    for (; t < L; t++) sum += s[t];
    return sum;
}

/* s[t] = exp(s[t] - the largest s), in place; returns their sum: a softmax before its division. */
static float exp_shifted(float *s, int64_t L) { return exp_below(s, L, max_of(s, L)); }

/* s[0..n) rounded to bf16 in place: attention's weights as PyTorch's flash attention rounds them */
static inline void round_to_bf16(float *s, int64_t n) {
    #pragma omp simd
    for (int64_t t = 0; t < n; t++) s[t] = as_dtype(s[t], 1);
}

/* The weights a query's values are summed with, from its scores s[0..L), in place. float32: the
 * softmax, and returns 1. bf16: each max-shifted exponential rounded to bf16, and returns their
 * sum (of the unrounded ones), to be divided out after the values are summed: what PyTorch's
 * flash attention for the CPU does, the kernel a bf16 model's attention runs there. */
static float value_weights(float *s, int64_t L, int bf16) {
    float sum = exp_shifted(s, L);
    if (bf16) {
        round_to_bf16(s, L);
        return sum;
    }
    float inv = 1.f / sum;
    #pragma omp simd
    for (int64_t t = 0; t < L; t++) s[t] *= inv;
    return 1.f;
}

/* Greedy sampling: out[r] = the index of row r's largest value, the first if several, as
 * torch.argmax gives it (for finite values), at memory speed where torch's reads a [rows, vocab]
 * float32 several times slower. A vector of maxima, then a second pass for the first index that
 * holds it (the row is in the L2 cache by then). */
void argmax_rows(const float *x, int64_t *out, int rows, int n) {
    #pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *row = x + (int64_t)r * n;
        float best = max_of(row, n);
        int j = 0;
        while (row[j] != best) j++;
        out[r] = j;
    }
}

/* Token t of a sequence lies in block table[t / block_size], at row t % block_size: its slot.
 * FOR_SLOTS walks a sequence's tokens from .. L - 1 block by block, giving each token's slot;
 * FOR_EACH_SLOT all L of them. */
static inline int64_t slot_of(const int64_t *table, int64_t t, int block_size) {
    return table[t / block_size] * block_size + t % block_size;
}

#define FOR_SLOTS(table, from, L, block_size, t, slot)                                          \
    for (int64_t t0_ = (from), end_; t0_ < (L); t0_ = end_)                                    \
        for (int64_t t = (end_ = (t0_ / (block_size) + 1) * (block_size), t0_),                  \
                     slot = slot_of(table, t0_, block_size);                                     \
             t < (L) && t < end_; t++, slot++)
#define FOR_EACH_SLOT(table, L, block_size, t, slot) FOR_SLOTS(table, 0, L, block_size, t, slot)

#define MAX_GROUP 4     /* the fast path keeps a group's accumulators in vector registers */
#define MAX_HEADS 4     /* KV heads a decode row's job takes at once (attend_row) */
#define PREFETCH 16     /* slots ahead: 6-12 KB of key and value rows, the time memory takes to answer */
#define STRIP 32        /* floats of a value row accumulated per pass: 4 AVX2 or 2 AVX-512 registers */
/* KV heads whose value sums one pass of attend_row keeps, STRIP floats for each query head of
 * their groups: AVX-512's 32 registers hold all of a row's (SmolLM2: 3 heads x 3 x 2 = 18), while
 * AVX2's 16 hold one head's (3 x 4 = 12). Three heads' 36 would be kept in memory, each
 * multiply-add a load and a store, slower than walking the row's values once a head. */
#if VW == 16
#define VALUE_HEADS MAX_HEADS
#else
#define VALUE_HEADS 1
#endif

/* One query row (a decode token) against KV heads h0 .. h0 + heads - 1 (at most MAX_HEADS), for
 * head_dim a multiple of STRIP and a group of at most MAX_GROUP query heads per KV head (SmolLM2:
 * 64, and 3 for each of its 3 KV heads, all in one job). A slot's keys for all heads are
 * kv_heads * d values side by side, so with all heads the row walks its blocks front to back,
 * one contiguous stretch a block, which memory streams (a head at a time read every third 256
 * bytes, and streamed far worse). Scores: each key row is dotted with every query head of its
 * group. Values: the rows are added into the outputs STRIP floats of VALUE_HEADS heads at a time,
 * so a pass's sums stay in registers (a whole 64-float row for 4 heads would need 32 AVX2
 * registers, twice what there are). The queries stay in the L1 cache. */
static inline __attribute__((always_inline))
void attend_row(const float *qf, const void *k_cache, const void *v_cache, const int64_t *table, int64_t L,
                int kv_heads, int h0, int heads, const int group, int d, int block_size, float scale,
                float *scores, float *outf, int bf16) {
    const int64_t width = (int64_t)kv_heads * d;                /* one slot's row, all heads */
    FOR_EACH_SLOT(table, L, block_size, t, slot) {            /* pass 1: scores */
        if (t + PREFETCH < L) {                               /* ask for a later slot's rows now */
            int64_t ahead = slot_of(table, t + PREFETCH, block_size) * width;
            for (int64_t byte = (int64_t)h0 * d << (2 - bf16); byte < (int64_t)(h0 + heads) * d << (2 - bf16);
                 byte += 64) {
                __builtin_prefetch((const char *)k_cache + (ahead << (2 - bf16)) + byte);
                __builtin_prefetch((const char *)v_cache + (ahead << (2 - bf16)) + byte);
            }
        }
        for (int h = 0; h < heads; h++) {
            vf acc[MAX_GROUP] = {0};
            for (int c = 0; c < d; c += VW) {
                vf k = loadv(k_cache, slot * width + (h0 + h) * d + c, bf16);
                for (int g = 0; g < group; g++) {
                    vf qv;
                    memcpy(&qv, qf + (h * group + g) * d + c, sizeof qv);
                    acc[g] += qv * k;
                }
            }
            for (int g = 0; g < group; g++) scores[(h * group + g) * L + t] = hsum(acc[g]) * scale;
        }
    }
    float sums[MAX_HEADS * MAX_GROUP];                        /* divided out at the end */
    for (int i = 0; i < heads * group; i++) sums[i] = value_weights(scores + i * L, L, bf16);
    for (int h1 = 0; h1 < heads; h1 += VALUE_HEADS) {         /* pass 2: weighted values */
        int nh = heads - h1 < VALUE_HEADS ? heads - h1 : VALUE_HEADS;      /* heads h1 .. h1 + nh - 1 */
        for (int c0 = 0; c0 < d; c0 += STRIP) {
            vf acc[VALUE_HEADS][MAX_GROUP][STRIP / VW] = {{{0}}};   /* a fixed size: sized by `nh`, slower */
            FOR_EACH_SLOT(table, L, block_size, t, slot)
                for (int h = h1; h < h1 + nh; h++)
                    for (int c = 0; c < STRIP / VW; c++) {
                        vf v = loadv(v_cache, slot * width + (h0 + h) * d + c0 + c * VW, bf16);
                        for (int g = 0; g < group; g++) acc[h - h1][g][c] += scores[(h * group + g) * L + t] * v;
                    }
            for (int h = h1; h < h1 + nh; h++)
                for (int g = 0; g < group; g++) {
                    for (int c = 0; c < STRIP / VW; c++) acc[h - h1][g][c] /= sums[h * group + g];
                    memcpy(outf + (h * group + g) * d + c0, acc[h - h1][g], sizeof acc[h - h1][g]);
                }
        }
    }
}

/* attend_row with the group size and the dtype constants, so the compiler keeps exactly the
 * group's sums in registers (with a variable group it kept all MAX_GROUP, and spilled them around
 * each test), and float32's copy has no division by its weights' sum (1): as one loop for both
 * dtypes, that division or a test for it made float32's decode attention 1-5% slower. */
static void attend_fast(const float *qf, const void *k_cache, const void *v_cache, const int64_t *table,
                        int64_t L, int kv_heads, int h0, int heads, int group, int d, int block_size,
                        float scale, float *scores, float *outf, int bf16) {
#define ROW(g, b) attend_row(qf, k_cache, v_cache, table, L, kv_heads, h0, heads, g, d, block_size, scale, scores, outf, b)
#define EITHER(g) (bf16 ? ROW(g, 1) : ROW(g, 0))
    switch (group) {
    case 1: EITHER(1); break;
    case 2: EITHER(2); break;
    case 3: EITHER(3); break;
    default: EITHER(4);
    }
#undef EITHER
#undef ROW
}

/* The same for any head_dim and group, with the row and accumulators in memory (slower). */
static void attend_any(const float *qf, const void *k_cache, const void *v_cache, const int64_t *table,
                       int64_t L, int kv_heads, int h, int group, int d, int block_size, float scale,
                       float *scores, float *row, float *outf, int bf16) {
    FOR_EACH_SLOT(table, L, block_size, t, slot) {
        load_f32(k_cache, (slot * kv_heads + h) * d, d, bf16, row);
        for (int g = 0; g < group; g++) scores[g * L + t] = dot(qf + g * d, row, d) * scale;
    }
    float sums[group];
    for (int g = 0; g < group; g++) sums[g] = value_weights(scores + g * L, L, bf16);
    for (int i = 0; i < group * d; i++) outf[i] = 0.f;
    FOR_EACH_SLOT(table, L, block_size, t, slot) {
        load_f32(v_cache, (slot * kv_heads + h) * d, d, bf16, row);
        for (int g = 0; g < group; g++) {
            float p = scores[g * L + t], *o = outf + g * d;
            #pragma omp simd
            for (int j = 0; j < d; j++) o[j] += p * row[j];
        }
    }
    for (int g = 0; g < group; g++)
        for (int j = 0; j < d; j++) outf[g * d + j] /= sums[g];
}

#define QTILE 64        /* query rows of one prefill chunk per job: they share every key and value row read */
/* Keys whose scores a tile holds at once (attend_tile): SmolLM2's 64 rows x 3 query heads x 256
 * floats are 192 KB, and the block's values 64 KB, which stay in a 512 KB L2 cache together */
#define KEY_BLOCK 256
/* Query vectors worked on together: each key or value load serves QVECS of them, in QVECS x 2
 * accumulators (16 of AVX-512's 32 registers; 12 of AVX2's 16, where 8 vectors would spill: a
 * multiply-add takes 4 cycles and a core starts two a cycle, so 8 sums left none to spare) */
#if VW == 16
#define QVECS 8
#else
#define QVECS 6
#endif

/* Rows b.. of a step that are consecutive tokens of one sequence (a prefill chunk): the same blocks,
 * each row seeing one key more than the row before. How many, up to `limit`. */
static int run_length(const int64_t *block_tables, int max_blocks, const int64_t *context_lens, int B,
                      int b, int block_size, int limit) {
    const int64_t *first = block_tables + (int64_t)b * max_blocks;
    int n = 1;
    while (b + n < B && n < limit && context_lens[b + n] == context_lens[b] + n) {
        int64_t blocks = (context_lens[b + n] + block_size - 1) / block_size;
        if (memcmp(block_tables + (int64_t)(b + n) * max_blocks, first, blocks * sizeof(int64_t))) break;
        n++;
    }
    return n;
}

#if BF16_DOT
/* attend_tile's scores of one key tile (keys t0 .. t0 + 2 VW - 1) for bf16 keys and queries, with
 * the CPU's bf16 dot products (as tile_pairs): the tile is laid out as pairs, kp[c / 2][j] holding
 * key j's dimensions c and c + 1 (a 32-bit copy, no widening), and one instruction multiplies a
 * query's pair by 16 keys' pairs and adds both products, half the instructions of float32's. */
static void pair_scores(const uint32_t *qp, const void *k_cache, const int64_t *table, int64_t t0,
                        int64_t Lmax, int v0, int Qpad, int kv_heads, int h, int d, int block_size,
                        float scale, uint32_t *kp, float *scores, int64_t Lpad) {
    const int half = d / 2;
    for (int j = 0; j < 2 * VW; j++) {
        int64_t t = t0 + j;
        if (t < Lmax) {
            const uint32_t *key = (const uint32_t *)((const uint16_t *)k_cache +
                                                     (slot_of(table, t, block_size) * kv_heads + h) * d);
            for (int c = 0; c < half; c++) kp[c * 2 * VW + j] = key[c];
        } else {
            for (int c = 0; c < half; c++) kp[c * 2 * VW + j] = 0;
        }
    }
    for (int v = v0; v < Qpad; v += QVECS) {
        __m512 acc[QVECS][2];
        for (int u = 0; u < QVECS; u++) acc[u][0] = acc[u][1] = _mm512_setzero_ps();
        for (int c = 0; c < half; c++) {
            __m512bh k0 = (__m512bh)_mm512_loadu_si512(kp + c * 2 * VW);
            __m512bh k1 = (__m512bh)_mm512_loadu_si512(kp + c * 2 * VW + VW);
            for (int u = 0; u < QVECS; u++) {
                __m512bh a = (__m512bh)_mm512_set1_epi32((int)qp[(int64_t)(v + u) * half + c]);
                acc[u][0] = _mm512_dpbf16_ps(acc[u][0], a, k0);
                acc[u][1] = _mm512_dpbf16_ps(acc[u][1], a, k1);
            }
        }
        for (int u = 0; u < QVECS; u++) {
            float *out = scores + (v + u) * Lpad + t0;
            _mm512_storeu_ps(out, _mm512_mul_ps(acc[u][0], _mm512_set1_ps(scale)));
            _mm512_storeu_ps(out + VW, _mm512_mul_ps(acc[u][1], _mm512_set1_ps(scale)));
        }
    }
}

/* attend_tile's weighted values for bf16 values, with the CPU's bf16 dot products: one
 * instruction multiplies two keys' weights by those two keys' values and adds both, half the
 * instructions of float32's. The weights are each query vector's exponentials (exp_shifted),
 * rounded to bf16 here as they are packed, and the sum is divided out at the end: the weights of
 * value_weights, as PyTorch's flash attention for the CPU takes them. The value rows are laid
 * out once for every query vector: vp[t / 2][c] holds slot t's dimension c in its low half and
 * slot t + 1's in its high half (zero past the last key). scores [Qpad][Lpad] (zero where a
 * vector sees no key) are rounded in place, each row's bf16 values packed at its start; sums
 * [Qpad] their divisors. */
static void pair_values(float *scores, const float *sums, int64_t Lpad, int Q, int Qpad, int64_t L0,
                        int64_t Lmax, int group, const void *v_cache, const int64_t *table, int kv_heads,
                        int h, int d, int block_size, uint32_t *vp, float *outf) {
    const int64_t half = (Lmax + 1) / 2;                     /* slot pairs the last row reads */
    /* lo and hi interleave two rows' 16-bit values: (a[0], b[0], a[1], b[1], ...) */
    __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                  39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const uint16_t *values = v_cache;
    for (int64_t tp = 0; tp < half; tp++) {
        int64_t t = 2 * tp;
        const uint16_t *a = values + (slot_of(table, t, block_size) * kv_heads + h) * d;
        const uint16_t *b = t + 1 < Lmax ? values + (slot_of(table, t + 1, block_size) * kv_heads + h) * d : NULL;
        for (int c = 0; c < d; c += 2 * VW) {
            __m512i ra = _mm512_loadu_si512(a + c), rb = b ? _mm512_loadu_si512(b + c) : _mm512_setzero_si512();
            _mm512_storeu_si512(vp + tp * d + c, _mm512_permutex2var_epi16(ra, lo, rb));
            _mm512_storeu_si512(vp + tp * d + c + VW, _mm512_permutex2var_epi16(ra, hi, rb));
        }
    }
    for (int v = 0; v < Qpad; v++) {                          /* the weights as bf16, packed in place */
        float *row = scores + v * Lpad;
        for (int64_t t = 0; t < Lpad; t += 2 * VW) {
            __m512bh pairs = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + t + VW), _mm512_loadu_ps(row + t));
            _mm512_storeu_si512((uint16_t *)row + t, (__m512i)pairs);
        }
    }
    for (int c0 = 0; c0 < d; c0 += 2 * VW)
        for (int v = 0; v < Qpad; v += QVECS) {
            __m512 acc[QVECS][2];
            for (int u = 0; u < QVECS; u++) acc[u][0] = acc[u][1] = _mm512_setzero_ps();
            int64_t L = L0 + (v + QVECS - 1 < Q ? v + QVECS - 1 : Q - 1) / group;   /* the last vector's keys */
            for (int64_t tp = 0; tp < (L + 1) / 2; tp++) {
                __m512bh v0 = (__m512bh)_mm512_loadu_si512(vp + tp * d + c0);
                __m512bh v1 = (__m512bh)_mm512_loadu_si512(vp + tp * d + c0 + VW);
                for (int u = 0; u < QVECS; u++) {
                    __m512bh p = (__m512bh)_mm512_set1_epi32(((const int32_t *)(scores + (v + u) * Lpad))[tp]);
                    acc[u][0] = _mm512_dpbf16_ps(acc[u][0], p, v0);
                    acc[u][1] = _mm512_dpbf16_ps(acc[u][1], p, v1);
                }
            }
            for (int u = 0; u < QVECS; u++) {
                __m512 sum = _mm512_set1_ps(sums[v + u]);
                _mm512_storeu_ps(outf + (int64_t)(v + u) * d + c0, _mm512_div_ps(acc[u][0], sum));
                _mm512_storeu_ps(outf + (int64_t)(v + u) * d + c0 + VW, _mm512_div_ps(acc[u][1], sum));
            }
        }
}
#endif

/* acc[u] += sum over i < n of a[u * lda + i] * panel[i][0 .. 2 VW), for QVECS rows of a: attend_tile's
 * two products, each a broadcast value of a row times a row of a panel 2 VW floats wide, so the sums
 * need no horizontal adds and each panel load serves QVECS rows. */
static inline __attribute__((always_inline))
void rows_times_panel(const float *a, int64_t lda, const float *panel, int64_t n, vf acc[QVECS][2]) {
    for (int64_t i = 0; i < n; i++) {
        vf p0, p1;
        memcpy(&p0, panel + i * 2 * VW, sizeof p0);
        memcpy(&p1, panel + i * 2 * VW + VW, sizeof p1);
        for (int u = 0; u < QVECS; u++) {
            float x = a[u * lda + i];
            acc[u][0] += x * p0;
            acc[u][1] += x * p1;
        }
    }
}

/* attend_tile's float32 scores of one key tile (keys t0 .. t0 + 2 VW - 1): the tile is transposed
 * once (kt[c][j] = key j's dimension c), then QVECS query vectors at a time are multiplied into it,
 * a broadcast query value times a row of kt per dimension, which gives 2 VW scores in two
 * registers and needs no horizontal sums. Vector v's go to scores[v * stride + col ..]. */
static void key_tile_scores(const float *qf, const void *k_cache, const int64_t *table, int64_t t0,
                            int64_t Lmax, int v0, int Qpad, int kv_heads, int h, int d, int block_size,
                            float scale, float *kt, float *row, float *scores, int64_t stride, int64_t col,
                            int bf16) {
    for (int j = 0; j < 2 * VW; j++) {                        /* the key tile, transposed */
        int64_t t = t0 + j;
        if (t < Lmax)
            load_f32(k_cache, (slot_of(table, t, block_size) * kv_heads + h) * d, d, bf16, row);
        for (int c = 0; c < d; c++) kt[c * 2 * VW + j] = t < Lmax ? row[c] : 0.f;
    }
    for (int v = v0; v < Qpad; v += QVECS) {
        vf acc[QVECS][2] = {{0}};
        rows_times_panel(qf + (int64_t)v * d, d, kt, d, acc);
        for (int u = 0; u < QVECS; u++) {
            acc[u][0] *= scale;
            acc[u][1] *= scale;
            memcpy(scores + (v + u) * stride + col, acc[u], sizeof acc[u]);
        }
    }
}

/* R consecutive query rows of one sequence (row i sees L0 + i keys) against one KV head, for
 * head_dim a multiple of 2 VW and a group of at most MAX_GROUP. One row at a time (attend_fast)
 * each row reads all its keys and values again; here a tile of 2 VW keys is read once for every
 * row, and the scores come out as a small matrix product (key_tile_scores, or pair_scores on bf16
 * dot products). The keys go KEY_BLOCK at a time, with the softmax taken online as flash attention
 * takes it: each query vector keeps the largest score so far and the sum of its exponentials; a
 * block's scores are exponentiated against that largest, and where a block raises it the sums
 * and the values added so far are scaled down by exp(old largest - new). So a block's scores
 * ([Qpad][KEY_BLOCK] floats) stay in the L2 cache between the passes that write and read them,
 * where a whole row's for 2,048 keys (1.5 MB for 64 rows of SmolLM2's 3 query heads) did not.
 *   values: QVECS query vectors at a time walk the block's value rows, 2 VW floats of a row per
 *           pass, so each value load serves QVECS vectors and their sums stay in registers.
 * bf16 values on bf16 dot products (pair_values) are weighed over whole rows, at one largest
 * score per row, in scores [Qpad][Lpad].
 * Query vector v is row v / group, head v % group: qf, outf [R * group][d] and scores, each with
 * room for a QVECS group's padding vectors (zeros, never stored). */
static void attend_tile(float *qf, const void *k_cache, const void *v_cache, const int64_t *table,
                        int64_t L0, int R, int kv_heads, int h, int group, int d, int block_size, float scale,
                        float *kt, float *row, float *vt, float *scores, int64_t Lpad, float *outf, int bf16) {
    const int Q = R * group, Qpad = (Q + QVECS - 1) / QVECS * QVECS;   /* whole QVECS groups: no tests in loops */
    const int64_t Lmax = L0 + R - 1;                          /* keys the last row sees */
    memset(qf + (int64_t)Q * d, 0, sizeof(float) * (size_t)(Qpad - Q) * d);
#if BF16_DOT
    if (bf16) {
        uint32_t qp[Qpad * d / 2];                            /* the queries as bf16 pairs (exact): */
        store_f32(qp, 0, Qpad * d, 1, qf);                    /* in order, two at a time make a pair */
        for (int64_t t0 = 0; t0 < Lmax; t0 += 2 * VW) {
            /* row i sees keys t < L0 + i: the rows before `first` see none of this tile */
            int first = t0 >= L0 ? (int)(t0 - L0 + 1) : 0, v0 = first * group / QVECS * QVECS;
            pair_scores(qp, k_cache, table, t0, Lmax, v0, Qpad, kv_heads, h, d, block_size, scale,
                        (uint32_t *)kt, scores, Lpad);
        }
        float sums[Qpad];                                     /* divided out at the end */
        for (int v = 0; v < Qpad; v++) {                      /* each row over its own keys */
            int64_t L = v < Q ? L0 + v / group : 0;           /* (the padding vectors: none) */
            float *s = scores + v * Lpad;                     /* (pair_values rounds as it packs) */
            sums[v] = L ? exp_shifted(s, L) : 1.f;
            for (int64_t t = L; t < Lpad; t++) s[t] = 0.f;    /* keys it does not see */
        }
        pair_values(scores, sums, Lpad, Q, Qpad, L0, Lmax, group, v_cache, table, kv_heads, h, d,
                    block_size, (uint32_t *)vt, outf);
        return;
    }
#endif
    float largest[Qpad], sums[Qpad], rescale[Qpad];
    for (int v = 0; v < Qpad; v++) sums[v] = 0.f;             /* 0: no key seen yet */
    memset(outf, 0, sizeof(float) * (size_t)Qpad * d);
    for (int64_t k0 = 0; k0 < Lmax; k0 += KEY_BLOCK) {
        const int64_t k1 = k0 + KEY_BLOCK < Lmax ? k0 + KEY_BLOCK : Lmax;
        /* row i sees keys t < L0 + i: the vectors before v0 see none of this block */
        int first = k0 >= L0 ? (int)(k0 - L0 + 1) : 0, v0 = first * group / QVECS * QVECS;
        for (int64_t t0 = k0; t0 < k1; t0 += 2 * VW)
            key_tile_scores(qf, k_cache, table, t0, Lmax, v0, Qpad, kv_heads, h, d, block_size, scale,
                            kt, row, scores, KEY_BLOCK, t0 - k0, bf16);
        for (int v = v0; v < Qpad; v++) {                     /* each vector over its own keys */
            int64_t L = v < Q ? L0 + v / group : 0;           /* (the padding vectors: none) */
            int64_t n = (L < k1 ? L : k1) - k0;               /* its keys in this block */
            float *s = scores + (int64_t)v * KEY_BLOCK;
            rescale[v] = 1.f;
            if (n > 0) {
                float top = max_of(s, n);
                if (sums[v] > 0.f) {                          /* keys seen before: their largest counts */
                    top = largest[v] > top ? largest[v] : top;
                    rescale[v] = expf(largest[v] - top);
                }
                largest[v] = top;
                sums[v] = sums[v] * rescale[v] + exp_below(s, n, top);
                if (bf16) round_to_bf16(s, n);                /* see value_weights */
            }
            for (int64_t t = n > 0 ? n : 0; t < k1 - k0; t++) s[t] = 0.f;   /* keys it does not see */
        }
        /* the block's value rows as float32 strips of 2 VW, vt[c0 / (2 VW)][t - k0][..]: each pass
         * below reads one strip front to back (16 KB for 256 keys of AVX2), from the L1 cache
         * after the first vectors' pass, where the rows in the cache are a slot's heads apart */
        FOR_SLOTS(table, k0, k1, block_size, t, slot)
            for (int c0 = 0; c0 < d; c0 += 2 * VW)
                load_f32(v_cache, (slot * kv_heads + h) * d + c0, 2 * VW, bf16,
                         vt + (c0 * KEY_BLOCK + (t - k0) * 2 * VW));
        for (int c0 = 0; c0 < d; c0 += 2 * VW)
            for (int v = v0; v < Qpad; v += QVECS) {
                vf acc[QVECS][2];
                int64_t L = L0 + (v + QVECS - 1 < Q ? v + QVECS - 1 : Q - 1) / group;   /* the last vector's keys */
                const float *strip = vt + c0 * KEY_BLOCK;
                for (int u = 0; u < QVECS; u++) {             /* the sums so far, scaled */
                    memcpy(acc[u], outf + (int64_t)(v + u) * d + c0, sizeof acc[u]);
                    acc[u][0] *= rescale[v + u];
                    acc[u][1] *= rescale[v + u];
                }
                rows_times_panel(scores + (int64_t)v * KEY_BLOCK, KEY_BLOCK, strip, (L < k1 ? L : k1) - k0, acc);
                for (int u = 0; u < QVECS; u++) memcpy(outf + (int64_t)(v + u) * d + c0, acc[u], sizeof acc[u]);
            }
    }
    for (int v = 0; v < Q; v++) {
        float inv = 1.f / sums[v];
        for (int c = 0; c < d; c++) outf[(int64_t)v * d + c] *= inv;
    }
}

/* Attention over a paged KV cache, one query token per row b.
 *   q, out:           [B, kv_heads * group, d]
 *   k_cache, v_cache: [num_slots, kv_heads, d]  one layer of the cache (this step's keys included)
 *   block_tables:     [B, max_blocks]  the block table of row b's sequence: key t of it is at slot
 *                     block_tables[b][t / block_size] * block_size + t % block_size
 *   context_lens:     [B]  how many keys row b sees: its position + 1
 * Query head j uses key/value head j / group (grouped-query attention), so one pass over a
 * KV head's keys serves its whole group of query heads. Threads share out the jobs: a tile of a
 * prefill chunk's rows with one KV head, a decode row with up to MAX_HEADS of them (attend_fast),
 * or off the fast path one row with one KV head. */
void paged_attention(const void *q, const void *k_cache, const void *v_cache,
                            const int64_t *block_tables, int max_blocks, const int64_t *context_lens,
                            int B, int kv_heads, int group, int d, int block_size, float scale,
                            void *out, int bf16) {
    int64_t longest = 1;
    for (int b = 0; b < B; b++) if (context_lens[b] > longest) longest = context_lens[b];
    int fast = d % STRIP == 0 && group <= MAX_GROUP;   /* STRIP is a multiple of attend_tile's 2 VW */
    /* The jobs, found once, here: each is rows b.. of a run (a tile of up to QTILE rows of one
     * prefill chunk, or one row) and its KV heads h.. */
    struct job { int b, rows, h, heads; } *jobs = malloc(sizeof(struct job) * (size_t)B * kv_heads);
    int n_jobs = 0, tiles = 0;                           /* tiles: runs of a prefill chunk's rows */
    /* a decode row's heads per job: up to MAX_HEADS, or one where there are fewer rows than threads */
    int per_row = B < omp_get_max_threads() ? 1 : MAX_HEADS;
    for (int b = 0, rows; b < B; b += rows) {
        rows = fast ? run_length(block_tables, max_blocks, context_lens, B, b, block_size, QTILE) : 1;
        if (fast && rows == 1)
            for (int h = 0; h < kv_heads; h += per_row)
                jobs[n_jobs++] = (struct job){b, 1, h, kv_heads - h < per_row ? kv_heads - h : per_row};
        else {
            for (int h = 0; h < kv_heads; h++) jobs[n_jobs++] = (struct job){b, rows, h, 1};
            tiles += rows > 1;
        }
    }
    int64_t Lpad = (longest + 2 * VW - 1) / (2 * VW) * (2 * VW);     /* whole key tiles (attend_tile) */
    #pragma omp parallel
    {
        size_t vectors = (size_t)QTILE * group + QVECS;         /* a tile's query vectors, and padding */
        /* [vectors, Lpad]: a decode row's scores over its keys (attend_fast, attend_any) and
         * pair_values' whole rows; a key block's [vectors, KEY_BLOCK] where that is more */
        float *scores = malloc(sizeof(float) * vectors * (Lpad > KEY_BLOCK ? Lpad : KEY_BLOCK));
        float *qf = malloc(sizeof(float) * vectors * d);
        float *outf = malloc(sizeof(float) * vectors * d);
        float *row = malloc(sizeof(float) * (size_t)d);
        float *kt = malloc(sizeof(float) * (size_t)d * 2 * VW);
        /* attend_tile's value rows laid out for its values pass, where there are tiles to attend:
         * pair_values' pairs of slots, or a key block's strips of float32 */
        size_t laid_out = bf16 && BF16_DOT ? (size_t)(Lpad / 2) * d : (size_t)KEY_BLOCK * d;
        float *vt = tiles ? malloc(sizeof(float) * laid_out) : NULL;
        #pragma omp for schedule(dynamic)
        for (int j = 0; j < n_jobs; j++) {
            int b = jobs[j].b, R = jobs[j].rows, h = jobs[j].h, n = jobs[j].heads * group * d;  /* n: a row's floats */
            const int64_t *table = block_tables + (int64_t)b * max_blocks;
            for (int i = 0; i < R; i++)
                load_f32(q, ((int64_t)(b + i) * kv_heads + h) * group * d, n, bf16, qf + i * n);
            if (R > 1)
                attend_tile(qf, k_cache, v_cache, table, context_lens[b], R, kv_heads, h, group, d, block_size,
                            scale, kt, row, vt, scores, Lpad, outf, bf16);
            else if (fast)
                attend_fast(qf, k_cache, v_cache, table, context_lens[b], kv_heads, h, jobs[j].heads, group, d,
                            block_size, scale, scores, outf, bf16);
            else
                attend_any(qf, k_cache, v_cache, table, context_lens[b], kv_heads, h, group, d, block_size,
                           scale, scores, row, outf, bf16);
            for (int i = 0; i < R; i++)
                store_f32(out, ((int64_t)(b + i) * kv_heads + h) * group * d, n, bf16, outf + i * n);
        }
        free(scores);
        free(qf);
        free(outf);
        free(row);
        free(kt);
        free(vt);
    }
    free(jobs);
}

/* The route Linear takes for a product in layers_in_one_call: the few-rows kernel up to `few`
 * rows or where the weight has no panels, else its panels */
static inline int by_few_rows(int T, int few, const uint32_t *panels) { return T <= few || !panels; }

/* One of layers_in_one_call's products, by that route */
static void product(const void *x, const void *w, const uint32_t *panels, void *y, int T, int N, int K,
                    int few, int bf16) {
    if (by_few_rows(T, few, panels)) few_rows_linear(x, w, y, T, N, K, bf16);
    else packed_linear(x, panels, y, T, N, K, bf16);
}

/* Every layer of a step, in one call: the same kernels, in the same order and with the same
 * roundings, as the runner's loop calls them one by one, so the result is the same to the bit.
 * With a row or two each kernel takes microseconds, and what the loop spent between them (Python,
 * ctypes, a new tensor for every output) was as long again; at 64 rows it is still about 3 ms a
 * step, and a prefill step of 2,048 tokens ran 4% faster here. Here that is paid once a step
 * instead of eight times a layer. Returns 0, or -1 where its buffers could not be allocated
 * (nothing computed).
 *   x:     [T, hidden] the residual stream, updated in place
 *   delta: [T, hidden] out: the last layer's MLP output (the final norm adds it to x)
 *   layer weights: one pointer per layer for each of the two norms and the four products
 *   (qkv [(heads + 2 kv_heads) d, hidden], o [hidden, heads d], gate_up [2 inter, hidden],
 *   down [hidden, inter]), and for each product its panels (pack_weight) or NULL: above `few`
 *   rows a product with panels goes through packed_linear, as Linear's does; the caches are
 *   [layers, slots, kv_heads, d], `layer_stride` elements apart; the rest as rope_store and
 *   paged_attention take them. */
int layers_in_one_call(void *x, void *delta, int T, int hidden, int inter, int n_layers,
                        void *const *norm1, void *const *qkv_w, void *const *o_w,
                        void *const *norm2, void *const *gate_up_w, void *const *down_w,
                        uint32_t *const *qkv_p, uint32_t *const *o_p, uint32_t *const *gate_up_p,
                        uint32_t *const *down_p, int few,
                        const void *cos, const void *sin, const int64_t *positions, const int64_t *slots,
                        void *k_cache, void *v_cache, int64_t layer_stride,
                        const int64_t *row_tables, int max_blocks, const int64_t *row_lens,
                        int heads, int kv_heads, int d, int block_size, float scale, float eps, int bf16) {
    size_t elem = bf16 ? 2 : 4;
    int qkv_n = (heads + 2 * kv_heads) * d, attn_n = heads * d;
    char *h = malloc(elem * (size_t)T * hidden), *qkv = malloc(elem * (size_t)T * qkv_n);
    char *q = malloc(elem * (size_t)T * attn_n), *attn = malloc(elem * (size_t)T * attn_n);
    char *proj = malloc(elem * (size_t)T * hidden), *gate_up = NULL;   /* the unfused route's product */
    char *act = malloc(elem * (size_t)T * inter);
    int unfused = 0;                                       /* a gate/up product not gated_linear's */
    for (int i = 0; i < n_layers; i++) unfused |= by_few_rows(T, few, gate_up_p[i]);
    if (unfused) gate_up = malloc(elem * (size_t)T * 2 * inter);
    if (!h || !qkv || !q || !attn || !proj || !act || (unfused && !gate_up)) {
        free(h); free(qkv); free(q); free(attn); free(proj); free(gate_up); free(act);
        return -1;
    }
    for (int i = 0; i < n_layers; i++) {
        char *kc = (char *)k_cache + elem * i * layer_stride, *vc = (char *)v_cache + elem * i * layer_stride;
        rms_norm(x, i == 0 ? NULL : delta, norm1[i], h, T, hidden, eps, bf16);
        product(h, qkv_w[i], qkv_p[i], qkv, T, qkv_n, hidden, few, bf16);
        rope_store(qkv, cos, sin, positions, slots, q, kc, vc, T, heads, kv_heads, d, bf16);
        paged_attention(q, kc, vc, row_tables, max_blocks, row_lens, T, kv_heads, heads / kv_heads, d,
                        block_size, scale, attn, bf16);
        product(attn, o_w[i], o_p[i], proj, T, hidden, attn_n, few, bf16);
        rms_norm(x, proj, norm2[i], h, T, hidden, eps, bf16);
        if (by_few_rows(T, few, gate_up_p[i])) {               /* as Linear: see gated_linear */
            few_rows_linear(h, gate_up_w[i], gate_up, T, 2 * inter, hidden, bf16);
            silu_mul(gate_up, act, T, inter, bf16);
        } else {
            gated_linear(h, gate_up_p[i], act, T, 2 * inter, hidden, bf16);
        }
        product(act, down_w[i], down_p[i], delta, T, hidden, inter, few, bf16);
    }
    free(h); free(qkv); free(q); free(attn); free(proj); free(gate_up); free(act);
    return 0;
}
