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
#define PANEL_T BITS
#include "im2col_panel.clh"

__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void conv2d_panel_pack(CONV2D_ARGUMENTS, __global BITS* restrict workspace EPILOGUE_ARGUMENTS) {
    // Elements copied, not computed with: their bits, in float and in half; +0.0 outside.
    im2col_panel_row(workspace, (const __global BITS*)x, C, H, W, OH, OW, (BITS)0);
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
