/* qmatmul.c: matrix products over GGUF-quantized weights for cera_web's CPU path, built to WebAssembly (wasm32 +
 * simd128) by cera_web/tools/build_kernels.py and run by cera_web/cpu_kernels/__init__.py (the browser's
 * WebAssembly in Pyodide, wasmtime natively).
 *
 *   qmatmul(type, w, rows, cols, x, T, y, scratch)      y[t][r] = sum_c W[r][c] * x[t][c]
 *     W        [rows, cols] of GGML type `type`, its bytes exactly as in the GGUF file: row r starts at
 *              w + r * row_bytes, row_bytes = cols / block_elems * block_bytes
 *     x        [T, cols] float32, row-major
 *     y        [T, rows] float32, row-major (written; nothing else outside scratch is written)
 *     scratch  qmatmul_scratch_bytes(cols, T) bytes: x quantized to 16 bits (below)
 *   cols is a multiple of the type's block (32, or 256 for the K types); rows and T are anything >= 1.
 *
 *   Types: F32 (0), Q4_0 (2), Q4_1 (3), Q5_0 (6), Q5_1 (7), Q8_0 (8), Q4_K (12), Q6_K (14).
 *   Quantized types: each row of x is quantized first in blocks of 32: the block's scale d = max|x| / 32767,
 *   q = round-half-even(x * (1 / d)) in [-32767, 32767] (int16), and s = d * sum(q). Each weight block's integers
 *   (int8 lanes) are widened to int16 and multiplied with the block's q by i32x4.dot_i16x8_s into int32 lanes; the
 *   block's float scales are applied once per 16 or 32 products. 16-bit rather than llama.cpp's 8-bit activations:
 *   the same instruction count (a widen of the weights replaces i16x8.extmul + extadd), 256x finer activations
 *   (SmolLM2's activations have outliers hundreds of times the rest of their block). Every partial sum fits int32
 *   (32 x 128 x 32767 < 2^31). F32 weights take float32 products of x itself.
 *
 *   qmatmul_init() fills the f16 -> f32 table (256 KiB); call it once after instantiating.
 */
#include <stddef.h>
#include <stdint.h>
#include <wasm_simd128.h>

#define QK 32

enum { T_F32 = 0, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8, T_Q4_K = 12, T_Q6_K = 14 };

static float f16_table[65536];

static float f16_to_f32(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    union { uint32_t u; float f; } v;
    if (exp == 0) {                               /* zero or subnormal: man * 2^-24 */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    bits = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
    v.u = bits;
    return v.f;
}

__attribute__((export_name("qmatmul_init"))) void qmatmul_init(void) {
    for (uint32_t h = 0; h < 65536; h++) f16_table[h] = f16_to_f32(h);
}

static inline float f16(const uint8_t *p) { return f16_table[p[0] | (p[1] << 8)]; }

static inline float hsum(v128_t v) {
    return wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1) + wasm_f32x4_extract_lane(v, 2)
         + wasm_f32x4_extract_lane(v, 3);
}

/* 16 int8 weights (lanes) . 16 int16 activations at a -> 4 int32 partial sums */
static inline v128_t dot16(v128_t w, const int16_t *a) {
    return wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(w), wasm_v128_load(a)),
                          wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(w), wasm_v128_load(a + 8)));
}

__attribute__((export_name("qmatmul_scratch_bytes"))) uint32_t qmatmul_scratch_bytes(uint32_t cols, uint32_t T) {
    return 2 * T * cols + 2 * 4 * T * (cols / QK) + 64;
}

