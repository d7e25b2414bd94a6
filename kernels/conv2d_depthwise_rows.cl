// octune depthwise conv2d for CPU devices: groups = C = K, NCHW, any filter size, stride,
// padding, dilation and batch, as kernels/conv2d.py defines it.
//
// Each work-item computes OHT output rows x OWT = NV * VW output columns of one plane (n, c),
// kept in NV vectors per row for the whole filter: per filter tap, one weight broadcast over a
// vector of the input row. A CPU runs a work-group's work-items in turn on one core, so this is
// the loop a compiler vectorises along the row, with no local memory and no barrier (the GPU
// template, conv2d_depthwise.cl, ran MobileNet v2's depthwise layers 20-50 x slower under
// PoCL). Vectors are gathered from the input row element by element into a union, which the
// compiler turns into one unaligned load where the run is inside the row at stride 1 (vloadN is
// a call under PoCL), into loads and shuffles at stride 2; only vectors that cross the row's
// ends test each element, and rows outside the input add nothing.
//
// Tuning defines (search_spaces/conv2d_depthwise_rows.yaml): VW, NV, OHT as above; LX, LY, LC
// the work-group shape along column blocks, row blocks and planes. Workload defines: R, S, STRIDE, PAD,
// DILATION, GROUPS, NHWC (kernels/conv2d.py).

#if !defined(VW) || !defined(NV) || !defined(OHT) || !defined(LX) || !defined(LY) || !defined(LC)
#error "tuning parameters missing: see search_spaces/conv2d_depthwise_rows.yaml"
#endif
#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD) || !defined(DILATION)
#error "workload defines missing: build with -D R= -D S= -D STRIDE= -D PAD= -D DILATION="
#endif
#if NHWC
#error "conv2d_depthwise_rows takes NCHW layers (search_spaces/conv2d_depthwise_rows.yaml)"
#endif

#include "conv2d_arguments.clh"

#define OWT (NV * VW)
#define ROWS_CAT_(a, b) a##b
#define ROWS_CAT(a, b) ROWS_CAT_(a, b)
#define floatv ROWS_CAT(float, VW)

typedef union {
    floatv v;
    float f[VW];
} lanes;

__kernel __attribute__((reqd_work_group_size(LX, LY, LC)))
void conv2d_depthwise_rows(CONV2D_ARGUMENTS) {
    const int ow0 = get_global_id(0) * OWT;
    const int oh0 = get_global_id(1) * OHT;
    const int plane = get_global_id(2);  // n * C + c
    if (ow0 >= OW || oh0 >= OH || plane >= N * C) return;
    const __global float* in = x + (size_t)plane * H * W;
    const __global float* filter = w + (plane % C) * R * S;

    floatv acc[OHT][NV];
#pragma unroll
    for (int t = 0; t < OHT; ++t) {
#pragma unroll
        for (int v = 0; v < NV; ++v) acc[t][v] = (floatv)(0.0f);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int t = 0; t < OHT; ++t) {
            const int ih = (oh0 + t) * STRIDE - PAD + r * DILATION;
            if (ih < 0 || ih >= H) continue;
            const __global float* row = in + ih * W;
#pragma unroll
            for (int s = 0; s < S; ++s) {
                const float weight = filter[r * S + s];
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    const int first = (ow0 + v * VW) * STRIDE - PAD + s * DILATION;
                    lanes u;
                    if (first >= 0 && first + (VW - 1) * STRIDE < W) {
#pragma unroll
                        for (int e = 0; e < VW; ++e) u.f[e] = row[first + e * STRIDE];
                    } else {
#pragma unroll
                        for (int e = 0; e < VW; ++e) {
                            const int col = first + e * STRIDE;
                            const float value = row[clamp(col, 0, W - 1)];  // always inside x
                            u.f[e] = col >= 0 && col < W ? value : 0.0f;
                        }
                    }
                    acc[t][v] = weight * u.v + acc[t][v];
                }
            }
        }
    }

    __global float* out = y + (size_t)plane * OH * OW;
#pragma unroll
    for (int t = 0; t < OHT; ++t) {
        if (oh0 + t >= OH) break;
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            lanes u;
            u.v = acc[t][v];
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                const int ow = ow0 + v * VW + e;
                if (ow < OW) out[(oh0 + t) * OW + ow] = u.f[e];
            }
        }
    }
}
