// octune GEMM: C = alpha * op(A) * op(B) + beta * C, float32, row-major like NumPy.
//
// op(A) is M x K, op(B) is K x N, C is M x N; lda, ldb, ldc are row strides in elements.
// Any M, N, K >= 1: tiles that overhang the matrix edges take a guarded path, interior tiles
// a fast one, so odd sizes cost no padding kernels; in the plain kernel, an edge tile moves back
// inside a matrix larger than it and takes the fast one too (edge_shift). With beta == 0, C is
// never read (BLAS semantics: C may hold NaN).
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
//   PF              K tiles in flight ahead of the one being computed, each in its own local
//                   buffer (one barrier per K tile). 0: load, then compute; 1 without ASYNC:
//                   the next tile goes through registers while the current one is computed
//   ASYNC           1: staged tiles that keep their layout go from global to local memory by
//                   asynchronous copies (cp.async, NVIDIA compute capability 8.0 and later),
//                   which hold no registers, so two K tiles (PF) can be in flight at once;
//                   tiles to transpose go through registers. 2: as 1, and op(A) keeps its
//                   layout whatever it is, so it is always copied. 0: all through registers
//   KDIMC           work-items along K (dimension 2): KDIMC groups of MDIMC x NDIMC work-items
//                   take turns of K tiles of the same tile of C, each with its own local
//                   buffers, and add their register tiles through local memory at the end.
//                   Where C has few tiles, this multiplies the warps in flight and divides each
//                   one's serial chain of K tiles, in one launch and without a workspace
// Derived: each work-item computes an MWI x NWI register tile, MWI = MWG/MDIMC, NWI = NWG/NDIMC.
// Batched entry (search_spaces/conv2d_1x1.yaml: a pointwise conv over a batch in NCHW), built with:
//   BATCHED         1: the work-groups of launch dimension 2 are images, each with its own B
//                   (K x ldb) and C (M x ldc), laid one after another; A is shared
// Split-K entries (search_spaces/gemm_splitk.yaml, gemm_splitk_serial.yaml), built with:
//   KSPLIT          slices of K multiplied by separate work-groups into a workspace
//   RWG             work-group size of gemm_splitk_sum, which adds the slices into C (the
//                   two-launch variant; gemm_splitk_serial adds them in the same launch)
// Packed entries (search_spaces/gemm_packed.yaml), built with:
//   PACK_A          gemm_pack_a first writes A (TRANSA = 0) to the workspace as [k][m], then
//                   gemm_packed reads it there as a transposed A

#if !defined(MWG) || !defined(NWG) || !defined(KWG) || !defined(MDIMC) || !defined(NDIMC)
#error "tuning parameters missing: build with -D MWG=.. -D NWG=.. -D KWG=.. -D MDIMC=.. -D NDIMC=.."
#endif
#if !defined(VWM) || !defined(VWN) || !defined(VWA) || !defined(VWB) || !defined(SA) || \
    !defined(SB) || !defined(KUNROLL) || !defined(STRM) || !defined(STRN) || !defined(PF) || \
    !defined(KDIMC) || !defined(ASYNC)
#error "tuning parameters missing: see search_spaces/gemm.yaml for the full list"
#endif
#if !defined(TRANSA) || !defined(TRANSB)
#error "workload defines missing: build with -D TRANSA=0|1 -D TRANSB=0|1"
#endif
#ifndef BATCHED
#define BATCHED 0
#endif
#if BATCHED && (TRANSB || defined(PACK_A) || defined(KSPLIT))
#error "BATCHED takes the plain gemm entry with TRANSB = 0 (search_spaces/conv2d_1x1.yaml)"
#elif !BATCHED
#define c_base 0  // where C starts in the output, for the epilogue's element indices
#endif

#ifdef PACK_A
#if TRANSA
#error "PACK_A transposes an untransposed A: gemm_packed.yaml requires TRANSA = 0"
#endif
#define A_KM 1  // op(A) lies in memory as [k][m] (the packed copy) ...
#else
#define A_KM TRANSA  // ... or as the workload gives it: [k][m] where TRANSA, else [m][k]
#endif