/* x [T, cols] -> xq [T, cols] int16, xd [T, cols/32] scales, xs [T, cols/32] scale * sum(q) */
static void quantize_x(const float *x, uint32_t T, uint32_t cols, int16_t *xq, float *xd, float *xs) {
    uint32_t nb = cols / QK;
    for (uint32_t i = 0; i < T * nb; i++) {
        const float *v = x + (size_t)i * QK;
        v128_t m = wasm_f32x4_splat(0.0f);
        for (int k = 0; k < QK; k += 4) m = wasm_f32x4_max(m, wasm_f32x4_abs(wasm_v128_load(v + k)));
        float amax = wasm_f32x4_extract_lane(m, 0);
        for (int k = 1; k < 4; k++) {
            float e = k == 1 ? wasm_f32x4_extract_lane(m, 1) : k == 2 ? wasm_f32x4_extract_lane(m, 2)
                                                                      : wasm_f32x4_extract_lane(m, 3);
            amax = e > amax ? e : amax;
        }
        float d = amax / 32767.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        v128_t vid = wasm_f32x4_splat(id), total = wasm_i32x4_splat(0);
        for (int k = 0; k < QK; k += 8) {
            v128_t q0 = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(v + k), vid)));
            v128_t q1 = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(v + k + 4), vid)));
            total = wasm_i32x4_add(total, wasm_i32x4_add(q0, q1));
            wasm_v128_store(xq + (size_t)i * QK + k, wasm_i16x8_narrow_i32x4(q0, q1));
        }
        int32_t sum = wasm_i32x4_extract_lane(total, 0) + wasm_i32x4_extract_lane(total, 1)
                    + wasm_i32x4_extract_lane(total, 2) + wasm_i32x4_extract_lane(total, 3);
        xd[i] = d;
        xs[i] = d * (float)sum;
    }
}

#define TT 4            /* tokens whose sums stay in registers while a weight block is decoded once for them */

/* Q4_0 (18 bytes: f16 d, 16 bytes of nibbles; w = d * (q - 8)) and Q4_1 (20 bytes: f16 d, f16 m, nibbles;
 * w = d * q + m). Element i < 16 is the low nibble of byte i, element i + 16 its high nibble.
 * One row against N (1..TT) tokens t0..t0+N-1: N is a constant in each copy, so the sums stay in registers. */
static inline __attribute__((always_inline)) void row_q4(int has_min, const uint8_t *row, uint32_t nb, uint32_t N,
        uint32_t t0, const int16_t *xq, const float *xd, const float *xs, float *y, uint32_t rows, uint32_t r) {
    v128_t mask = wasm_i8x16_splat(0x0f), eight = wasm_i8x16_splat(8);
    uint32_t bb = has_min ? 20 : 18;
    v128_t acc[TT];
    float macc[TT];
    for (uint32_t j = 0; j < N; j++) { acc[j] = wasm_f32x4_splat(0.0f); macc[j] = 0.0f; }
    for (uint32_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * bb;
        float dw = f16(blk), mw = has_min ? f16(blk + 2) : 0.0f;
        v128_t qs = wasm_v128_load(blk + (has_min ? 4 : 2));
        v128_t lo = wasm_v128_and(qs, mask), hi = wasm_u8x16_shr(qs, 4);
        if (!has_min) { lo = wasm_i8x16_sub(lo, eight); hi = wasm_i8x16_sub(hi, eight); }
        for (uint32_t j = 0; j < N; j++) {
            uint32_t xi = (t0 + j) * nb + b;
            const int16_t *a = xq + (size_t)xi * QK;
            v128_t s = wasm_i32x4_add(dot16(lo, a), dot16(hi, a + 16));
            acc[j] = wasm_f32x4_add(acc[j], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s), wasm_f32x4_splat(dw * xd[xi])));
            if (has_min) macc[j] += mw * xs[xi];
        }
    }
    for (uint32_t j = 0; j < N; j++) y[(size_t)(t0 + j) * rows + r] = hsum(acc[j]) + macc[j];
}

static inline __attribute__((always_inline)) void mm_q4(int has_min, const uint8_t *w, uint32_t rows, uint32_t cols,
        uint32_t T, const int16_t *xq, const float *xd, const float *xs, float *y) {
    uint32_t nb = cols / QK, rb = nb * (has_min ? 20 : 18);
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        uint32_t t0 = 0;
        for (; t0 + TT <= T; t0 += TT) row_q4(has_min, row, nb, TT, t0, xq, xd, xs, y, rows, r);
        switch (T - t0) {
        case 1: row_q4(has_min, row, nb, 1, t0, xq, xd, xs, y, rows, r); break;
        case 2: row_q4(has_min, row, nb, 2, t0, xq, xd, xs, y, rows, r); break;
        case 3: row_q4(has_min, row, nb, 3, t0, xq, xd, xs, y, rows, r); break;
        }
    }
}

