// octune depthwise conv2d for CPU devices: groups = C = K, NCHW, any filter size, stride,
// padding, dilation and batch, as kernels/conv2d.py defines it.
//
// Each work-item computes a run of whole output rows of one plane (n, c): the plane's rows cut
// into RB blocks, every row in a loop over its columns, VW columns at a time in one vector
// where all their taps lie inside the input row, one column at a time at the row's ends. A CPU
// runs a work-group's work-items in turn on one core, so a work-item is a loop a compiler
// vectorises along the row; giving it whole rows, and by default a whole plane, keeps PoCL's
// cost per work-item off small planes (MobileNet v2's 14x14x384 layer: 665 us with a vector of
// 4 columns a work-item, 93 us with a plane; its 112x112x32 layer 2.0 ms -> 0.33). Vectors are
// gathered from the input row element by element into a union, which the compiler turns into
// one unaligned load at stride 1 (vloadN is a call under PoCL), loads and shuffles at stride 2.
// The 9 weights of a 3x3 filter stay in registers for the whole plane.
//
// Tuning defines (search_spaces/conv2d_depthwise_rows.yaml): VW, RB as above; LY, LC the
// work-group shape along row blocks and planes. Workload defines: R, S, STRIDE, PAD, DILATION,
// GROUPS, NHWC (kernels/conv2d.py). With -DEPILOGUE, each value goes through
// kernels/epilogue.clh as it is stored.

#if !defined(VW) || !defined(RB) || !defined(LY) || !defined(LC)
#error "tuning parameters missing: see search_spaces/conv2d_depthwise_rows.yaml"
#endif
#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD) || !defined(DILATION)
#error "workload defines missing: build with -D R= -D S= -D STRIDE= -D PAD= -D DILATION="
#endif
#if NHWC
#error "conv2d_depthwise_rows takes NCHW layers (search_spaces/conv2d_depthwise_rows.yaml)"
#endif

#include "precision.clh"  // float32 only: STORED is float
#include "conv2d_arguments.clh"

#define ROWS_CAT_(a, b) a##b
#define ROWS_CAT(a, b) ROWS_CAT_(a, b)
#define floatv ROWS_CAT(float, VW)
#define EPILOGUE_VW VW
#include "epilogue.clh"
#include "epilogue_vector.clh"

typedef union {
    floatv v;
    float f[VW];
} lanes;

__kernel __attribute__((reqd_work_group_size(LY, LC, 1)))
void conv2d_depthwise_rows(CONV2D_ARGUMENTS EPILOGUE_ARGUMENTS) {
    const int rows = (OH + RB - 1) / RB;
    const int oh0 = get_global_id(0) * rows;
    const int plane = get_global_id(1);  // n * C + c
    if (oh0 >= OH || plane >= N * C) return;
    const __global float* in = x + (size_t)plane * H * W;
    __global float* out = y + (size_t)plane * OH * OW;
    float weight[R * S];
#pragma unroll
    for (int i = 0; i < R * S; ++i) weight[i] = w[(plane % C) * R * S + i];

    // Columns [inside, last] read only inside the input row: their first tap is at or right of
    // column 0 and their last tap left of column W.
    const int inside = (PAD + STRIDE - 1) / STRIDE;
    const int last = (W - 1 + PAD - (S - 1) * DILATION) / STRIDE;
    const int oh1 = min(oh0 + rows, OH);
    for (int oh = oh0; oh < oh1; ++oh) {
        __global float* out_row = out + oh * OW;
        for (int ow = 0; ow < OW;) {
            if (ow >= inside && ow + VW - 1 <= last) {
                floatv acc = (floatv)(0.0f);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int ih = oh * STRIDE - PAD + r * DILATION;
                    if (ih < 0 || ih >= H) continue;
                    const __global float* row = in + ih * W + ow * STRIDE - PAD;
#pragma unroll
                    for (int s = 0; s < S; ++s) {
                        lanes u;
#pragma unroll
                        for (int e = 0; e < VW; ++e) u.f[e] = row[s * DILATION + e * STRIDE];
                        acc = weight[r * S + s] * u.v + acc;
                    }
                }
                lanes result;
                result.v = EPILOGUE_VECTOR(acc, out_row + ow - y);
#pragma unroll
                for (int e = 0; e < VW; ++e) out_row[ow + e] = result.f[e];
                ow += VW;
            } else {
                float acc = 0.0f;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int ih = oh * STRIDE - PAD + r * DILATION;
                    if (ih < 0 || ih >= H) continue;
#pragma unroll
                    for (int s = 0; s < S; ++s) {
                        const int iw = ow * STRIDE - PAD + s * DILATION;
                        if (iw >= 0 && iw < W) acc += weight[r * S + s] * in[ih * W + iw];
                    }
                }
                out_row[ow] = EPILOGUE(acc, out_row + ow - y);
                ow += 1;
            }
        }
    }
}