#define MWI (MWG / MDIMC)
#define NWI (NWG / NDIMC)
#define WGS (MDIMC * NDIMC)  // one K group: the work-items that load and compute a K tile
#define WGT (WGS * KDIMC)    // the whole work-group

#include "precision.clh"
#include "vector_io.clh"
#include "gemm_arguments.clh"
#include "slice_handoff.clh"
#include "epilogue.clh"
// A split-K build's tiles go to the workspace: its epilogue runs where the slices are summed.
#ifdef KSPLIT
#define TILE_EPILOGUE(v, i) (v)
#define TILE_EPILOGUE_RUN(values, n, i)
#else
#define TILE_EPILOGUE EPILOGUE
#define TILE_EPILOGUE_RUN EPILOGUE_RUN
#endif

// Staging a tile goes global memory -> private registers -> local memory in two steps, so that
// with PF the loads of the next tile can be issued before the compute loop of the current one
// and their latency hidden behind it.
//
// The tile is ROWS x COLS with COLS running contiguously in global memory; the work-group moves
// it as (ROWS * COLS / VW) vectors of VW floats, each work-item (ROWS * COLS / VW) / WGS of them.
// Local memory holds it either as it is (dst[r][c], row length COLS) or transposed (dst[c][r],
// row length ROWS), so that the compute loop always reads along M (for A) or N (for B).
//
// Which vector a work-item moves depends on that: a tile copied as it is goes row by row, so
// neighbouring work-items read neighbouring global addresses (coalesced) and write neighbouring
// local vectors (no bank conflicts). A tile to transpose goes column by column: neighbouring
// work-items take neighbouring rows, so the scalar stores of element e of their vectors land on
// consecutive local addresses, one bank each. Row by row, all work-items sharing a row would
// store to one bank (ROWS apart), a COLS/VW-way conflict. The global sectors a column-wise load
// leaves half used are read by the work-items of the next columns at about the same time,
// from the cache.
inline void tile_vector(const int l, const int tid, const int ROWS, const int COLS, const int VW,
                        const int transpose, int* r, int* c) {
    const int v = tid + l * WGS;
    if (transpose) {
        *r = v % ROWS;
        *c = (v / ROWS) * VW;
    } else {
        *r = v / (COLS / VW);
        *c = (v % (COLS / VW)) * VW;
    }
}

// Reads this work-item's vectors of the tile at src into regs. Elements outside the matrix
// (rows_left, cols_left) read as zero, which adds nothing to the dot products.
inline void load_tile(float* regs, const __global STORED* src, const int ld, const int rows_left,
                      const int cols_left, const int ROWS, const int COLS, const int VW,
                      const int transpose, const bool fast, const int tid) {
#pragma unroll
    for (int l = 0; l < (ROWS * COLS / VW) / WGS; ++l) {
        int r, c;
        tile_vector(l, tid, ROWS, COLS, VW, transpose, &r, &c);
        float* x = regs + l * VW;
        if (fast) {
            load_vec(VW, src + r * ld + c, x);
        } else {
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                x[e] = (r < rows_left && c + e < cols_left) ? LOAD(src, r * ld + c + e) : 0.0f;
            }
        }
    }
}

// Writes what load_tile read into the local tile dst.
inline void store_tile(__local float* dst, const float* regs, const int ROWS, const int COLS,
                       const int VW, const int transpose, const int tid) {
#pragma unroll
    for (int l = 0; l < (ROWS * COLS / VW) / WGS; ++l) {
        int r, c;
        tile_vector(l, tid, ROWS, COLS, VW, transpose, &r, &c);
        if (transpose) {
#pragma unroll
            for (int e = 0; e < VW; ++e) dst[(c + e) * ROWS + r] = regs[l * VW + e];
        } else {
            store_local_vec(VW, regs + l * VW, dst + r * COLS + c);
        }
    }
}

