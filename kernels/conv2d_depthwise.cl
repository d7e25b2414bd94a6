// octune depthwise convolution: y = conv2d(x, w, stride, pad, groups = C), NCHW or NHWC, in
// float32 or with float16 storage (kernels/precision.clh; conv2d_depthwise_float16.yaml).
//
// NCHW: x is N x C x H x W, w is C x 1 x R x S (one filter per channel), y is N x C x OH x OW:
//   y[n][c][oh][ow] = sum_{r,s} w[c][0][r][s] * x[n][c][oh*STRIDE - PAD + r*DILATION]
//                                                    [ow*STRIDE - PAD + s*DILATION]
// with x read as zero outside the image (cross-correlation as PyTorch's conv2d, no bias). NHWC:
// x is N x H x W x C, y is N x OH x OW x C, w as in NCHW (C x R x S x 1 lies as C x 1 x R x S).
// Any shape: work-groups (NCHW) or work-items (NHWC) whose input overhangs an edge of the image
// (or of the planes, or channels) take a guarded path, all others unguarded vector loads and
// stores.
//
// Workload defines (fixed per problem, not tuned):
//   R, S           filter size (MobileNet's 3 x 3, EfficientNet's 5 x 5, ConvNeXt's 7 x 7: a
//                  dilated window of at most 7 x 7, the search space's requires:)
//   STRIDE, PAD    stride (1 or 2) and zero padding on each side
//   DILATION       spacing of the taps; GROUPS = C = K
//   NHWC           layout: 0 NCHW (the kernel below), 1 NHWC (the kernel at the end)
// NCHW tuning defines (see search_spaces/conv2d_depthwise.yaml):
//   WGX, WGY, WGC  work-group shape: WGX work-items along output columns (dimension 0), WGY along
//                  output rows (dimension 1), WGC along planes (dimension 2)
//   OWPT, OHPT     a work-item's output tile: OHPT rows x OWPT contiguous columns
//   CPT            planes per work-item, WGC apart, computed one after the other
//   VW             vector width of x loads, local reads and y stores along W (OWPT % VW == 0)
//   LOCAL          1: the work-group first copies its input tile (WGC*CPT planes of
//                  (OHPT*WGY-1)*STRIDE+RD rows x (OWPT*WGX-1)*STRIDE+SD columns, plus
//                  alignment; RD, SD the dilated filter's extent)
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
//
// NHWC tuning defines (see search_spaces/conv2d_depthwise_nhwc.yaml):
//   WGC, WGX, WGY  work-group shape: WGC work-items along channel vectors (dimension 0), WGX along
//                  output columns (dimension 1), WGY along output rows of the images (dimension 2)
//   OWPT, OHPT     a work-item's output tile: OHPT rows x OWPT contiguous columns
//   VW             channels per work-item: one vector, the unit of every load, FMA and store
// Why: channels lie contiguous, so vectors of channels need no alignment games along W (no LEAD),
// and neighbouring work-items take neighbouring vectors of the same pixels (coalesced). A
// work-item slides down its window as the NCHW kernel does, each input row's (OWPT-1)*STRIDE+S
// pixels loaded once; the halo it shares with its neighbours comes from the cache.

#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD) || !defined(DILATION) || \
    !defined(NHWC)
#error "workload defines missing: build with -D R=.. -D S=.. -D STRIDE=.. -D PAD=.. -D NHWC=.."
#endif
#if NHWC && (!defined(WGX) || !defined(WGY) || !defined(WGC) || !defined(OWPT) || \
             !defined(OHPT) || !defined(VW))
#error "tuning parameters missing: see search_spaces/conv2d_depthwise_nhwc.yaml for the full list"
#elif !NHWC && (!defined(WGX) || !defined(WGY) || !defined(WGC) || !defined(OWPT) || \
                !defined(OHPT) || !defined(CPT) || !defined(VW) || !defined(LOCAL))
#error "tuning parameters missing: see search_spaces/conv2d_depthwise.yaml for the full list"
#endif

#define WGS (WGX * WGY * WGC)
#define RD ((R - 1) * DILATION + 1)                     // the filter's extent in input rows
#define SD ((S - 1) * DILATION + 1)                     // and in input columns
#define WIN_ROWS ((OHPT - 1) * STRIDE + RD)             // input rows of a work-item's window

#include "precision.clh"
#include "epilogue.clh"

