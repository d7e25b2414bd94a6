// octune conv2d for CPU devices: NCHW, one group, any filter, stride, padding, dilation and
// batch, as kernels/conv2d.py defines it. Per image n, the GEMM of an im2col:
//   Y_n[K x OH*OW] = W[K x C*R*S] . col_n[C*R*S x OH*OW]
// A first launch (conv2d_panel_pack) writes col_n into the workspace as gemm_panel.cl's panels:
// for each NR output pixels (in y's order, across rows), C*R*S rows of NR contiguous elements
// (float, or half for conv2d_panel_float16: kernels/precision.clh), zero outside the input and
// past the last pixel. Then each work-item computes an MR x NR block of Y_n with the register
// block gemm_panel uses (kernels/panel_block.clh), the filter read as it lies (row k of W is
// output channel k's C*R*S weights) and Y_n stored in y as it lies.
//
// The copy writes R*S floats per input float, against the product's 2*K flops per float it
// writes: it costs most where K is small and the filter large (a network's first layer).
// Built with -DEPILOGUE, the product's stores run the layer's epilogue (kernels/epilogue.clh) on
// whole vectors of one output channel. Tuning defines: as gemm_panel.cl
// (search_spaces/conv2d_panel.yaml extends its space).
// Workload defines: R, S, STRIDE, PAD, DILATION, GROUPS, NHWC (kernels/conv2d.py).

#if !defined(MR) || !defined(VW) || !defined(NV) || !defined(KU) || !defined(LN) || !defined(LM)
#error "tuning parameters missing: see search_spaces/gemm_panel.yaml for the full list"
#endif
#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD) || !defined(DILATION)
#error "workload defines missing: build with -D R= -D S= -D STRIDE= -D PAD= -D DILATION="
#endif
#if GROUPS != 1 || NHWC
#error "conv2d_panel takes NCHW layers of one group (search_spaces/conv2d_panel.yaml)"
#endif

#define TRANSA 0  // the filter is K x C*R*S, row-major
#include "precision.clh"
#include "conv2d_arguments.clh"
#define EPILOGUE_VW VW
#include "epilogue.clh"
#include "epilogue_vector.clh"
#include "panel_block.clh"

// Work-item (q, p, n) writes row q = (c, r, s) of image n's panel p: the input under filter tap
// (r, s) of channel c for output pixels p * NR .. p * NR + NR, one output row's run of them at a
// time. A run inside the input at stride 1 is a plain copy, which the compiler vectorises; the
// others test each pixel (per-pixel division and tests cost the copy 3 x on PoCL).
__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void conv2d_panel_pack(CONV2D_ARGUMENTS, __global BITS* restrict workspace EPILOGUE_ARGUMENTS) {
    const int q = get_global_id(0);
    const int p = get_global_id(1);
    const int n = get_global_id(2);
    const int taps = C * R * S;
    if (q >= taps) return;
    const int c = q / (R * S);
    const int r = q / S % R;
    const int s = q % S;
    const int pixels = OH * OW;
    const int panels = (pixels + NR - 1) / NR;
    __global BITS* dst = workspace + (((size_t)n * panels + p) * taps + q) * NR;
    // Elements copied, not computed with: their bits, in float and in half.
    const __global BITS* plane = (const __global BITS*)x + ((size_t)n * C + c) * H * W;
    for (int j = 0, pixel = p * NR; j < NR;) {
        const int oh = pixel / OW;
        const int ow = pixel - oh * OW;
        const int run = min(NR - j, OW - ow);
        const int ih = oh * STRIDE - PAD + r * DILATION;
        const int iw = ow * STRIDE - PAD + s * DILATION;  // the run's first input column
        const bool row = pixel < pixels && ih >= 0 && ih < H;
        // Clamped, so every load is inside x; values outside it are replaced by 0.
        const __global BITS* in = plane + clamp(ih, 0, H - 1) * W;
        if (row && STRIDE == 1 && iw >= 0 && iw + run <= W) {
            for (int t = 0; t < run; ++t) dst[j + t] = in[iw + t];
        } else {
            for (int t = 0; t < run; ++t) {
                const int col = iw + t * STRIDE;
                const BITS value = in[clamp(col, 0, W - 1)];
                dst[j + t] = row && col >= 0 && col < W ? value : (BITS)0;  // +0.0
            }
        }
        j += run;
        pixel += run;
    }
}

__kernel __attribute__((reqd_work_group_size(LN, LM, 1)))
void conv2d_panel(CONV2D_ARGUMENTS,
                  const __global STORED* restrict workspace EPILOGUE_ARGUMENTS) {
    const int n0 = get_global_id(0) * NR;
    const int m0 = get_global_id(1) * MR;
    const int n = get_global_id(2);
    const int pixels = OH * OW;
    const int taps = C * R * S;
    if (n0 >= pixels || m0 >= K) return;
    const int panels = (pixels + NR - 1) / NR;
    // Panels start at multiples of NR elements, and every buffer at least 128-byte aligned.
    const __global STORED* panel = workspace + ((size_t)n * panels * NR + n0) * taps;
    panel_block(K, pixels, taps, 1.0f, 0.0f, w, taps, panel, y + (size_t)n * K * pixels, pixels,
                n * K * pixels, m0, n0 EPILOGUE_PASS);
}
