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
//
// With -DOCTUNE_INT8 (search_spaces/conv2d_depthwise_rows_int8.yaml), a quantised depthwise
// conv as conv2d_int8.cl's: uint8 x with a zero point, int8 w, per channel an int32 bias and a
// float scale, uint8 y. The products w (x - x_zero) are integers of at most 128 * 255, so
// their sum over R*S <= 256 taps is exact in float (below 2^24) and runs at float's rate; it
// is requantised as conv2d_int8's int32 sums are. Taps outside the input are skipped: the
// quantised 0 they would read adds nothing. With -DOCTUNE_FLOAT16
// (conv2d_depthwise_rows_float16.yaml), half storage read and written through
// kernels/precision.clh, float arithmetic.

#if !defined(VW) || !defined(RB) || !defined(LY) || !defined(LC)
#error "tuning parameters missing: see search_spaces/conv2d_depthwise_rows.yaml"
#endif
#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD) || !defined(DILATION)
#error "workload defines missing: build with -D R= -D S= -D STRIDE= -D PAD= -D DILATION="
#endif
#if NHWC
#error "conv2d_depthwise_rows takes NCHW layers (search_spaces/conv2d_depthwise_rows.yaml)"
#endif

#define ROWS_CAT_(a, b) a##b
#define ROWS_CAT(a, b) ROWS_CAT_(a, b)
#define floatv ROWS_CAT(float, VW)
#define convert_floatv ROWS_CAT(convert_float, VW)
// X_T, Y_T: the buffers' elements; GATHERED, PUT: the type of the lanes a vector of x is
// gathered into and of those y is stored from; GATHER(p, i), PUT(p, i, v): one element.
#ifdef OCTUNE_INT8
#include "conv2d_arguments.clh"
#define ARGUMENTS CONV2D_INT8_ARGUMENTS
#define X_T uchar
#define Y_T uchar
#define GATHERED uchar
#define PUT_T uchar
#define GATHER(p, i) ((p)[i])
#define PUT(p, i, v) ((p)[i] = (v))
#define WEIGHT(i) ((float)w[i])
#define TAP(p, i) ((float)(p)[i] - zero)
#define TAPS(v) convert_floatv(v)
// A row's taps read whole: x_zero times its weights' sum comes off once, at the end.
#define ROWS_START float read_weights = 0.0f
#define ROW_READ(r) read_weights += row_weights[r]
#define ROWS_DONE(acc) ((acc) - zero * read_weights)
// The int32 sum and bias as a float (as conv2d_int8's), scaled, rounded half to even, moved to
// y's zero point and saturated: rint and a float clamp, which cost less than the saturating
// integer conversions.
#define REQUANTIZED(n, v)                                                                       \
    ROWS_CAT(convert_uchar, ROWS_CAT(n, _sat))(                                                 \
        rint(ROWS_CAT(convert_float, n)(ROWS_CAT(convert_int, n)(v) + offset) * factor) +       \
        (float)y_zero)
#define VECTOR_RESULT(acc, at) REQUANTIZED(VW, acc)
#define SCALAR_RESULT(acc, at) REQUANTIZED(, acc)
#else
#include "precision.clh"  // float32, or float16 storage with float arithmetic
#include "conv2d_arguments.clh"
#define EPILOGUE_VW VW
#include "epilogue.clh"
#include "epilogue_vector.clh"
#define ARGUMENTS CONV2D_ARGUMENTS EPILOGUE_ARGUMENTS
#define X_T STORED
#define Y_T STORED
#define GATHERED float
#define PUT_T float
#define GATHER(p, i) LOAD(p, i)
#define PUT(p, i, v) STORE(p, i, v)
#define WEIGHT(i) LOAD(w, i)
#define TAP(p, i) LOAD(p, i)
#define TAPS(v) (v)
#define ROWS_START
#define ROW_READ(r)
#define ROWS_DONE(acc) (acc)
#define VECTOR_RESULT(acc, at) EPILOGUE_VECTOR(acc, at)
#define SCALAR_RESULT(acc, at) EPILOGUE(acc, at)
#endif

// VW elements of x and of y, gathered or stored one by one.
typedef union {
    ROWS_CAT(GATHERED, VW) v;
    GATHERED f[VW];
} x_lanes;
typedef union {
    ROWS_CAT(PUT_T, VW) v;
    PUT_T f[VW];
} y_lanes;

__kernel __attribute__((reqd_work_group_size(LY, LC, 1)))
void conv2d_depthwise_rows(ARGUMENTS) {
    const int rows = (OH + RB - 1) / RB;
    const int oh0 = get_global_id(0) * rows;
    const int plane = get_global_id(1);  // n * C + c
    if (oh0 >= OH || plane >= N * C) return;
    const __global X_T* in = x + (size_t)plane * H * W;
    __global Y_T* out = y + (size_t)plane * OH * OW;
    float weight[R * S];
#pragma unroll
    for (int i = 0; i < R * S; ++i) weight[i] = WEIGHT((plane % C) * R * S + i);
#ifdef OCTUNE_INT8
    const float zero = x_zero;
    const int offset = bias[plane % C];
    const float factor = scale[plane % C];
    float row_weights[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        row_weights[r] = 0.0f;
#pragma unroll
        for (int s = 0; s < S; ++s) row_weights[r] += weight[r * S + s];
    }
#endif

    // Columns [inside, last] read only inside the input row: their first tap is at or right of
    // column 0 and their last tap left of column W.
    const int inside = (PAD + STRIDE - 1) / STRIDE;
    const int last = (W - 1 + PAD - (S - 1) * DILATION) / STRIDE;
    const int oh1 = min(oh0 + rows, OH);
    for (int oh = oh0; oh < oh1; ++oh) {
        __global Y_T* out_row = out + oh * OW;
        for (int ow = 0; ow < OW;) {
            if (ow >= inside && ow + VW - 1 <= last) {
                floatv acc = (floatv)(0.0f);
                ROWS_START;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int ih = oh * STRIDE - PAD + r * DILATION;
                    if (ih < 0 || ih >= H) continue;
                    const __global X_T* row = in + ih * W + ow * STRIDE - PAD;
#pragma unroll
                    for (int s = 0; s < S; ++s) {
                        x_lanes u;
#pragma unroll
                        for (int e = 0; e < VW; ++e) u.f[e] = GATHER(row, s * DILATION + e * STRIDE);
                        acc = weight[r * S + s] * TAPS(u.v) + acc;
                    }
                    ROW_READ(r);
                }
                y_lanes result;
                result.v = VECTOR_RESULT(ROWS_DONE(acc), out_row + ow - y);
#pragma unroll
                for (int e = 0; e < VW; ++e) PUT(out_row, ow + e, result.f[e]);
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
                        if (iw >= 0 && iw < W) acc += weight[r * S + s] * TAP(in, ih * W + iw);
                    }
                }
                PUT(out_row, ow, SCALAR_RESULT(acc, out_row + ow - y));
                ow += 1;
            }
        }
    }
}
