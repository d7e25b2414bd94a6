// octune GEMV: C = alpha * op(A) * op(B) + beta * C where op(A) is one row (M == 1) or op(B)
// one column (N == 1). Such a product reads each matrix element once and does two flops with
// it, so its speed is the bandwidth of streaming the matrix, not arithmetic: gemm.cl's tiles
// (made to reuse operands from registers) leave most of a GPU idle on it. The arguments are
// gemm.cl's, so a runtime launches either kernel the same way.
//
// Seen as y = mat . x: when N == 1 < M, mat is op(A) (M outputs), x the column op(B); otherwise
// (M == 1, or a small batch M of rows times a wide op(B)) mat is op(B) (N outputs) and each of
// the M rows of op(A) is an x: one pass over the matrix serves MB of them, so a batch of rows
// streams the matrix ceil(M / MB) times, not M times. R outputs per x, each a sum over K. The
// passes are the launch's second dimension of work-groups (one, without a batch).
// Two entries, for the two ways the matrix can lie (the search spaces' `requires:` pick one):
//   gemv_dot   mat(r, k) at mat[r * ldm + k]: each output is the dot product of a contiguous
//              row with x. WG0 work-items along K each sum every WG0-th vector of a row (the
//              warp reads a row segment at once), WG1 along outputs own RT / WG1 rows each;
//              the WG0 partial sums of a row are added in local memory.
//   gemv_axpy  mat(r, k) at mat[k * ldm + r]: the outputs lie contiguously, y is a sum of scaled
//              matrix rows. WG0 work-items along outputs each own RT / (WG0 * VW) vectors of
//              VW outputs, strided by the work-group (the warp reads a row segment at once);
//              WG1 along K each sum every WG1-th row; their partial sums are added in local
//              memory.
// Any M, N, K >= 1 and any leading dimension: a matrix whose rows are not aligned to VW floats
// is read element by element. With beta == 0, C is never read (BLAS semantics).
//
// Workload defines: TRANSA, TRANSB (0: op(X) = X; 1: op(X) = X^T).
// Tuning defines (search_spaces/gemv_dot.yaml, gemv_axpy.yaml):
//   WG0, WG1   work-group shape (dimension 0 is the direction the matrix is contiguous in)
//   RT         outputs per work-group
//   VW         vector width of matrix loads (along K in gemv_dot, along outputs in gemv_axpy)
//   UNROLL     iterations of the streaming loop issued together (loads in flight per item)
//   MB         x vectors per pass over the matrix (optional, default 1; the batch spaces
//              gemv_dot_batch.yaml and gemv_axpy_batch.yaml tune it)
//   KSPLIT     gemv_axpy_splitk only (gemv_axpy_splitk.yaml): slices of K summed by separate
//              work-groups, added up in the same launch

#if !defined(WG0) || !defined(WG1) || !defined(RT) || !defined(VW) || !defined(UNROLL)
#error "tuning parameters missing: build with -D WG0=.. -D WG1=.. -D RT=.. -D VW=.. -D UNROLL=.."
#endif
#if !defined(TRANSA) || !defined(TRANSB)
#error "workload defines missing: build with -D TRANSA=0|1 -D TRANSB=0|1"
#endif
#ifndef MB
#define MB 1
#endif
// octune builds with -D OCTUNE_ENTRY_<the space's entry>: only that entry's section compiles.
// The other, built with this config's tiles, can be far bigger (gemv_dot with a gemv_axpy
// config's RT 512 and WG1 1 unrolls 512 rows per work-item). Without it, both compile.
#if !defined(OCTUNE_ENTRY_gemv_dot) && !defined(OCTUNE_ENTRY_gemv_axpy) && \
    !defined(OCTUNE_ENTRY_gemv_axpy_splitk)
#define GEMV_EVERY_ENTRY
#endif

#include "precision.clh"
#include "vector_io.clh"
#include "gemm_arguments.clh"
#include "slice_handoff.clh"

// The product as y = mat . x, whichever of A and B is the vector.
typedef struct {
    const __global STORED* mat;
    const __global STORED* x;
    int outputs;  // R
    int batch;    // x vectors, each giving R outputs
    int ldm;      // matrix row stride in elements
    int incx;     // stride of an x vector's elements
    int ldx;      // stride from one x vector to the next
    int incy;     // stride of C's elements along the outputs
    int ldy;      // stride from one x vector's outputs to the next's
} Operands;

