// octune quantised conv2d for CPU devices, as a quantised Conv computes it (onnxruntime's
// QLinearConv, or QDQ around Conv): NCHW, one group, any filter, stride, padding, dilation and
// batch, per image n and output channel k:
//   y[n][k][p] = sat_u8(rint((float)(sum_q w[k][q] * (col_n[q][p] - x_zero) + bias[k]) * scale[k])
//                       + y_zero)
// over the filter's taps q = (c, r, s), col_n the image's im2col: x uint8 with a zero point,
// w int8 with zero point 0 (symmetric, as onnxruntime's quantizer writes int8 weights, per
// tensor or per output channel), bias int32 and scale float32 per output channel, y uint8.
// Padding reads x_zero: the quantised 0. The sum is exact in int32; the requantisation is
// tuner/precision.py's `requantize`, so results are checked exact to the integer.
//
// conv2d_panel.cl's shape with gemm_int8.cl's arithmetic: a first launch packs col_n into the
// workspace as panels of NR output pixels (C*R*S rows of NR uint8 values, x_zero outside the
// input and past the last pixel); each work-item then keeps an MR x NR block of int32 sums
// (output channels x pixels) in vector registers over all taps. sum w (col - x_zero) =
// sum w col - x_zero sum w: each filter row's sum is summed beside the block (one add per row
// and tap against NR multiply-adds), so the panels are used as they lie.
//
// Tuning defines (search_spaces/conv2d_int8.yaml): MR, VW, NV, KU, LN, LM, PRODUCT as
// gemm_int8.cl's. Workload defines: R, S, STRIDE, PAD, DILATION, GROUPS, NHWC (kernels/conv2d.py).

#if !defined(MR) || !defined(VW) || !defined(NV) || !defined(KU) || !defined(LN) || \
    !defined(LM) || !defined(PRODUCT)
#error "tuning parameters missing: see search_spaces/conv2d_int8.yaml for the full list"
#endif
#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD) || !defined(DILATION)
#error "workload defines missing: build with -D R= -D S= -D STRIDE= -D PAD= -D DILATION="
#endif
#if GROUPS != 1 || NHWC
#error "conv2d_int8 takes NCHW layers of one group (search_spaces/conv2d_int8.yaml)"
#endif

#define NR (NV * VW)
#define INT8_CAT_(a, b) a##b
#define INT8_CAT(a, b) INT8_CAT_(a, b)
#define intv INT8_CAT(int, VW)
#define shortv INT8_CAT(short, VW)
#define floatv INT8_CAT(float, VW)
#define ucharv INT8_CAT(uchar, VW)
// The type 8-bit products are formed in (PRODUCT): int32, or 16 bits (|a * b| <= 255 * 128),
// widened as they are summed.
#if PRODUCT == 1
#define product_t short
#else
#define product_t int
#endif
#define productv INT8_CAT(product_t, VW)

#include "conv2d_arguments.clh"

#define PANEL_T uchar
#include "im2col_panel.clh"

__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void conv2d_int8_pack(CONV2D_INT8_ARGUMENTS, __global uchar* restrict workspace) {
    im2col_panel_row(workspace, x, C, H, W, OH, OW, (uchar)x_zero);  // the quantised 0 outside
}

__kernel __attribute__((reqd_work_group_size(LN, LM, 1)))
void conv2d_int8(CONV2D_INT8_ARGUMENTS, const __global uchar* restrict workspace) {
    const int n0 = get_global_id(0) * NR;
    const int m0 = get_global_id(1) * MR;
    const int n = get_global_id(2);
    const int pixels = OH * OW;
    const int taps = C * R * S;
    if (n0 >= pixels || m0 >= K) return;
    const int panels = (pixels + NR - 1) / NR;
    // Panels start at multiples of NR bytes, and every buffer at least 128-byte aligned.
    const __global uchar* panel = workspace + ((size_t)n * panels * NR + n0) * taps;
    const __global char* w_row[MR];  // row r of the block's filters (the last one past K)
#pragma unroll
    for (int r = 0; r < MR; ++r) w_row[r] = w + (size_t)min(m0 + r, K - 1) * taps;

    intv acc[MR][NV];
    int row_sums[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r) {
        row_sums[r] = 0;
#pragma unroll
        for (int v = 0; v < NV; ++v) acc[r][v] = (intv)(0);
    }
#pragma unroll KU
    for (int q = 0; q < taps; ++q) {
        productv b[NV];
#pragma unroll
        for (int v = 0; v < NV; ++v)
            b[v] = INT8_CAT(convert_, productv)(((const __global ucharv*)panel)[q * NV + v]);
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            const product_t a = w_row[r][q];
            row_sums[r] += a;
#pragma unroll
            for (int v = 0; v < NV; ++v) acc[r][v] += INT8_CAT(convert_int, VW)(a * b[v]);
        }
    }

    const bool full = n0 + NR <= pixels;
    __global uchar* out = y + (size_t)n * K * pixels;
#pragma unroll
    for (int r = 0; r < MR; ++r) {
        const int k = m0 + r;
        if (k >= K) break;
        const intv offset = (intv)(bias[k] - x_zero * row_sums[r]);
        const floatv factor = (floatv)(scale[k]);
        __global uchar* y_row = out + (size_t)k * pixels + n0;
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            const floatv scaled = INT8_CAT(convert_float, VW)(acc[r][v] + offset) * factor;
            const intv rounded = INT8_CAT(convert_int, INT8_CAT(VW, _sat_rte))(scaled) + y_zero;
            const ucharv value = INT8_CAT(convert_uchar, INT8_CAT(VW, _sat))(rounded);
            if (full) {
                INT8_CAT(vstore, VW)(value, 0, y_row + v * VW);
            } else {
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    if (n0 + v * VW + e < pixels) y_row[v * VW + e] = ((const uchar*)&value)[e];
                }
            }
        }
    }
}