static void mm_q4_0(const uint8_t *w, uint32_t rows, uint32_t cols, uint32_t T, const int16_t *xq, const float *xd,
                    const float *xs, float *y) { mm_q4(0, w, rows, cols, T, xq, xd, xs, y); }
static void mm_q4_1(const uint8_t *w, uint32_t rows, uint32_t cols, uint32_t T, const int16_t *xq, const float *xd,
                    const float *xs, float *y) { mm_q4(1, w, rows, cols, T, xq, xd, xs, y); }

/* Q5_0 (22 bytes: f16 d, 4 bytes qh, 16 bytes of nibbles; w = d * (q - 16)) and Q5_1 (24 bytes: f16 d, f16 m, qh,
 * nibbles; w = d * q + m). Element i < 16: low nibble of byte i plus bit i of qh as its 5th bit; element i + 16: the
 * high nibble plus bit i + 16. */
static inline v128_t fifth_bits(uint32_t h) {      /* lane i: 0x10 where bit i of the 16-bit h is set */
    v128_t v = wasm_i8x16_swizzle(wasm_i16x8_splat((int16_t)h), wasm_i8x16_make(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    v128_t m = wasm_i8x16_make(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    return wasm_v128_and(wasm_i8x16_eq(wasm_v128_and(v, m), m), wasm_i8x16_splat(0x10));
}

static inline __attribute__((always_inline)) void row_q5(int has_min, const uint8_t *row, uint32_t nb, uint32_t N,
        uint32_t t0, const int16_t *xq, const float *xd, const float *xs, float *y, uint32_t rows, uint32_t r) {
    v128_t mask = wasm_i8x16_splat(0x0f), sixteen = wasm_i8x16_splat(16);
    uint32_t bb = has_min ? 24 : 22;
    v128_t acc[TT];
    float macc[TT];
    for (uint32_t j = 0; j < N; j++) { acc[j] = wasm_f32x4_splat(0.0f); macc[j] = 0.0f; }
    for (uint32_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * bb, *ph = blk + (has_min ? 4 : 2);
        float dw = f16(blk), mw = has_min ? f16(blk + 2) : 0.0f;
        uint32_t qh = ph[0] | (ph[1] << 8) | (ph[2] << 16) | ((uint32_t)ph[3] << 24);
        v128_t qs = wasm_v128_load(ph + 4);
        v128_t lo = wasm_v128_or(wasm_v128_and(qs, mask), fifth_bits(qh & 0xffff));
        v128_t hi = wasm_v128_or(wasm_u8x16_shr(qs, 4), fifth_bits(qh >> 16));
        if (!has_min) { lo = wasm_i8x16_sub(lo, sixteen); hi = wasm_i8x16_sub(hi, sixteen); }
        for (uint32_t j = 0; j < N; j++) {
            uint32_t xi = (t0 + j) * nb + b;
            const int16_t *a = xq + (size_t)xi * QK;
            v128_t s = wasm_i32x4_add(dot16(lo, a), dot16(hi, a + 16));
            acc[j] = wasm_f32x4_add(acc[j], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s), wasm_f32x4_splat(dw * xd[xi])));
            if (has_min) macc[j] += mw * xs[xi];
        }
    }
    for (uint32_t j = 0; j < N; j++) y[(size_t)(t0 + j) * rows + r] = hsum(acc[j]) + macc[j];
}

static inline __attribute__((always_inline)) void mm_q5(int has_min, const uint8_t *w, uint32_t rows, uint32_t cols,
        uint32_t T, const int16_t *xq, const float *xd, const float *xs, float *y) {
    uint32_t nb = cols / QK, rb = nb * (has_min ? 24 : 22);
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        uint32_t t0 = 0;
        for (; t0 + TT <= T; t0 += TT) row_q5(has_min, row, nb, TT, t0, xq, xd, xs, y, rows, r);
        switch (T - t0) {
        case 1: row_q5(has_min, row, nb, 1, t0, xq, xd, xs, y, rows, r); break;
        case 2: row_q5(has_min, row, nb, 2, t0, xq, xd, xs, y, rows, r); break;
        case 3: row_q5(has_min, row, nb, 3, t0, xq, xd, xs, y, rows, r); break;
        }
    }
}