inline Operands operands(const int M, const int N, const __global STORED* A, const int lda,
                         const __global STORED* B, const int ldb, const int ldc) {
    Operands o;
    const bool rows_of_a = N > 1 || M == 1;  // y (M x N) = x (M x K) . op(B)
    o.outputs = rows_of_a ? N : M;
    o.batch = rows_of_a ? M : 1;
    o.mat = rows_of_a ? B : A;
    o.ldm = rows_of_a ? ldb : lda;
    o.x = rows_of_a ? A : B;
    o.incx = rows_of_a ? (TRANSA ? lda : 1) : (TRANSB ? 1 : ldb);
    o.ldx = rows_of_a ? (TRANSA ? 1 : lda) : 0;
    o.incy = rows_of_a ? 1 : ldc;
    o.ldy = rows_of_a ? ldc : 0;
    return o;
}

// Where each of the pass's MB x vectors starts; those past the batch repeat its last (their
// outputs are not stored), so the streaming loop has no branch.
inline void batch_offsets(const Operands o, const int b0, int* x_of) {
#pragma unroll
    for (int b = 0; b < MB; ++b) x_of[b] = min(b0 + b, o.batch - 1) * o.ldx;
}

inline void store_output(__global STORED* C, const int index, const float sum, const float alpha,
                         const float beta) {
    const float scaled = alpha * sum;
    STORE(C, index, beta == 0.0f ? scaled : scaled + beta * LOAD(C, index));
}

// Loads W elements of the x vector at x_at from k on (aligned to W floats when contiguous).
inline void load_x(const int w, const Operands o, const int x_at, const int k, float* xv) {
    if (o.incx == 1) {
        load_vec(w, o.x + x_at + k, xv);
    } else {
        for (int e = 0; e < w; ++e) xv[e] = LOAD(o.x, x_at + (k + e) * o.incx);
    }
}

#if defined(GEMV_EVERY_ENTRY) || defined(OCTUNE_ENTRY_gemv_dot)
// --- gemv_dot ----------------------------------------------------------------------------------

#define ROWS_PER_ITEM (RT / WG1)
#define DOT_ACC (ROWS_PER_ITEM * VW)  // accumulators per x vector

// One step of the streaming loop: W elements of each of the item's rows from k on, against
// each x vector of the pass.
inline void dot_step(const int w, const Operands o, const int* rows, const int* x_of, const int k,
                     float* acc) {
    float xv[MB * VW];
#pragma unroll
    for (int b = 0; b < MB; ++b) load_x(w, o, x_of[b], k, xv + b * VW);
#pragma unroll
    for (int i = 0; i < ROWS_PER_ITEM; ++i) {
        float a[VW];
        load_vec(w, o.mat + rows[i] * o.ldm + k, a);
#pragma unroll
        for (int b = 0; b < MB; ++b) {
#pragma unroll
            for (int e = 0; e < w; ++e) acc[b * DOT_ACC + i * VW + e] += a[e] * xv[b * VW + e];
        }
    }
}

// This item's part of each row's dot products, in vectors of W (VW, or 1 where the rows are not
// aligned to VW floats); the K % W elements at the end element by element. sums[b][i].
inline void dot_rows(const int w, const Operands o, const int K, const int* rows, const int* x_of,
                     const int t0, float* sums) {
    float acc[MB * DOT_ACC];
#pragma unroll
    for (int i = 0; i < MB * DOT_ACC; ++i) acc[i] = 0.0f;
    const int whole = K - K % w;
    const int step = WG0 * w;
    int k = t0 * w;
    for (; k + (UNROLL - 1) * step < whole; k += UNROLL * step) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dot_step(w, o, rows, x_of, k + u * step, acc);
    }
    for (; k < whole; k += step) dot_step(w, o, rows, x_of, k, acc);
#pragma unroll
    for (int b = 0; b < MB; ++b) {
#pragma unroll
        for (int i = 0; i < ROWS_PER_ITEM; ++i) {
            float sum = 0.0f;
            for (int e = 0; e < w; ++e) sum += acc[b * DOT_ACC + i * VW + e];
            for (int kk = whole + t0; kk < K; kk += WG0) {
                sum += LOAD(o.mat, rows[i] * o.ldm + kk) * LOAD(o.x, x_of[b] + kk * o.incx);
            }
            sums[b * ROWS_PER_ITEM + i] = sum;
        }
    }
}

