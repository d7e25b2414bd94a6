// octune depthwise convolution: y = conv2d(x, w, stride, pad, groups = C), float32, NCHW.
//
// x is N x C x H x W, w is C x 1 x R x S (R = S = 3, one filter per channel), y is N x C x OH x OW:
//   y[n][c][oh][ow] = sum_{r,s} w[c][0][r][s] * x[n][c][oh*STRIDE - PAD + r][ow*STRIDE - PAD + s]
// with x read as zero outside the image (cross-correlation as PyTorch's conv2d, no bias). Every
// (n, c) is an independent plane, so the kernel treats the N*C planes alike (channel = plane % C).
// Any shape: work-groups whose input tile overhangs an edge of the image (or of the planes) take
// a guarded path, all others unguarded vector loads and stores.
//
// Workload defines (fixed per problem, not tuned):
//   R, S           filter size (3 x 3)
//   STRIDE, PAD    stride (1 or 2) and zero padding on each side
//   DILATION       1; GROUPS = C = K (checked by the search space's requires:)
// Tuning defines (see search_spaces/conv2d_depthwise.yaml):
//   WGX, WGY, WGC  work-group shape: WGX work-items along output columns (dimension 0), WGY along
//                  output rows (dimension 1), WGC along planes (dimension 2)
//   OWPT, OHPT     a work-item's output tile: OHPT rows x OWPT contiguous columns
//   CPT            planes per work-item, WGC apart, computed one after the other
//   VW             vector width of x loads, local reads and y stores along W (OWPT % VW == 0)
//   LOCAL          1: the work-group first copies its input tile (WGC*CPT planes of
//                  (OHPT*WGY-1)*STRIDE+R rows x (OWPT*WGX-1)*STRIDE+S columns, plus alignment)
//                  to local memory in coalesced vectors, each element read from global memory
//                  once; 0: each work-item reads its window from global memory, the halo it
//                  shares with its neighbours coming from the cache
//
// Why: at R*S multiply-adds per output a depthwise layer is bound by memory traffic, so the design
// moves x once and in wide, coalesced accesses, and keeps everything else in registers. A
// work-item slides down its window one input row at a time: it loads the (OWPT-1)*STRIDE+S values
// of the row once, as aligned VW-wide vectors (starting LEAD columns left of the window so that
// vectors line up with the row), and adds them into every output row that row feeds. The R*S taps
// are held in registers and all loops over taps and tiles are unrolled at compile time. Small
// planes (7 x 7) fill a work-group with several planes (WGC) rather than idle work-items. Products
// are summed as a * b + c, which compilers contract to an FMA: PoCL compiles mad() to a call that
// its vectoriser cannot see through (2-3x slower there).

#if !defined(WGX) || !defined(WGY) || !defined(WGC) || !defined(OWPT) || !defined(OHPT) || \
    !defined(CPT) || !defined(VW) || !defined(LOCAL)
#error "tuning parameters missing: see search_spaces/conv2d_depthwise.yaml for the full list"
#endif
#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD)
#error "workload defines missing: build with -D R=3 -D S=3 -D STRIDE=.. -D PAD=.."
#endif

#define WGS (WGX * WGY * WGC)
#define PLANES (WGC * CPT)                              // planes of a work-group
#define LEAD ((VW - PAD % VW) % VW)                     // columns loaded left of a window
#define ROUND_VW(n) (((n) + VW - 1) / VW * VW)
#define WIN_ROWS ((OHPT - 1) * STRIDE + R)              // input rows of a work-item's window
#define SEG ROUND_VW(LEAD + (OWPT - 1) * STRIDE + S)    // values it loads per input row
#define TILE_ROWS ((OHPT * WGY - 1) * STRIDE + R)       // the work-group's input tile
#define TILE_COLS ((WGX - 1) * OWPT * STRIDE + SEG)

// VEC is VW floats; TO_PRIVATE(v, p) and FROM_PRIVATE(p) move one to and from a private array.
#if VW == 1
#define VEC float
#define TO_PRIVATE(v, p) ((p)[0] = (v))
#define FROM_PRIVATE(p) ((p)[0])
#else
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define VEC CAT(float, VW)
#define TO_PRIVATE(v, p) CAT(vstore, VW)(v, 0, p)
#define FROM_PRIVATE(p) CAT(vload, VW)(0, p)
#endif