static void mm_q5_0(const uint8_t *w, uint32_t rows, uint32_t cols, uint32_t T, const int16_t *xq, const float *xd,
                    const float *xs, float *y) { mm_q5(0, w, rows, cols, T, xq, xd, xs, y); }
static void mm_q5_1(const uint8_t *w, uint32_t rows, uint32_t cols, uint32_t T, const int16_t *xq, const float *xd,
                    const float *xs, float *y) { mm_q5(1, w, rows, cols, T, xq, xd, xs, y); }

/* Q8_0 (34 bytes: f16 d, 32 int8; w = d * q); one row against N tokens as row_q4 */
static inline __attribute__((always_inline)) void row_q8_0(const uint8_t *row, uint32_t nb, uint32_t N, uint32_t t0,
        const int16_t *xq, const float *xd, float *y, uint32_t rows, uint32_t r) {
    v128_t acc[TT];
    for (uint32_t j = 0; j < N; j++) acc[j] = wasm_f32x4_splat(0.0f);
    for (uint32_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * 34;
        float dw = f16(blk);
        v128_t w0 = wasm_v128_load(blk + 2), w1 = wasm_v128_load(blk + 18);
        for (uint32_t j = 0; j < N; j++) {
            uint32_t xi = (t0 + j) * nb + b;
            const int16_t *a = xq + (size_t)xi * QK;
            v128_t s = wasm_i32x4_add(dot16(w0, a), dot16(w1, a + 16));
            acc[j] = wasm_f32x4_add(acc[j], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s), wasm_f32x4_splat(dw * xd[xi])));
        }
    }
    for (uint32_t j = 0; j < N; j++) y[(size_t)(t0 + j) * rows + r] = hsum(acc[j]);
}

static void mm_q8_0(const uint8_t *w, uint32_t rows, uint32_t cols, uint32_t T,
                    const int16_t *xq, const float *xd, float *y) {
    uint32_t nb = cols / QK;
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * nb * 34;
        uint32_t t0 = 0;
        for (; t0 + TT <= T; t0 += TT) row_q8_0(row, nb, TT, t0, xq, xd, y, rows, r);
        switch (T - t0) {
        case 1: row_q8_0(row, nb, 1, t0, xq, xd, y, rows, r); break;
        case 2: row_q8_0(row, nb, 2, t0, xq, xd, y, rows, r); break;
        case 3: row_q8_0(row, nb, 3, t0, xq, xd, y, rows, r); break;
        }
    }
}

/* Q4_K (144 bytes a 256-element super-block: f16 d, f16 dmin, 12 bytes of packed 6-bit scales and mins, 128 bytes
 * of nibbles). Element 64j + 32h + l (j < 4, h < 2, l < 32) is nibble h of qs[32j + l], in sub-block 2j + h:
 * w = d * sc[2j + h] * q - dmin * mn[2j + h]. */