// VEC is VW floats; TO_PRIVATE(v, p) and FROM_PRIVATE(p) move one to and from a private array;
// LOAD_VEC(p) and STORE_VEC(v, p) read and write one at p in global memory, aligned to VW
// elements, whose elements are STORED (kernels/precision.clh: float, or half through
// vloada_halfN and vstorea_halfN, one aligned access as the float path's vector is).
#if VW == 1
#define VEC float
#define TO_PRIVATE(v, p) ((p)[0] = (v))
#define FROM_PRIVATE(p) ((p)[0])
#define LOAD_VEC(p) LOAD(p, 0)
#define STORE_VEC(v, p) STORE(p, 0, v)
#else
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define VEC CAT(float, VW)
#define TO_PRIVATE(v, p) CAT(vstore, VW)(v, 0, p)
#define FROM_PRIVATE(p) CAT(vload, VW)(0, p)
#ifdef OCTUNE_FLOAT16
#define LOAD_VEC(p) CAT(vloada_half, VW)(0, p)
#define STORE_VEC(v, p) CAT(vstorea_half, CAT(VW, _rte))(v, 0, p)
#else
#define LOAD_VEC(p) (*(const __global VEC*)(p))
#define STORE_VEC(v, p) (*(__global VEC*)(p) = (v))
#endif
#endif

#if !NHWC
#define PLANES (WGC * CPT)                              // planes of a work-group
#define LEAD ((VW - PAD % VW) % VW)                     // columns loaded left of a window
#define ROUND_VW(n) (((n) + VW - 1) / VW * VW)
#define SEG ROUND_VW(LEAD + (OWPT - 1) * STRIDE + SD)   // values it loads per input row
#define TILE_ROWS ((OHPT * WGY - 1) * STRIDE + RD)      // the work-group's input tile
#define TILE_COLS ((WGX - 1) * OWPT * STRIDE + SEG)

__kernel __attribute__((reqd_work_group_size(WGX, WGY, WGC)))
void conv2d_depthwise(const __global STORED* restrict x, const __global STORED* restrict w,
                      __global STORED* restrict y, const int N, const int C, const int H,
                      const int W, const int K, const int OH, const int OW EPILOGUE_ARGUMENTS) {
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
            *(__local VEC*)&tile[p][r][c] = LOAD_VEC(x + at);
        } else {
            const bool row_inside = p0 + p < planes && ih >= 0 && ih < H;
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                tile[p][r][c + e] = row_inside && iw + e >= 0 && iw + e < W ? LOAD(x, at + e) : 0.0f;
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
        for (int t = 0; t < R * S; ++t) taps[t] = LOAD(w, plane % C * (R * S) + t);
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
            const __global STORED* src = x + (plane * H + ih) * W + iwa;
            if (interior) {
#pragma unroll
                for (int j = 0; j < SEG; j += VW) TO_PRIVATE(LOAD_VEC(src + j), seg + j);
            } else {
                const bool row_inside = ih >= 0 && ih < H;
#pragma unroll
                for (int j = 0; j < SEG; ++j) {
                    seg[j] = row_inside && iwa + j >= 0 && iwa + j < W ? LOAD(src, j) : 0.0f;
                }
            }
#endif
            // Row ir feeds output row i through filter row (ir - i*STRIDE) / DILATION where that
            // divides (known at compile time: the loops are unrolled).
#pragma unroll
            for (int i = 0; i < OHPT; ++i) {
                const int rd = ir - i * STRIDE;
                if (rd >= 0 && rd < RD && rd % DILATION == 0) {
                    const int r = rd / DILATION;
#pragma unroll
                    for (int j = 0; j < OWPT; ++j) {
#pragma unroll
                        for (int s = 0; s < S; ++s) {
                            acc[i][j] += taps[r * S + s] * seg[LEAD + j * STRIDE + s * DILATION];
                        }
                    }
                }
            }
        }

        __global STORED* out = y + (plane * OH + oh0) * OW + ow0;
#pragma unroll
        for (int i = 0; i < OHPT; ++i) {
            if (oh0 + i >= OH) break;
            if (interior) {
#pragma unroll
                for (int j = 0; j < OWPT; j += VW) {
                    EPILOGUE_RUN(acc[i] + j, VW, out + i * OW + j - y);
                    STORE_VEC(FROM_PRIVATE(acc[i] + j), out + i * OW + j);
                }
            } else {
#pragma unroll
                for (int j = 0; j < OWPT; ++j) {
                    if (ow0 + j < OW) STORE(out, i * OW + j, EPILOGUE(acc[i][j], out + i * OW + j - y));
                }
            }
        }
    }
}