#if ASYNC
// Asynchronous copies: cp.async on NVIDIA's compiler (the macro below is its own). Elsewhere a
// plain copy stands in, which completes at once: the same pipeline, without the overlap, so
// that the pipeline's logic runs (and is tested) on any device.
#ifdef cl_nv_pragma_unroll
#define COPY_PENDING_(n) #n
#define COPY_PENDING(n) COPY_PENDING_(n)
// Starts copying `bytes` (4, 8 or 16: a constant at every call) from src to dst; the first
// `valid` bytes come from src, the rest are zeros (0: src is not read).
inline void copy_async(__local float* dst, const __global float* src, const int bytes,
                       const int valid) {
    const uint to = (uint)(size_t)dst;  // a local pointer holds its shared-window address
    const ulong from = (ulong)(size_t)src;
    if (bytes == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(from),
                     "r"(valid) : "memory");
    } else if (bytes == 8) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(to), "l"(from),
                     "r"(valid) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(to), "l"(from),
                     "r"(valid) : "memory");
    }
}
#define COPY_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
// Waits until at most PF - 1 of this work-item's committed groups are still in flight.
#define COPY_WAIT() asm volatile("cp.async.wait_group " COPY_PENDING(PF_PENDING) ";" ::: "memory")
#else
inline void copy_async(__local float* dst, const __global float* src, const int bytes,
                       const int valid) {
    for (int e = 0; e < bytes / 4; ++e) dst[e] = 4 * e < valid ? src[e] : 0.0f;
}
#define COPY_COMMIT()
#define COPY_WAIT()
#endif
#if PF == 1
#define PF_PENDING 0
#elif PF == 2
#define PF_PENDING 1
#else
#error "ASYNC needs PF = 1 or 2"
#endif

// load_tile and store_tile in one step, by asynchronous copies into dst, for a tile that keeps
// its layout.
inline void copy_tile(__local float* dst, const __global float* src, const int ld,
                      const int rows_left, const int cols_left, const int ROWS, const int COLS,
                      const int VW, const bool fast, const int tid) {
#pragma unroll
    for (int l = 0; l < (ROWS * COLS / VW) / WGS; ++l) {
        int r, c;
        tile_vector(l, tid, ROWS, COLS, VW, 0, &r, &c);
        if (fast) {
            copy_async(dst + r * COLS + c, src + r * ld + c, 4 * VW, 4 * VW);
        } else {
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                const bool inside = r < rows_left && c + e < cols_left;
                copy_async(dst + r * COLS + c + e, inside ? src + r * ld + c + e : src, 4,
                           inside ? 4 : 0);
            }
        }
    }
}
#endif

// A tile's way into local memory: by registers (load_tile now, store_tile later) or, with
// ASYNC and a tile that keeps its layout, straight into dst. Copies of single floats that
// transpose on the way measured 25-30 % slower on an H100 than registers
// (benchmarks/RESULTS.md), so a tile to transpose goes through registers; except with
// ASYNC = 2, where op(A) keeps the layout it has in memory ([m][k] where A_KM = 0: A_KEPT)
// and the compute loop reads it along k.
#define A_COPIED (ASYNC && (A_KM || ASYNC == 2))
#define A_KEPT (A_COPIED && !A_KM)
#define B_COPIED (ASYNC && !TRANSB)
#define A_ROWS (A_KEPT && SA)  // the compute loop reads A along k ...
#define KSTEP (A_ROWS ? (KUNROLL < 4 ? KUNROLL : 4) : 1)  // ... this many values at a time

inline void fetch_tile(float* regs, __local float* dst, const __global STORED* src, const int ld,
                       const int rows_left, const int cols_left, const int ROWS, const int COLS,
                       const int VW, const int transpose, const bool fast, const int tid) {
#if ASYNC
    if (!transpose) {
        copy_tile(dst, src, ld, rows_left, cols_left, ROWS, COLS, VW, fast, tid);
        return;
    }
#endif
    load_tile(regs, src, ld, rows_left, cols_left, ROWS, COLS, VW, transpose, fast, tid);
}

// The tiles of op(A) (MWG x KWG) and op(B) (KWG x NWG) at K offset kb. In memory op(A) is
// MWG rows of KWG (A_KM = 0, transposed on the way to local [k][m] unless A_KEPT) or KWG rows
// of MWG; op(B) is KWG rows of NWG (TRANSB = 0) or NWG rows of KWG (transposed to local [k][n]).
#define A_VECS ((MWG * KWG / VWA) / WGS)
#define B_VECS ((NWG * KWG / VWB) / WGS)