static void mm_q4_k(const uint8_t *w, uint32_t rows, uint32_t cols, uint32_t T,
                    const int16_t *xq, const float *xd, const float *xs, float *y) {
    uint32_t nb = cols / 256;
    v128_t mask = wasm_i8x16_splat(0x0f);
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * nb * 144;
        for (uint32_t t0 = 0; t0 < T; t0 += TT) {
            uint32_t tn = T - t0 < TT ? T - t0 : TT;
            v128_t acc[TT];
            float macc[TT];
            for (uint32_t j = 0; j < TT; j++) { acc[j] = wasm_f32x4_splat(0.0f); macc[j] = 0.0f; }
            for (uint32_t b = 0; b < nb; b++) {
                const uint8_t *blk = row + (size_t)b * 144, *s = blk + 4, *qs = blk + 16;
                float d = f16(blk), dmin = f16(blk + 2), dl[8], ml[8];
                for (int k = 0; k < 4; k++) {
                    dl[k] = d * (float)(s[k] & 63);
                    ml[k] = dmin * (float)(s[k + 4] & 63);
                    dl[k + 4] = d * (float)((s[k + 8] & 0x0f) | ((s[k] >> 6) << 4));
                    ml[k + 4] = dmin * (float)((s[k + 8] >> 4) | ((s[k + 4] >> 6) << 4));
                }
                for (int jj = 0; jj < 4; jj++) {
                    v128_t q0 = wasm_v128_load(qs + 32 * jj), q1 = wasm_v128_load(qs + 32 * jj + 16);
                    v128_t lo0 = wasm_v128_and(q0, mask), lo1 = wasm_v128_and(q1, mask);
                    v128_t hi0 = wasm_u8x16_shr(q0, 4), hi1 = wasm_u8x16_shr(q1, 4);
                    for (uint32_t j = 0; j < tn; j++) {
                        uint32_t xi = (t0 + j) * (cols / QK) + b * 8 + 2 * jj;
                        const int16_t *a = xq + (size_t)xi * QK;
                        v128_t sl = wasm_i32x4_add(dot16(lo0, a), dot16(lo1, a + 16));
                        v128_t sh = wasm_i32x4_add(dot16(hi0, a + 32), dot16(hi1, a + 48));
                        acc[j] = wasm_f32x4_add(acc[j], wasm_f32x4_add(
                            wasm_f32x4_mul(wasm_f32x4_convert_i32x4(sl), wasm_f32x4_splat(dl[2 * jj] * xd[xi])),
                            wasm_f32x4_mul(wasm_f32x4_convert_i32x4(sh), wasm_f32x4_splat(dl[2 * jj + 1] * xd[xi + 1]))));
                        macc[j] += ml[2 * jj] * xs[xi] + ml[2 * jj + 1] * xs[xi + 1];
                    }
                }
            }
            for (uint32_t j = 0; j < tn; j++) y[(size_t)(t0 + j) * rows + r] = hsum(acc[j]) - macc[j];
        }
    }
}

/* Q6_K (210 bytes a 256-element super-block: ql[128] low 4 bits, qh[64] high 2 bits, int8 scales[16], f16 d).
 * Element 128n + 32k + l (n < 2, k < 4, l < 32): nibble k/2 of ql[64n + 32(k%2) + l], bits 2k..2k+1 of
 * qh[32n + l]; w = d * scales[8n + 2k + l/16] * (q - 32). */
static void mm_q6_k(const uint8_t *w, uint32_t rows, uint32_t cols, uint32_t T,
                    const int16_t *xq, const float *xd, float *y) {
    uint32_t nb = cols / 256;
    v128_t mask = wasm_i8x16_splat(0x0f), three = wasm_i8x16_splat(3), off = wasm_i8x16_splat(32);
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * nb * 210;
        for (uint32_t t0 = 0; t0 < T; t0 += TT) {
            uint32_t tn = T - t0 < TT ? T - t0 : TT;
            v128_t acc[TT];
            for (uint32_t j = 0; j < TT; j++) acc[j] = wasm_f32x4_splat(0.0f);
            for (uint32_t b = 0; b < nb; b++) {
                const uint8_t *blk = row + (size_t)b * 210, *ql = blk, *qh = blk + 128;
                const int8_t *sc = (const int8_t *)(blk + 192);
                float d = f16(blk + 208);
                for (int n = 0; n < 2; n++) {
                    v128_t h0 = wasm_v128_load(qh + 32 * n), h1 = wasm_v128_load(qh + 32 * n + 16);
                    for (int k = 0; k < 4; k++) {
                        v128_t l0 = wasm_v128_load(ql + 64 * n + 32 * (k % 2)), l1 = wasm_v128_load(ql + 64 * n + 32 * (k % 2) + 16);
                        if (k >= 2) { l0 = wasm_u8x16_shr(l0, 4); l1 = wasm_u8x16_shr(l1, 4); }
                        v128_t q0 = wasm_i8x16_sub(wasm_v128_or(wasm_v128_and(l0, mask),
                                                   wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(h0, 2 * k), three), 4)), off);
                        v128_t q1 = wasm_i8x16_sub(wasm_v128_or(wasm_v128_and(l1, mask),
                                                   wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(h1, 2 * k), three), 4)), off);
                        float s0 = d * (float)sc[8 * n + 2 * k], s1 = d * (float)sc[8 * n + 2 * k + 1];
                        for (uint32_t j = 0; j < tn; j++) {
                            uint32_t xi = (t0 + j) * (cols / QK) + b * 8 + 4 * n + k;
                            const int16_t *a = xq + (size_t)xi * QK;
                            acc[j] = wasm_f32x4_add(acc[j], wasm_f32x4_add(
                                wasm_f32x4_mul(wasm_f32x4_convert_i32x4(dot16(q0, a)), wasm_f32x4_splat(s0 * xd[xi])),
                                wasm_f32x4_mul(wasm_f32x4_convert_i32x4(dot16(q1, a + 16)), wasm_f32x4_splat(s1 * xd[xi]))));
                        }
                    }
                }
            }
            for (uint32_t j = 0; j < tn; j++) y[(size_t)(t0 + j) * rows + r] = hsum(acc[j]);
        }
    }
}

