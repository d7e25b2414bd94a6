// octune quantised GEMM for CPU devices, as a quantised MatMul, Gemm or 1x1 Conv computes it
// (onnxruntime's QLinearMatMul, or QDQ around MatMul):
//   C[m][n] = sat_u8(rint((float)(sum_k (A[m][k] - a_zero) * B[k][n] + bias[n]) * scale[n])
//                    + c_zero)
// A uint8 activations with a zero point, B int8 weights with zero point 0 (symmetric, as
// onnxruntime's quantizer writes int8 weights), bias int32 and scale float32 per column of C
// (per-tensor quantisation: every column the same), C uint8; row-major, op(X) as gemm.cl.
// The sum is exact in int32; the requantisation is what tuner/precision.py's `requantize`
// computes, so results are checked exact to the integer.
//
// The shape of gemm_panel.cl: a first launch packs op(B) into panels of NR columns (K rows of
// NR int8 values, zero past N); each work-item keeps an MR x NR block of int32 sums in vector
// registers over all of K. sum (A - a_zero) B = sum A B - a_zero * sum B: the column sums of
// B are summed beside the block (NV adds a k against MR * NV multiply-adds), so A is used as
// it lies. How 8-bit products are formed is a tuning parameter, as the compiler's code for
// each differs by device (docs/precision.md):
//   PRODUCT 0: int32 products of the widened values (a multiply-add per lane)
//   PRODUCT 1: 16-bit products (|a * b| <= 255 * 128 fits a short), widened when summed
// The integer dot builtins of cl_khr_integer_dot_product are no third way here: Intel's CPU
// runtime builds them only under -cl-std=CL3.0, and ran them at a tenth of these products'
// rate in a register-bound probe (docs/precision.md).
//
// Tuning defines (search_spaces/gemm_int8.yaml): MR, VW, NV, KU, LN, LM as gemm_panel.cl's;
// PRODUCT. Workload defines: TRANSA, TRANSB.

#if !defined(MR) || !defined(VW) || !defined(NV) || !defined(KU) || !defined(LN) || \
    !defined(LM) || !defined(PRODUCT)
#error "tuning parameters missing: see search_spaces/gemm_int8.yaml for the full list"
#endif
#if !defined(TRANSA) || !defined(TRANSB)
#error "workload defines missing: build with -D TRANSA=0|1 -D TRANSB=0|1"
#endif

#define NR (NV * VW)
#define INT8_CAT_(a, b) a##b
#define INT8_CAT(a, b) INT8_CAT_(a, b)
#define intv INT8_CAT(int, VW)
#define shortv INT8_CAT(short, VW)
#define charv INT8_CAT(char, VW)
#define floatv INT8_CAT(float, VW)
#define ucharv INT8_CAT(uchar, VW)

#define GEMM_INT8_ARGUMENTS                                                                     \
    const int M, const int N, const int K, const __global uchar* restrict A, const int lda,     \
    const __global char* restrict B, const int ldb, const __global float* restrict scale,       \
    const __global int* restrict bias, const int a_zero, const int c_zero,                      \
    __global uchar* C, const int ldc

// Work-item (k, p) copies row k of panel p: op(B)[k][p * NR .. p * NR + NR), zeros past N.
__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void gemm_int8_pack(GEMM_INT8_ARGUMENTS, __global char* restrict workspace) {
    const int k = get_global_id(0);
    const int p = get_global_id(1);
    if (k >= K) return;
    __global char* dst = workspace + ((size_t)p * K + k) * NR;
#pragma unroll
    for (int j = 0; j < NR; ++j) {
        const int n = min(p * NR + j, N - 1);  // a valid place; its value is replaced by 0 past N
        const char value = TRANSB ? B[n * ldb + k] : B[k * ldb + n];
        dst[j] = p * NR + j < N ? value : (char)0;
    }
}

__kernel __attribute__((reqd_work_group_size(LN, LM, 1)))
void gemm_int8(GEMM_INT8_ARGUMENTS, const __global char* restrict workspace) {
    const int n0 = get_global_id(0) * NR;
    const int m0 = get_global_id(1) * MR;
    if (n0 >= N || m0 >= M) return;
    const __global char* panel = workspace + (size_t)n0 * K;
    int a_start[MR];  // where row r of op(A) starts, as panel_block.clh
#pragma unroll
    for (int r = 0; r < MR; ++r) a_start[r] = TRANSA ? min(m0 + r, M - 1) : min(m0 + r, M - 1) * lda;

    intv acc[MR][NV];
    intv column_sums[NV];
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        column_sums[v] = (intv)(0);
#pragma unroll
        for (int r = 0; r < MR; ++r) acc[r][v] = (intv)(0);
    }
#pragma unroll KU
    for (int k = 0; k < K; ++k) {
#if PRODUCT == 1
        shortv b[NV];
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            b[v] = INT8_CAT(convert_short, VW)(((const __global charv*)panel)[k * NV + v]);
            column_sums[v] += INT8_CAT(convert_int, VW)(b[v]);
        }
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            const short a = TRANSA ? A[k * lda + a_start[r]] : A[a_start[r] + k];
#pragma unroll
            for (int v = 0; v < NV; ++v) acc[r][v] += INT8_CAT(convert_int, VW)(a * b[v]);
        }
#else
        intv b[NV];
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            b[v] = INT8_CAT(convert_int, VW)(((const __global charv*)panel)[k * NV + v]);
            column_sums[v] += b[v];
        }
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            const int a = TRANSA ? A[k * lda + a_start[r]] : A[a_start[r] + k];
#pragma unroll
            for (int v = 0; v < NV; ++v) acc[r][v] = a * b[v] + acc[r][v];
        }
#endif
    }

    const bool full = n0 + NR <= N;
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        const int n = n0 + v * VW;
        // The columns' bias and scale (past N: the last column's, never stored).
        intv offset;
        floatv factor;
#pragma unroll
        for (int e = 0; e < VW; ++e) {
            ((int*)&offset)[e] = bias[min(n + e, N - 1)];
            ((float*)&factor)[e] = scale[min(n + e, N - 1)];
        }
        offset -= a_zero * column_sums[v];
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            if (m0 + r >= M) break;
            const floatv scaled = INT8_CAT(convert_float, VW)(acc[r][v] + offset) * factor;
            const intv rounded = INT8_CAT(convert_int, INT8_CAT(VW, _sat_rte))(scaled) + c_zero;
            const ucharv out = INT8_CAT(convert_uchar, INT8_CAT(VW, _sat))(rounded);
            __global uchar* c_row = C + (m0 + r) * ldc + n;
            if (full) {
                INT8_CAT(vstore, VW)(out, 0, c_row);
            } else {
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    if (n + e < N) c_row[e] = ((const uchar*)&out)[e];
                }
            }
        }
    }
}