inline void load_a(float* regs, __local float* Als, const __global STORED* A, const int lda,
                   const int m0, const int m_left, const int kb, const int k_left,
                   const bool aligned, const int tid) {
    const bool fast = aligned && k_left >= KWG && m_left >= MWG;
#if A_KM
    fetch_tile(regs, Als, A + kb * lda + m0, lda, k_left, m_left, KWG, MWG, VWA, 0, fast, tid);
#elif A_KEPT
    copy_tile(Als, A + m0 * lda + kb, lda, m_left, k_left, MWG, KWG, VWA, fast, tid);
#else
    fetch_tile(regs, Als, A + m0 * lda + kb, lda, m_left, k_left, MWG, KWG, VWA, 1, fast, tid);
#endif
}

inline void store_a(__local float* Als, const float* regs, const int tid) {
#if A_COPIED
    return;
#elif A_KM
    store_tile(Als, regs, KWG, MWG, VWA, 0, tid);
#else
    store_tile(Als, regs, MWG, KWG, VWA, 1, tid);
#endif
}

inline void load_b(float* regs, __local float* Bls, const __global STORED* B, const int ldb,
                   const int n0, const int n_left, const int kb, const int k_left,
                   const bool aligned, const int tid) {
    const bool fast = aligned && k_left >= KWG && n_left >= NWG;
#if TRANSB
    fetch_tile(regs, Bls, B + n0 * ldb + kb, ldb, n_left, k_left, NWG, KWG, VWB, 1, fast, tid);
#else
    fetch_tile(regs, Bls, B + kb * ldb + n0, ldb, k_left, n_left, KWG, NWG, VWB, 0, fast, tid);
#endif
}

inline void store_b(__local float* Bls, const float* regs, const int tid) {
#if B_COPIED
    return;
#elif TRANSB
    store_tile(Bls, regs, NWG, KWG, VWB, 1, tid);
#else
    store_tile(Bls, regs, KWG, NWG, VWB, 0, tid);
#endif
}

// Local buffers per operand and K group: PF + 1 (compute on one while the others are filled).
// OpenCL declares local arrays in the kernel, so the entries below pass one in. The sum of the
// K groups' register tiles takes the same memory once the K loop is over: a work-group needs the
// larger of the two, not both, which leaves room in 48 KB for K groups beside 64 x 128 tiles.
#define NBUF (PF + 1)
#define A_LOCAL (SA ? KDIMC * NBUF * KWG * MWG : 0)  // [K group][buffer][k][m]
#define B_LOCAL (SB ? KDIMC * NBUF * KWG * NWG : 0)  // [K group][buffer][k][n], after A's
#define SUM_LOCAL (KDIMC > 1 ? MWG * NWG : 0)        // [i * NWI + j][tid], over both
#define MAX_(a, b) ((a) > (b) ? (a) : (b))
#define MIN_(a, b) ((a) < (b) ? (a) : (b))
#define TILES_LOCAL MAX_(MAX_(A_LOCAL + B_LOCAL, SUM_LOCAL), 1)

// How far a tile at `origin` that overhangs the edge of a matrix dimension of `size` moves back
// to lie inside it. An edge tile took the checked loads on every K tile, and where the tiles
// about fill the GPU once, the kernel waited for them (1000-cubed ran 13 % longer than
// 1024-cubed on an H100). Moved, it loads whole tiles on the vector path, computes rows or
// columns of the tile before it again and stores only its own. Not where the dimension is
// smaller than the tile, or where the move would misalign the vectors of a dimension that runs
// along memory (vw: their width); those keep the checks.
//
// The plain kernel only: the same lines in the split-K and packed builds, where no edge tile
// was involved, changed how NVIDIA's compiler allocated their registers, up to 24 % slower
// (benchmarks/RESULTS.md, fifteenth part of issue 19); even with its shift fixed at zero there
// (a helper returning zero, two comparisons more in the edge store) the packed kernel ran 5 %
// slower at 4096-cubed (sixteenth part). So every line of the move is under EDGE_SHIFT, and the
// other builds compile the code they compiled before it (benchmarks/template_reach.py shows it).
#if !defined(PACK_A) && !defined(KSPLIT)
#define EDGE_SHIFT 1
inline int edge_shift(const int size, const int origin, const int TILE, const int vw) {
    const int left = size - origin;
    return left < TILE && size >= TILE && size % vw == 0 ? TILE - left : 0;
}
#else
#define EDGE_SHIFT 0
#endif