/* F32 weights: float32 products of x itself (no quantization); cols is anything >= 1 */
static void mm_f32(const float *w, uint32_t rows, uint32_t cols, uint32_t T, const float *x, float *y) {
    uint32_t c4 = cols & ~3u;
    for (uint32_t r = 0; r < rows; r++) {
        const float *row = w + (size_t)r * cols;
        for (uint32_t t = 0; t < T; t++) {
            const float *v = x + (size_t)t * cols;
            v128_t acc = wasm_f32x4_splat(0.0f);
            for (uint32_t c = 0; c < c4; c += 4)
                acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_v128_load(row + c), wasm_v128_load(v + c)));
            float s = hsum(acc);
            for (uint32_t c = c4; c < cols; c++) s += row[c] * v[c];
            y[(size_t)t * rows + r] = s;
        }
    }
}

/* returns 0, or -1 for a type or shape it does not handle (nothing written then) */
__attribute__((export_name("qmatmul"))) int32_t qmatmul(uint32_t type, const uint8_t *w, uint32_t rows, uint32_t cols,
                                                         const float *x, uint32_t T, float *y, uint8_t *scratch) {
    if (type == T_F32) { mm_f32((const float *)w, rows, cols, T, x, y); return 0; }
    uint32_t block = (type == T_Q4_K || type == T_Q6_K) ? 256 : QK;
    if (cols % block || (type != T_Q4_0 && type != T_Q4_1 && type != T_Q5_0 && type != T_Q5_1 && type != T_Q8_0
                         && type != T_Q4_K && type != T_Q6_K))
        return -1;
    int16_t *xq = (int16_t *)scratch;
    float *xd = (float *)(((uintptr_t)(scratch + (size_t)2 * T * cols) + 15) & ~(uintptr_t)15);
    float *xs = xd + (size_t)T * (cols / QK);
    quantize_x(x, T, cols, xq, xd, xs);
    switch (type) {
    case T_Q4_0: mm_q4_0(w, rows, cols, T, xq, xd, xs, y); break;
    case T_Q4_1: mm_q4_1(w, rows, cols, T, xq, xd, xs, y); break;
    case T_Q5_0: mm_q5_0(w, rows, cols, T, xq, xd, xs, y); break;
    case T_Q5_1: mm_q5_1(w, rows, cols, T, xq, xd, xs, y); break;
    case T_Q8_0: mm_q8_0(w, rows, cols, T, xq, xd, y); break;
    case T_Q4_K: mm_q4_k(w, rows, cols, T, xq, xd, xs, y); break;
    case T_Q6_K: mm_q6_k(w, rows, cols, T, xq, xd, y); break;
    }
    return 0;
}

extern unsigned char __heap_base;

/* the first free byte past the module's data and stack: the host places weights and buffers from here up */
__attribute__((export_name("qmatmul_heap_base"))) uint32_t qmatmul_heap_base(void) {
    return (uint32_t)(uintptr_t)&__heap_base;
}