__kernel __attribute__((reqd_work_group_size(WGX, WGY, WGC)))
void conv2d_depthwise(const __global float* restrict x, const __global float* restrict w,
                      __global float* restrict y, const int N, const int C, const int H,
                      const int W, const int K, const int OH, const int OW) {
    const int tx = get_local_id(0), ty = get_local_id(1), tz = get_local_id(2);
    const int ow0 = get_global_id(0) * OWPT;  // this work-item's first output column and row
    const int oh0 = get_global_id(1) * OHPT;
    const int plane0 = get_group_id(2) * PLANES + tz;  // its first plane
    const int planes = N * C;

    // The work-group's input tile: PLANES planes from p0, TILE_ROWS rows from th0, TILE_COLS
    // columns from tw0, a multiple of VW (the work-group's first output column is a multiple of
    // OWPT, hence of VW, and LEAD makes up for PAD). In an interior work-group the tile and all
    // its outputs lie inside the image and rows start on whole vectors: it reads and writes
    // unguarded vectors. The test is the same for all work-items of a work-group, so none of
    // them diverges from its neighbours over it.
    const int p0 = get_group_id(2) * PLANES;
    const int th0 = get_group_id(1) * (OHPT * WGY * STRIDE) - PAD;
    const int tw0 = get_group_id(0) * (OWPT * WGX * STRIDE) - PAD - LEAD;
    const bool interior = W % VW == 0 && OW % VW == 0 && p0 + PLANES <= planes && th0 >= 0 &&
                          th0 + TILE_ROWS <= H && tw0 >= 0 && tw0 + TILE_COLS <= W;

#if LOCAL
    __local float tile[PLANES][TILE_ROWS][TILE_COLS] __attribute__((aligned(16)));
    // Vector v of the tile: neighbouring work-items take neighbouring vectors of a row (coalesced).
    for (int v = (tz * WGY + ty) * WGX + tx; v < PLANES * TILE_ROWS * (TILE_COLS / VW); v += WGS) {
        const int c = v % (TILE_COLS / VW) * VW;
        const int r = v / (TILE_COLS / VW) % TILE_ROWS;
        const int p = v / (TILE_COLS / VW * TILE_ROWS);
        const int ih = th0 + r, iw = tw0 + c;
        const int at = ((p0 + p) * H + ih) * W + iw;
        if (interior) {
            *(__local VEC*)&tile[p][r][c] = *(const __global VEC*)(x + at);
        } else {
            const bool row_inside = p0 + p < planes && ih >= 0 && ih < H;
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                tile[p][r][c + e] = row_inside && iw + e >= 0 && iw + e < W ? x[at + e] : 0.0f;
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    if (ow0 >= OW || oh0 >= OH) return;

    // This work-item's window: input rows from ih0, columns from iwa (LEAD left of the first tap).
    const int ih0 = oh0 * STRIDE - PAD;
    const int iwa = ow0 * STRIDE - PAD - LEAD;

#pragma unroll
    for (int cp = 0; cp < CPT; ++cp) {
        const int plane = plane0 + cp * WGC;
        if (plane >= planes) return;

        float taps[R * S];
#pragma unroll
        for (int t = 0; t < R * S; ++t) taps[t] = w[plane % C * (R * S) + t];
        float acc[OHPT][OWPT];
#pragma unroll
        for (int i = 0; i < OHPT; ++i) {
#pragma unroll
            for (int j = 0; j < OWPT; ++j) acc[i][j] = 0.0f;
        }

#pragma unroll
        for (int ir = 0; ir < WIN_ROWS; ++ir) {
            float seg[SEG];  // input row ih0 + ir, columns iwa ...
#if LOCAL
            const __local float* src =
                &tile[cp * WGC + tz][ty * OHPT * STRIDE + ir][tx * OWPT * STRIDE];
#pragma unroll
            for (int j = 0; j < SEG; j += VW) TO_PRIVATE(*(const __local VEC*)(src + j), seg + j);
#else
            const int ih = ih0 + ir;
            const __global float* src = x + (plane * H + ih) * W + iwa;
            if (interior) {
#pragma unroll
                for (int j = 0; j < SEG; j += VW) {
                    TO_PRIVATE(*(const __global VEC*)(src + j), seg + j);
                }
            } else {
                const bool row_inside = ih >= 0 && ih < H;
#pragma unroll
                for (int j = 0; j < SEG; ++j) {
                    seg[j] = row_inside && iwa + j >= 0 && iwa + j < W ? src[j] : 0.0f;
                }
            }
#endif
            // Row ir feeds output row i through filter row ir - i*STRIDE (known at compile time).
#pragma unroll
            for (int i = 0; i < OHPT; ++i) {
                const int r = ir - i * STRIDE;
                if (r >= 0 && r < R) {
#pragma unroll
                    for (int j = 0; j < OWPT; ++j) {
#pragma unroll
                        for (int s = 0; s < S; ++s) {
                            acc[i][j] += taps[r * S + s] * seg[LEAD + j * STRIDE + s];
                        }
                    }
                }
            }
        }

        __global float* out = y + (plane * OH + oh0) * OW + ow0;
#pragma unroll
        for (int i = 0; i < OHPT; ++i) {
            if (oh0 + i >= OH) break;
            if (interior) {
#pragma unroll
                for (int j = 0; j < OWPT; j += VW) {
                    *(__global VEC*)(out + i * OW + j) = FROM_PRIVATE(acc[i] + j);
                }
            } else {
#pragma unroll
                for (int j = 0; j < OWPT; ++j) {
                    if (ow0 + j < OW) out[i * OW + j] = acc[i][j];
                }
            }
        }
    }
}