// The work-group's tile of C over the K range A and B point at (K deep).
inline void gemm_tile(GEMM_ARGUMENTS, __local float* tiles EPILOGUE_ARGUMENTS) {
    const int tn = get_local_id(0);
    const int tm = get_local_id(1);
    const int tk = get_local_id(2);  // K group: takes K tiles tk, tk + KDIMC, ...
    const int tid = tm * NDIMC + tn;
#if EDGE_SHIFT
    const int m_shift = edge_shift(M, get_group_id(1) * MWG, MWG, A_KM ? VWA : 1);
    const int n_shift = edge_shift(N, get_group_id(0) * NWG, NWG, TRANSB ? 1 : VWB);
    const int m0 = get_group_id(1) * MWG - m_shift;
    const int n0 = get_group_id(0) * NWG - n_shift;
#else
    const int m0 = get_group_id(1) * MWG;
    const int n0 = get_group_id(0) * NWG;
#endif
    const int m_left = M - m0;
    const int n_left = N - n0;
#if BATCHED
    const int c_base = get_group_id(2) * M * ldc;  // this image's C in the output (epilogue)
    B += (size_t)get_group_id(2) * K * ldb;
    C += c_base;
#endif
#if SA
    __local float* Als = tiles + tk * (NBUF * KWG * MWG);
#endif
#if SB
    __local float* Bls = tiles + A_LOCAL + tk * (NBUF * KWG * NWG);
#endif

#if SA
    float ra[A_COPIED ? 1 : A_VECS * VWA];  // a tile on its way through registers
    const bool a_aligned = (lda % VWA) == 0;
#endif
#if SB
    float rb[B_COPIED ? 1 : B_VECS * VWB];
    const bool b_aligned = (ldb % VWB) == 0;
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

#if ASYNC
    // Prologue: the first PF turns' tiles on their way to buffers 0 .. PF - 1, one group of
    // copies per turn (empty past the end of K, so that waits count the same everywhere).
    for (int ahead = 0; ahead < PF * KDIMC * KWG; ahead += KDIMC * KWG) {
        const int k = ahead + tk * KWG;
        const int fill = ahead / (KDIMC * KWG);
        if (ahead < K) {
#if SA
            load_a(ra, Als + fill * (KWG * MWG), A, lda, m0, m_left, k, K - k, a_aligned, tid);
            store_a(Als + fill * (KWG * MWG), ra, tid);
#endif
#if SB
            load_b(rb, Bls + fill * (KWG * NWG), B, ldb, n0, n_left, k, K - k, b_aligned, tid);
            store_b(Bls + fill * (KWG * NWG), rb, tid);
#endif
        }
        COPY_COMMIT();
    }
#elif PF && (SA || SB)
    // Prologue: the first tile goes straight to buffer 0.
#if SA
    load_a(ra, Als, A, lda, m0, m_left, tk * KWG, K - tk * KWG, a_aligned, tid);
    store_a(Als, ra, tid);
#endif
#if SB
    load_b(rb, Bls, B, ldb, n0, n_left, tk * KWG, K - tk * KWG, b_aligned, tid);
    store_b(Bls, rb, tid);
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
#endif

    // Every K group runs the same turns, so that all reach each barrier; a tile past the end
    // of K (k_left <= 0) reads as zeros.
    int buf = 0;  // local buffer the compute loop reads
    for (int turn = 0; turn < K; turn += KDIMC * KWG) {
        const int k0 = turn + tk * KWG;
        const int k_left = K - k0;
#if ASYNC
        // This turn's tiles have landed, everyone's; the buffer computed on last turn is free
        // for the tiles PF turns ahead (a tile through registers is stored after this turn's
        // compute, and has a barrier to cross before it is read).
        COPY_WAIT();
        barrier(CLK_LOCAL_MEM_FENCE);
        const bool more = turn + PF * KDIMC * KWG < K;
        const int ahead = k0 + PF * KDIMC * KWG;
        const int fill = buf == 0 ? PF : buf - 1;
#if SA
        if (more) load_a(ra, Als + fill * (KWG * MWG), A, lda, m0, m_left, ahead, K - ahead, a_aligned, tid);
#endif
#if SB
        if (more) load_b(rb, Bls + fill * (KWG * NWG), B, ldb, n0, n_left, ahead, K - ahead, b_aligned, tid);
#endif
        COPY_COMMIT();
#elif PF
        // Issue the next tile's global loads now; they complete while this tile is computed.
        const bool more = turn + KDIMC * KWG < K;
        const int next = k0 + KDIMC * KWG;
#if SA
        if (more) load_a(ra, Als, A, lda, m0, m_left, next, K - next, a_aligned, tid);
#endif
#if SB
        if (more) load_b(rb, Bls, B, ldb, n0, n_left, next, K - next, b_aligned, tid);
#endif
#else
#if SA
        load_a(ra, Als, A, lda, m0, m_left, k0, k_left, a_aligned, tid);
        store_a(Als, ra, tid);
#endif
#if SB
        load_b(rb, Bls, B, ldb, n0, n_left, k0, k_left, b_aligned, tid);
        store_b(Bls, rb, tid);
#endif
#if SA || SB
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
#endif
#if SA
        const __local float* Acur = Als + buf * (KWG * MWG);
#endif
#if SB
        const __local float* Bcur = Bls + buf * (KWG * NWG);
#endif

#pragma unroll 1
        for (int kk = 0; kk < KWG; kk += KUNROLL) {
#pragma unroll
            for (int kq = 0; kq < KUNROLL; kq += KSTEP) {
#if A_ROWS
                // A kept as [m][k]: KSTEP values of each of this work-item's rows in one read.
                float a_rows[MWI][KSTEP];
#pragma unroll
                for (int i = 0; i < MWI; ++i) load_local_vec(KSTEP, Acur + m_of[i] * KWG + kk + kq, a_rows[i]);
#endif
#pragma unroll
                for (int q = 0; q < KSTEP; ++q) {
                    const int k = kk + kq + q;
                    float a[MWI];
                    float b[NWI];
#if A_ROWS
#pragma unroll
                    for (int i = 0; i < MWI; ++i) a[i] = a_rows[i][q];
#elif SA
#pragma unroll
                    for (int i = 0; i < MWI; i += VWM) load_local_vec(VWM, Acur + k * MWG + m_of[i], a + i);
#else
#pragma unroll
                    for (int i = 0; i < MWI; ++i) {
                        const int m = m_of[i];
                        const bool inside = m < m_left && k < k_left;
#if A_KM
                        a[i] = inside ? LOAD(A, (k0 + k) * lda + m0 + m) : 0.0f;
#else
                        a[i] = inside ? LOAD(A, (m0 + m) * lda + k0 + k) : 0.0f;
#endif
                    }
#endif
#if SB
#pragma unroll
                    for (int j = 0; j < NWI; j += VWN) load_local_vec(VWN, Bcur + k * NWG + n_of[j], b + j);
#else
#pragma unroll
                    for (int j = 0; j < NWI; ++j) {
                        const int n = n_of[j];
                        const bool inside = n < n_left && k < k_left;
#if TRANSB
                        b[j] = inside ? LOAD(B, (n0 + n) * ldb + k0 + k) : 0.0f;
#else
                        b[j] = inside ? LOAD(B, (k0 + k) * ldb + n0 + n) : 0.0f;
#endif
                    }
#endif
                    // a * b + c, which compilers contract to an FMA: PoCL runs mad() as a call
                    // into its kernel library (the same configs ran 3 x slower on a CPU).
#pragma unroll
                    for (int i = 0; i < MWI; ++i) {
#pragma unroll
                        for (int j = 0; j < NWI; ++j) acc[i][j] = a[i] * b[j] + acc[i][j];
                    }
                }
            }
        }
#if ASYNC
#if SA
        if (more) store_a(Als + fill * (KWG * MWG), ra, tid);
#endif
#if SB
        if (more) store_b(Bls + fill * (KWG * NWG), rb, tid);
#endif
        buf = buf == PF ? 0 : buf + 1;
#else
#if PF
        // The other buffer was last read before the previous barrier: safe to fill now.
        buf = 1 - buf;
#if SA
        if (more) store_a(Als + buf * (KWG * MWG), ra, tid);
#endif
#if SB
        if (more) store_b(Bls + buf * (KWG * NWG), rb, tid);
#endif
#endif
#if SA || SB
        // PF: the next tile is in place; otherwise: everyone is done reading this one.
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
#endif
    }

#if KDIMC > 1
    // K groups KDIMC - 1 .. 1 add their tiles into sums in turn (a fixed order, so results do
    // not depend on scheduling), then K group 0 adds sums to its own tile and stores C. The
    // sums overwrite the K tiles: everyone must be done reading them first.
    __local float* sums = tiles;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int g = KDIMC - 1; g > 0; --g) {
        if (tk == g) {
#pragma unroll
            for (int i = 0; i < MWI; ++i) {
#pragma unroll
                for (int j = 0; j < NWI; ++j) {
                    __local float* s = sums + (i * NWI + j) * WGS + tid;
                    *s = g == KDIMC - 1 ? acc[i][j] : *s + acc[i][j];
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tk != 0) return;  // back to the caller: every work-item still reaches its barriers
#pragma unroll
    for (int i = 0; i < MWI; ++i) {
#pragma unroll
        for (int j = 0; j < NWI; ++j) acc[i][j] += sums[(i * NWI + j) * WGS + tid];
    }
#endif

    // Interior tiles with aligned rows store whole vectors; edge tiles store element by element,
    // a moved one (edge_shift) its own rows and columns only.
#if EDGE_SHIFT
    const bool fast_store =
        m_left >= MWG && n_left >= NWG && (ldc % VWN) == 0 && m_shift == 0 && n_shift == 0;
#else
    const bool fast_store = m_left >= MWG && n_left >= NWG && (ldc % VWN) == 0;
#endif
#pragma unroll
    for (int i = 0; i < MWI; ++i) {
        const int m = m_of[i];
        __global STORED* c_row = C + (m0 + m) * ldc + n0;
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
                    for (int e = 0; e < VWN; ++e) out[e] = beta * old[e] + out[e];
                }
                TILE_EPILOGUE_RUN(out, VWN, c_base + (m0 + m) * ldc + n0 + n_of[j]);
                store_vec(VWN, out, c_row + n_of[j]);
            }
#if EDGE_SHIFT
        } else if (m >= m_shift && m < m_left) {  // a moved tile's own rows only
#else
        } else if (m < m_left) {
#endif
#pragma unroll
            for (int j = 0; j < NWI; ++j) {
                const int n = n_of[j];
#if EDGE_SHIFT
                if (n >= n_shift && n < n_left) {
#else
                if (n < n_left) {
#endif
                    const float value = alpha * acc[i][j];
                    const float stored = beta != 0.0f ? beta * LOAD(c_row, n) + value : value;
                    STORE(c_row, n, TILE_EPILOGUE(stored, c_base + (m0 + m) * ldc + n0 + n));
                }
            }
        }
    }
}

// Aligned for the widest vector access: local arrays of float are only 4-byte aligned.
#define LOCAL_TILES __local float tiles[TILES_LOCAL] __attribute__((aligned(32)))

// A build compiles one family member's kernels: a split-K build (KSPLIT) that also held `gemm`
// compiled the tile twice.
#if !defined(PACK_A) && !defined(KSPLIT)
__kernel __attribute__((reqd_work_group_size(NDIMC, MDIMC, KDIMC)))
void gemm(GEMM_ARGUMENTS EPILOGUE_ARGUMENTS) {
    LOCAL_TILES;
    gemm_tile(M, N, K, alpha, beta, A, lda, B, ldb, C, ldc, tiles EPILOGUE_PASS);
}
#elif defined(PACK_A)
#include "gemm_packed.clh"
#endif

#ifdef KSPLIT
#include "gemm_splitk.clh"
#endif