#else  // NHWC
#define WIN_COLS ((OWPT - 1) * STRIDE + SD)  // input pixels of a window row

// The VW channels at p: one vector where `whole` (C % VW == 0: aligned, inside C), else element
// by element, channels from c_left on reading as zero; zero outside the image (!inside).
inline VEC load_channels(const __global STORED* p, const bool inside, const bool whole,
                         const int c_left) {
    if (inside && whole) return LOAD_VEC(p);
    float v[VW];
#pragma unroll
    for (int e = 0; e < VW; ++e) v[e] = inside && e < c_left ? LOAD(p, e) : 0.0f;
    return FROM_PRIVATE(v);
}

__kernel __attribute__((reqd_work_group_size(WGC, WGX, WGY)))
void conv2d_depthwise(const __global STORED* restrict x, const __global STORED* restrict w,
                      __global STORED* restrict y, const int N, const int C, const int H,
                      const int W, const int K, const int OH, const int OW EPILOGUE_ARGUMENTS) {
    const int c0 = get_global_id(0) * VW;  // this work-item's first channel, column and row
    const int ow0 = get_global_id(1) * OWPT;
    const int row_groups = (OH + WGY * OHPT - 1) / (WGY * OHPT);  // work-groups per image
    const int image = get_group_id(2) / row_groups;
    const int oh0 = (get_group_id(2) % row_groups * WGY + get_local_id(2)) * OHPT;
    if (c0 >= C || ow0 >= OW || oh0 >= OH) return;
    const int c_left = C - c0;
    const bool whole = C % VW == 0;

    // The window: input rows from ih0, pixels from iw0; inside the image, no load is guarded.
    const int ih0 = oh0 * STRIDE - PAD;
    const int iw0 = ow0 * STRIDE - PAD;
    const bool interior = ih0 >= 0 && ih0 + WIN_ROWS <= H && iw0 >= 0 && iw0 + WIN_COLS <= W;

    VEC taps[R * S];  // tap t of the VW channels
#pragma unroll
    for (int t = 0; t < R * S; ++t) {
        float tap[VW];
#pragma unroll
        for (int e = 0; e < VW; ++e) tap[e] = e < c_left ? LOAD(w, (c0 + e) * (R * S) + t) : 0.0f;
        taps[t] = FROM_PRIVATE(tap);
    }
    VEC acc[OHPT][OWPT];
#pragma unroll
    for (int i = 0; i < OHPT; ++i) {
#pragma unroll
        for (int j = 0; j < OWPT; ++j) acc[i][j] = 0.0f;
    }

#pragma unroll
    for (int ir = 0; ir < WIN_ROWS; ++ir) {
        const int ih = ih0 + ir;
        const __global STORED* src = x + ((image * H + ih) * W + iw0) * C + c0;
        VEC seg[WIN_COLS];  // input row ih, pixels iw0 ...
#pragma unroll
        for (int j = 0; j < WIN_COLS; ++j) {
            const bool inside = interior || ((uint)ih < (uint)H && (uint)(iw0 + j) < (uint)W);
            seg[j] = load_channels(src + j * C, inside, whole, c_left);
        }
        // Row ir feeds output row i through filter row (ir - i*STRIDE) / DILATION where that
        // divides (known at compile time).
#pragma unroll
        for (int i = 0; i < OHPT; ++i) {
            const int rd = ir - i * STRIDE;
            if (rd >= 0 && rd < RD && rd % DILATION == 0) {
                const int r = rd / DILATION;
#pragma unroll
                for (int j = 0; j < OWPT; ++j) {
#pragma unroll
                    for (int s = 0; s < S; ++s) {
                        acc[i][j] += taps[r * S + s] * seg[j * STRIDE + s * DILATION];
                    }
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < OHPT; ++i) {
        if (oh0 + i >= OH) break;
#pragma unroll
        for (int j = 0; j < OWPT; ++j) {
            if (ow0 + j >= OW) break;
            __global STORED* out = y + ((image * OH + oh0 + i) * OW + ow0 + j) * C + c0;
            float v[VW];
            TO_PRIVATE(acc[i][j], v);
            EPILOGUE_RUN(v, VW, out - y);
            if (whole) {
                STORE_VEC(FROM_PRIVATE(v), out);
            } else {
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    if (e < c_left) STORE(out, e, v[e]);
                }
            }
        }
    }
}
#endif