__kernel __attribute__((reqd_work_group_size(WG0, WG1, 1)))
void gemv_dot(GEMM_ARGUMENTS) {
    const Operands o = operands(M, N, A, lda, B, ldb, ldc);
    const int t0 = get_local_id(0);
    const int t1 = get_local_id(1);
    const int r0 = get_group_id(0) * RT;
#if WG0 > 1
    __local float partial[RT * WG0];  // [row of the tile][t0]
#endif

    // Rows past the last output repeat it (their sums are not stored): no branch in the loop.
    int rows[ROWS_PER_ITEM];
#pragma unroll
    for (int i = 0; i < ROWS_PER_ITEM; ++i) rows[i] = min(r0 + t1 + i * WG1, o.outputs - 1);
    const bool aligned = o.ldm % VW == 0 && o.incx == 1 && (o.batch == 1 || o.ldx % VW == 0);
    for (int b0 = get_group_id(1) * MB; b0 < o.batch; b0 += get_num_groups(1) * MB) {
        int x_of[MB];
        batch_offsets(o, b0, x_of);
        float sums[MB * ROWS_PER_ITEM];
        if (aligned) {
            dot_rows(VW, o, K, rows, x_of, t0, sums);
        } else {
            dot_rows(1, o, K, rows, x_of, t0, sums);
        }
#pragma unroll
        for (int b = 0; b < MB; ++b) {
            if (b0 + b >= o.batch) break;  // the same for the whole work-group
            __global STORED* y = C + (b0 + b) * o.ldy;
#if WG0 > 1
#pragma unroll
            for (int i = 0; i < ROWS_PER_ITEM; ++i) {
                partial[(t1 + i * WG1) * WG0 + t0] = sums[b * ROWS_PER_ITEM + i];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int span = WG0 / 2; span > 0; span /= 2) {
                if (t0 < span) {
#pragma unroll
                    for (int i = 0; i < ROWS_PER_ITEM; ++i) {
                        const int at = (t1 + i * WG1) * WG0 + t0;
                        partial[at] += partial[at + span];
                    }
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            for (int i = t0; i < ROWS_PER_ITEM; i += WG0) {
                const int row = r0 + t1 + i * WG1;
                if (row < o.outputs) {
                    store_output(y, row * o.incy, partial[(t1 + i * WG1) * WG0], alpha, beta);
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);  // read before the next x vector's sums overwrite
#else
#pragma unroll
            for (int i = 0; i < ROWS_PER_ITEM; ++i) {
                const int row = r0 + t1 + i * WG1;
                if (row < o.outputs) {
                    store_output(y, row * o.incy, sums[b * ROWS_PER_ITEM + i], alpha, beta);
                }
            }
#endif
        }
    }
}

#endif  // gemv_dot

#if defined(GEMV_EVERY_ENTRY) || defined(OCTUNE_ENTRY_gemv_axpy) || \
    defined(OCTUNE_ENTRY_gemv_axpy_splitk)
// --- gemv_axpy ---------------------------------------------------------------------------------

#define VECS_PER_ITEM (RT / (WG0 * VW))
#define AXPY_ACC (VECS_PER_ITEM * VW)  // accumulators per x vector

// One matrix row's contribution to the item's outputs for each x vector of the pass: vectors
// when the whole work-group tile lies inside the matrix and aligned, else element by element
// with the edge checked.
inline void axpy_step(const bool edge, const Operands o, const int* x_of, const int r0,
                      const int t0, const int k, float* acc) {
    float xk[MB];
#pragma unroll
    for (int b = 0; b < MB; ++b) xk[b] = LOAD(o.x, x_of[b] + k * o.incx);
    const __global STORED* row = o.mat + k * o.ldm + r0;
#pragma unroll
    for (int j = 0; j < VECS_PER_ITEM; ++j) {
        const int c = (j * WG0 + t0) * VW;
        float a[VW];
        if (edge) {
#pragma unroll
            for (int e = 0; e < VW; ++e) a[e] = r0 + c + e < o.outputs ? LOAD(row, c + e) : 0.0f;
        } else {
            load_vec(VW, row + c, a);
        }
#pragma unroll
        for (int b = 0; b < MB; ++b) {
#pragma unroll
            for (int e = 0; e < VW; ++e) acc[b * AXPY_ACC + j * VW + e] += a[e] * xk[b];
        }
    }
}

inline void axpy_rows(const bool edge, const Operands o, const int* x_of, const int K,
                      const int r0, const int t0, const int t1, float* acc) {
    int k = t1;
    for (; k + (UNROLL - 1) * WG1 < K; k += UNROLL * WG1) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) axpy_step(edge, o, x_of, r0, t0, k + u * WG1, acc);
    }
    for (; k < K; k += WG1) axpy_step(edge, o, x_of, r0, t0, k, acc);
}

// y = alpha * mat . x + beta * y over the matrix rows [0, K) for this work-group's RT outputs
// (y: C as the operands lay it out), for the passes of x vectors pass, pass + passes, ...
// `partial` holds the WG1 partial sums of the tile.
inline void axpy_tile(const Operands o, const int K, const float alpha, const float beta,
                      __global STORED* C, __local float* partial, const int pass,
                      const int passes) {
    const int t0 = get_local_id(0);
    const int t1 = get_local_id(1);
    const int r0 = get_group_id(0) * RT;
    const bool edge = r0 + RT > o.outputs || o.ldm % VW != 0;

    for (int b0 = pass * MB; b0 < o.batch; b0 += passes * MB) {
        int x_of[MB];
        batch_offsets(o, b0, x_of);
        float acc[MB * AXPY_ACC];
#pragma unroll
        for (int i = 0; i < MB * AXPY_ACC; ++i) acc[i] = 0.0f;
        if (edge) {
            axpy_rows(true, o, x_of, K, r0, t0, t1, acc);
        } else {
            axpy_rows(false, o, x_of, K, r0, t0, t1, acc);
        }
#pragma unroll
        for (int b = 0; b < MB; ++b) {
            if (b0 + b >= o.batch) break;  // the same for the whole work-group
            __global STORED* y = C + (b0 + b) * o.ldy;
#if WG1 > 1
#pragma unroll
            for (int j = 0; j < VECS_PER_ITEM; ++j) {
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    partial[t1 * RT + (j * WG0 + t0) * VW + e] = acc[b * AXPY_ACC + j * VW + e];
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int span = WG1 / 2; span > 0; span /= 2) {
                if (t1 < span) {
#pragma unroll
                    for (int j = 0; j < VECS_PER_ITEM; ++j) {
#pragma unroll
                        for (int e = 0; e < VW; ++e) {
                            const int at = t1 * RT + (j * WG0 + t0) * VW + e;
                            partial[at] += partial[at + span * RT];
                        }
                    }
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            for (int c = t1 * WG0 + t0; c < RT; c += WG0 * WG1) {
                if (r0 + c < o.outputs) store_output(y, (r0 + c) * o.incy, partial[c], alpha, beta);
            }
            barrier(CLK_LOCAL_MEM_FENCE);  // read before the next x vector's sums overwrite
#else
#pragma unroll
            for (int j = 0; j < VECS_PER_ITEM; ++j) {
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    const int c = (j * WG0 + t0) * VW + e;
                    if (r0 + c < o.outputs) {
                        store_output(y, (r0 + c) * o.incy, acc[b * AXPY_ACC + j * VW + e], alpha,
                                     beta);
                    }
                }
            }
#endif
        }
    }
}

#define AXPY_LOCAL (WG1 > 1 ? WG1 * RT : 1)  // [t1][output of the tile]

#ifndef KSPLIT  // the split's build holds its own kernel only
__kernel __attribute__((reqd_work_group_size(WG0, WG1, 1)))
void gemv_axpy(GEMM_ARGUMENTS) {
    __local float partial[AXPY_LOCAL];
    axpy_tile(operands(M, N, A, lda, B, ldb, ldc), K, alpha, beta, C, partial, get_group_id(1),
              get_num_groups(1));
}
#else
// Split-K (search_spaces/gemv_axpy_splitk.yaml): where the outputs are too few to give enough
// work-groups long row segments, work-group z of the second launch dimension sums rows
// [z * slice, (z + 1) * slice) into a partial y in the workspace, after one counter per tile of
// outputs (zero when the launch starts); the last work-group of a tile adds the KSPLIT partial
// ys in the order of z and sets the counter back to zero (slice_handoff.clh).
#define AXPY_COUNTERS(tiles) (((tiles) + 63) / 64 * 64)

__kernel __attribute__((reqd_work_group_size(WG0, WG1, 1)))
void gemv_axpy_splitk(GEMM_ARGUMENTS, __global float* workspace) {
    __local float partial[AXPY_LOCAL];
    __local int last;
    const Operands o = operands(M, N, A, lda, B, ldb, ldc);
    const int z = get_group_id(1);
    const int slice = (K + KSPLIT - 1) / KSPLIT;
    const int kb = min(z * slice, K);
    const int span = o.outputs * o.batch;  // one partial y: the outputs of every x vector
    __global float* partials = workspace + AXPY_COUNTERS(get_num_groups(0));
    Operands part = o;  // this slice's rows, its y contiguous in its part of the workspace
    part.mat += kb * o.ldm;
    part.x += kb * o.incx;
    part.incy = 1;
    part.ldy = o.outputs;
    axpy_tile(part, min(slice, K - kb), 1.0f, 0.0f, partials + z * span, partial, 0, 1);

    volatile __global int* counter = (volatile __global int*)workspace + get_group_id(0);
    if (!last_slice_done(counter, KSPLIT, &last)) return;  // the same for the whole work-group
    const int r0 = get_group_id(0) * RT;
    const volatile __global float* sums = partials;
    for (int i = get_local_id(1) * WG0 + get_local_id(0); i < RT * o.batch; i += WG0 * WG1) {
        const int b = i / RT;
        const int r = r0 + i % RT;
        if (r < o.outputs) {
            float sum = 0.0f;
#pragma unroll
            for (int s = 0; s < KSPLIT; ++s) sum += sums[s * span + b * o.outputs + r];
            store_output(C + b * o.ldy, r * o.incy, sum, alpha, beta);
        }
    }
    if (get_local_id(0) == 0 && get_local_id(1) == 0) atomic_xchg(counter, 0);
}
#endif
#endif  // gemv_axpy, gemv_axpy_splitk
