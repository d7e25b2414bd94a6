// octune GEMM: C = alpha * op(A) * op(B) + beta * C, float32, row-major like NumPy.
//
// op(A) is M x K, op(B) is K x N, C is M x N; lda, ldb, ldc are row strides in elements.
// Any M, N, K >= 1: tiles that overhang the matrix edges take a guarded path, interior tiles
// a fast one, so odd sizes cost no padding kernels. With beta == 0, C is never read
// (BLAS semantics: C may hold NaN).
//
// Workload defines (fixed per problem, not tuned):
//   TRANSA, TRANSB  0: op(X) = X; 1: op(X) = X^T
// Tuning defines (see search_spaces/gemm.yaml):
//   MWG, NWG        work-group tile of C in M and N
//   KWG             K tile staged per iteration
//   MDIMC, NDIMC    work-group shape: NDIMC work-items along N (dimension 0), MDIMC along M
//   VWM, VWN        vector width of A/B fragment reads from local memory and of C stores (VWN)
//   VWA, VWB        vector width of global loads of the A/B tiles
//   SA, SB          1: stage the A/B tile in local memory; 0: read fragments from global memory
//   KUNROLL         unroll factor of the inner K loop
//   STRM, STRN      0: a work-item owns contiguous rows/columns; 1: strided by the work-group
// Derived: each work-item computes an MWI x NWI register tile, MWI = MWG/MDIMC, NWI = NWG/NDIMC.

#if !defined(MWG) || !defined(NWG) || !defined(KWG) || !defined(MDIMC) || !defined(NDIMC)
#error "tuning parameters missing: build with -D MWG=.. -D NWG=.. -D KWG=.. -D MDIMC=.. -D NDIMC=.."
#endif
#if !defined(TRANSA) || !defined(TRANSB)
#error "workload defines missing: build with -D TRANSA=0|1 -D TRANSB=0|1"
#endif

#define MWI (MWG / MDIMC)
#define NWI (NWG / NDIMC)
#define WGS (MDIMC * NDIMC)

// Reads W consecutive floats at an address aligned to W floats into a private array.
// W is a compile-time constant at every call, so the unused branches fold away.
inline void load_vec(const int w, const __global float* src, float* dst) {
    if (w == 8) {
        vstore8(*(const __global float8*)src, 0, dst);
    } else if (w == 4) {
        vstore4(*(const __global float4*)src, 0, dst);
    } else if (w == 2) {
        vstore2(*(const __global float2*)src, 0, dst);
    } else {
        dst[0] = src[0];
    }
}

inline void load_local_vec(const int w, const __local float* src, float* dst) {
    if (w == 8) {
        vstore8(*(const __local float8*)src, 0, dst);
    } else if (w == 4) {
        vstore4(*(const __local float4*)src, 0, dst);
    } else if (w == 2) {
        vstore2(*(const __local float2*)src, 0, dst);
    } else {
        dst[0] = src[0];
    }
}

inline void store_local_vec(const int w, const float* src, __local float* dst) {
    if (w == 8) {
        *(__local float8*)dst = vload8(0, src);
    } else if (w == 4) {
        *(__local float4*)dst = vload4(0, src);
    } else if (w == 2) {
        *(__local float2*)dst = vload2(0, src);
    } else {
        dst[0] = src[0];
    }
}

inline void store_vec(const int w, const float* src, __global float* dst) {
    if (w == 8) {
        *(__global float8*)dst = vload8(0, src);
    } else if (w == 4) {
        *(__global float4*)dst = vload4(0, src);
    } else if (w == 2) {
        *(__global float2*)dst = vload2(0, src);
    } else {
        dst[0] = src[0];
    }
}

// Position of a work-item's i-th row (or column) inside the work-group tile. Vectors of VW
// stay contiguous either way, so local reads and global stores can be vectorised.
inline int tile_offset(const int i, const int t, const int wi, const int dimc, const int vw,
                       const int strided) {
    return strided ? (i / vw) * (dimc * vw) + t * vw + (i % vw) : t * wi + i;
}

// Copies a ROWS x COLS tile whose COLS run contiguously in global memory into local memory,
// either as it is (dst[r][c], row length COLS) or transposed (dst[c][r], row length ROWS), so
// that the compute loop always reads along M (for A) or N (for B). Elements outside the
// matrix (rows_left, cols_left) read as zero, which adds nothing to the dot products.
inline void stage_tile(__local float* dst, const __global float* src, const int ld,
                       const int rows_left, const int cols_left, const int ROWS, const int COLS,
                       const int VW, const int transpose, const bool fast, const int tid) {
    const int vectors_per_row = COLS / VW;
#pragma unroll
    for (int l = 0; l < (ROWS * COLS / VW) / WGS; ++l) {
        const int v = tid + l * WGS;
        const int r = v / vectors_per_row;
        const int c = (v % vectors_per_row) * VW;
        float x[8];
        if (fast) {
            load_vec(VW, src + r * ld + c, x);
        } else {
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                x[e] = (r < rows_left && c + e < cols_left) ? src[r * ld + c + e] : 0.0f;
            }
        }
        if (transpose) {
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                dst[(c + e) * ROWS + r] = x[e];
            }
        } else {
            store_local_vec(VW, x, dst + r * COLS + c);
        }
    }
}

