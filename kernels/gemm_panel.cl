// octune GEMM for CPU devices: C = alpha * op(A) * op(B) + beta * C, row-major, the same
// arguments as gemm.cl (gemm_arguments.clh) and a workspace; float32, or float16 storage with
// float or half arithmetic (kernels/precision.clh; search_spaces/gemm_panel_float16.yaml).
//
// A CPU runs a work-group as a loop over its work-items on one core, so what makes a GEMM fast
// there is what makes a BLAS micro-kernel fast: each work-item keeps an MR x NR block of C in
// vector registers for the whole K loop, reading per k one row of NR floats of B as NV vectors
// and broadcasting MR floats of A (BLIS's 6 x 16 on AVX2: 12 accumulators). Two things decide
// whether an OpenCL compiler produces that loop, measured under PoCL 3.0 on AMD EPYC Zen 3
// (benchmarks/RESULTS.md, "GEMM on CPU devices"):
//   - vloadN/vstoreN and mad() are calls into PoCL's kernel library, not instructions: a
//     vector of B is read by dereferencing a pointer to an aligned floatN, and products are
//     summed as a * b + c, which the compiler contracts to an FMA;
//   - B's rows are N floats apart, so the NR floats of a work-item lie in K different cache
//     lines, which at power-of-two N all fall into the same set of the L1 cache. A first launch
//     (gemm_panel_pack) therefore copies op(B) into the workspace as panels of NR columns, each
//     K rows of NR contiguous floats, zero-padded past N, so the K loop reads one stream.
// op(A) is read where it lies: MR rows (or, transposed, MR contiguous floats per k). The block
// itself is kernels/panel_block.clh, which conv2d_panel.cl shares; built with -DEPILOGUE, its
// stores run kernels/epilogue.clh.
//
// Tuning defines (search_spaces/gemm_panel.yaml):
//   MR        rows of C per work-item
//   VW, NV    NV vectors of VW floats: NR = NV * VW columns of C per work-item
//   KU        unroll factor of the K loop
//   LN, LM    work-group shape: LN panels (dimension 0) x LM row blocks (dimension 1); the
//             work-items of a group run in turn on one core and share its caches
// Workload defines: TRANSA, TRANSB as in gemm.cl.

#if !defined(MR) || !defined(VW) || !defined(NV) || !defined(KU) || !defined(LN) || !defined(LM)
#error "tuning parameters missing: see search_spaces/gemm_panel.yaml for the full list"
#endif
#if !defined(TRANSA) || !defined(TRANSB)
#error "workload defines missing: build with -D TRANSA=0|1 -D TRANSB=0|1"
#endif

#include "precision.clh"
#include "gemm_arguments.clh"
#define EPILOGUE_VW VW
#include "epilogue.clh"
#include "epilogue_vector.clh"
#include "panel_block.clh"

// Work-item (k, p) copies row k of panel p: op(B)[k][p * NR .. p * NR + NR), zeros past N.
__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void gemm_panel_pack(GEMM_ARGUMENTS, __global BITS* restrict workspace EPILOGUE_ARGUMENTS) {
    const int k = get_global_id(0);
    const int p = get_global_id(1);
    if (k >= K) return;
    const int n0 = p * NR;
    const __global BITS* b = (const __global BITS*)B;  // elements copied, not computed with
    __global BITS* dst = workspace + ((size_t)p * K + k) * NR;
#pragma unroll
    for (int j = 0; j < NR; ++j) {
        const int n = min(n0 + j, N - 1);  // a valid place; its value is replaced by 0 past N
#if TRANSB
        const BITS value = b[n * ldb + k];
#else
        const BITS value = b[k * ldb + n];
#endif
        dst[j] = n0 + j < N ? value : (BITS)0;  // +0.0 in float and in half
    }
}

__kernel __attribute__((reqd_work_group_size(LN, LM, 1)))
void gemm_panel(GEMM_ARGUMENTS, const __global STORED* restrict workspace EPILOGUE_ARGUMENTS) {
    const int n0 = get_global_id(0) * NR;
    const int m0 = get_global_id(1) * MR;
    if (n0 >= N || m0 >= M) return;
    // Panels start at multiples of NR elements, and every buffer at least 128-byte aligned.
    const __global STORED* panel = workspace + (size_t)n0 * K;
    panel_block(M, N, K, alpha, beta, A, lda, panel, C, ldc, 0, m0, n0 EPILOGUE_PASS);
}