__kernel __attribute__((reqd_work_group_size(NDIMC, MDIMC, 1)))
void gemm(const int M, const int N, const int K, const float alpha, const float beta,
          const __global float* restrict A, const int lda,
          const __global float* restrict B, const int ldb,
          __global float* C, const int ldc) {
    const int tn = get_local_id(0);
    const int tm = get_local_id(1);
    const int tid = tm * NDIMC + tn;
    const int m0 = get_group_id(1) * MWG;
    const int n0 = get_group_id(0) * NWG;
    const int m_left = M - m0;
    const int n_left = N - n0;

    // Aligned for the widest vector access: local arrays of float are only 4-byte aligned.
#if SA
    __local float Als[KWG * MWG] __attribute__((aligned(32)));  // [k][m]
#endif
#if SB
    __local float Bls[KWG * NWG] __attribute__((aligned(32)));  // [k][n]
#endif

    int m_of[MWI];
    int n_of[NWI];
#pragma unroll
    for (int i = 0; i < MWI; ++i) m_of[i] = tile_offset(i, tm, MWI, MDIMC, VWM, STRM);
#pragma unroll
    for (int j = 0; j < NWI; ++j) n_of[j] = tile_offset(j, tn, NWI, NDIMC, VWN, STRN);

    float acc[MWI][NWI];
#pragma unroll
    for (int i = 0; i < MWI; ++i) {
#pragma unroll
        for (int j = 0; j < NWI; ++j) acc[i][j] = 0.0f;
    }

    const bool a_aligned = (lda % VWA) == 0;
    const bool b_aligned = (ldb % VWB) == 0;

    for (int k0 = 0; k0 < K; k0 += KWG) {
        const int k_left = K - k0;
#if SA
        {
            const bool fast = a_aligned && k_left >= KWG && m_left >= MWG;
#if TRANSA
            stage_tile(Als, A + k0 * lda + m0, lda, k_left, m_left, KWG, MWG, VWA, 0, fast, tid);
#else
            stage_tile(Als, A + m0 * lda + k0, lda, m_left, k_left, MWG, KWG, VWA, 1, fast, tid);
#endif
        }
#endif
#if SB
        {
            const bool fast = b_aligned && k_left >= KWG && n_left >= NWG;
#if TRANSB
            stage_tile(Bls, B + n0 * ldb + k0, ldb, n_left, k_left, NWG, KWG, VWB, 1, fast, tid);
#else
            stage_tile(Bls, B + k0 * ldb + n0, ldb, k_left, n_left, KWG, NWG, VWB, 0, fast, tid);
#endif
        }
#endif
#if SA || SB
        barrier(CLK_LOCAL_MEM_FENCE);
#endif

#pragma unroll 1
        for (int kk = 0; kk < KWG; kk += KUNROLL) {
#pragma unroll
            for (int ku = 0; ku < KUNROLL; ++ku) {
                const int k = kk + ku;
                float a[MWI];
                float b[NWI];
#if SA
#pragma unroll
                for (int i = 0; i < MWI; i += VWM) load_local_vec(VWM, Als + k * MWG + m_of[i], a + i);
#else
#pragma unroll
                for (int i = 0; i < MWI; ++i) {
                    const int m = m_of[i];
                    const bool inside = m < m_left && k < k_left;
#if TRANSA
                    a[i] = inside ? A[(k0 + k) * lda + m0 + m] : 0.0f;
#else
                    a[i] = inside ? A[(m0 + m) * lda + k0 + k] : 0.0f;
#endif
                }
#endif
#if SB
#pragma unroll
                for (int j = 0; j < NWI; j += VWN) load_local_vec(VWN, Bls + k * NWG + n_of[j], b + j);
#else
#pragma unroll
                for (int j = 0; j < NWI; ++j) {
                    const int n = n_of[j];
                    const bool inside = n < n_left && k < k_left;
#if TRANSB
                    b[j] = inside ? B[(n0 + n) * ldb + k0 + k] : 0.0f;
#else
                    b[j] = inside ? B[(k0 + k) * ldb + n0 + n] : 0.0f;
#endif
                }
#endif
#pragma unroll
                for (int i = 0; i < MWI; ++i) {
#pragma unroll
                    for (int j = 0; j < NWI; ++j) acc[i][j] = mad(a[i], b[j], acc[i][j]);
                }
            }
        }
#if SA || SB
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
    }

    // Interior tiles with aligned rows store whole vectors; edge tiles store element by element.
    const bool fast_store = m_left >= MWG && n_left >= NWG && (ldc % VWN) == 0;
#pragma unroll
    for (int i = 0; i < MWI; ++i) {
        const int m = m_of[i];
        __global float* c_row = C + (m0 + m) * ldc + n0;
        if (fast_store) {
#pragma unroll
            for (int j = 0; j < NWI; j += VWN) {
                float out[8];
#pragma unroll
                for (int e = 0; e < VWN; ++e) out[e] = alpha * acc[i][j + e];
                if (beta != 0.0f) {
                    float old[8];
                    load_vec(VWN, c_row + n_of[j], old);
#pragma unroll
                    for (int e = 0; e < VWN; ++e) out[e] = mad(beta, old[e], out[e]);
                }
                store_vec(VWN, out, c_row + n_of[j]);
            }
        } else if (m < m_left) {
#pragma unroll
            for (int j = 0; j < NWI; ++j) {
                const int n = n_of[j];
                if (n < n_left) {
                    const float value = alpha * acc[i][j];
                    c_row[n] = beta != 0.0f ? mad(beta, c_row[n], value) : value;
                }
            }
        }
    }
}
