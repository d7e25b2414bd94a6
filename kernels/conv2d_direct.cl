// octune direct convolution: y = conv2d(x, w), float32, NCHW, cross-correlation as PyTorch's
// conv2d (no bias), with zero padding, stride, dilation and groups.
//
// x is N x C x H x W, w is K x C/GROUPS x R x S, y is N x K x OH x OW. Output channel k of
// group g = k / (K/GROUPS) reads input channels g*C/GROUPS .. (g+1)*C/GROUPS - 1. Any shape:
// work-items past the output edges compute on clamped or zero inputs and store nothing.
//
// Workload defines (fixed per layer, so the filter loops have constant trip counts):
//   R, S            filter height and width
//   STRIDE, PAD     stride and zero padding (each side), the same along both axes
//   DILATION        distance between filter taps in the input
//   GROUPS          channel groups (C for depthwise)
// Tuning defines (see search_spaces/conv2d_direct.yaml):
//   WGX, WGY, WGZ   work-group shape: WGX work-items along output columns (dimension 0), WGY
//                   along output rows, WGZ along output channels
//   OWPT, OHPT, KPT output columns, rows and channels per work-item: a register tile of
//                   OHPT x OWPT vectors of KPT (1, 2, 4 or 8) channels
//   STRW            1: a work-item's columns are strided by WGX (neighbouring work-items read
//                   and write neighbouring columns: coalesced, free of bank conflicts);
//                   0: contiguous (with stride 1 neighbouring outputs share input values, loaded
//                   once into registers when the S loop is unrolled)
//   SX              1: stage the work-group's input tile, halo included, in local memory;
//                   0: every work-item reads its inputs from global memory, bounds-checked
//   SW              1: stage the work-group's filter tile in local memory; 0: read it from
//                   global memory (the same address across a work-group row: broadcast loads)
//   CPT             input channels per staged chunk (one barrier pair per chunk)
//   UNROLL          1: fully unroll the R and S loops; 0: keep them as loops
//
// Design: a work-group computes TH x TW outputs (TH = OHPT*WGY, TW = OWPT*WGX) for KWG =
// KPT*WGZ output channels of one group of one image. All of them read the same input tile, so
// staging it (SX) serves the XTH x XTW inputs it needs to KWG channels from local memory. The
// accumulators stay in registers; every input value read is used for KPT channels (one vector
// multiply-add on CPUs) and every filter value for OHPT x OWPT outputs. They accumulate with
// a * b + c, which compilers contract to an FMA: PoCL's mad() and fma() built-ins run several
// times slower on CPUs. The space reserves local memory for a 3x3, stride 1 tile (its
// constraints cannot see the layer); wider filters, strides or dilations stage fewer channels
// per chunk (CCH, at least one) so that the reservation holds.

#if !defined(WGX) || !defined(WGY) || !defined(WGZ) || !defined(OWPT) || !defined(OHPT) || \
    !defined(KPT) || !defined(STRW) || !defined(SX) || !defined(SW) || !defined(CPT) ||    \
    !defined(UNROLL)
#error "tuning parameters missing: see search_spaces/conv2d_direct.yaml for the full list"
#endif
#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD) || !defined(DILATION) || \
    !defined(GROUPS)
#error "workload defines missing: build with -D R=.. -D S=.. -D STRIDE=.. -D PAD=.. -D DILATION=.. -D GROUPS=.."
#endif

#define WGS (WGX * WGY * WGZ)
#define TH (OHPT * WGY)
#define TW (OWPT * WGX)
#define KWG (KPT * WGZ)
#define RS (R * S)
// The input rows and columns that a TH x TW output tile reads.
#define XTH ((TH - 1) * STRIDE + (R - 1) * DILATION + 1)
#define XTW ((TW - 1) * STRIDE + (S - 1) * DILATION + 1)

// Input channels per chunk: CPT, or as many as fit the local memory the space reserved.
#if SX || SW
#define STAGED (SX * XTH * XTW + SW * KWG * RS)  // floats staged per input channel
#define RESERVED (CPT * (SX * (TH + 2) * (TW + 2) + SW * KWG * 9))
#if CPT * STAGED <= RESERVED
#define CCH CPT
#elif RESERVED / STAGED >= 1
#define CCH (RESERVED / STAGED)
#else
#define CCH 1
#endif
#else
#define CCH CPT
#endif

// Column of a work-item's j-th output inside the work-group tile.
#define COL(j) (STRW ? tx + (j) * WGX : tx * OWPT + (j))

// Input value at row iy, column ix of one channel plane; zero in the padding.
inline float x_at(const __global float* plane, const int iy, const int ix, const int H,
                  const int W) {
    return ((uint)iy < (uint)H && (uint)ix < (uint)W) ? plane[iy * W + ix] : 0.0f;
}

// The compute loop reads the input through this: row yy, column xx of chunk channel cc's tile.
#if SX
#define X_AT(cc, yy, xx) xs[((cc) * XTH + (yy)) * XTW + (xx)]
#else
#define X_AT(cc, yy, xx) x_at(xc + (cc) * (H * W), iy0 + (yy), ix0 + (xx), H, W)
#endif

// A work-item's KPT output channels are one vector (float, float2, float4 or float8): on CPUs
// each input value meets KPT filter values in one SIMD multiply-add; GPUs split it into
// scalars. (No float16: PoCL drops kernels that use it on CPUs without AVX-512.)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if KPT == 1
#define floatk float
#define LOADK(p) (*(p))
#define STOREK(v, p) (*(p) = (v))
#else
#define floatk CAT(float, KPT)
#define LOADK(p) CAT(vload, KPT)(0, p)  // from a private array
#define STOREK(v, p) CAT(vstore, KPT)(v, 0, p)
#endif

#include "precision.clh"
#include "epilogue.clh"

__kernel __attribute__((reqd_work_group_size(WGX, WGY, WGZ)))
void conv2d_direct(const __global float* restrict x, const __global float* restrict w,
                   __global float* restrict y, const int N, const int C, const int H,
                   const int W, const int K, const int OH, const int OW EPILOGUE_ARGUMENTS) {
    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int tz = get_local_id(2);
    const int tid = (tz * WGY + ty) * WGX + tx;
    const int CG = C / GROUPS;  // input channels per group
    const int KG = K / GROUPS;  // output channels per group

    // Dimension 2 enumerates (image, group, block of KWG output channels of the group).
    const int kblocks = (KG + KWG - 1) / KWG;
    const int ng = get_group_id(2) / kblocks;  // n * GROUPS + g
    const int kb = (get_group_id(2) % kblocks) * KWG;  // first channel of the block, in group
    const int k0 = kb + tz * KPT;  // this work-item's first output channel, in group
    const int oy0 = get_group_id(1) * TH;
    const int ox0 = get_group_id(0) * TW;
    const int iy0 = oy0 * STRIDE - PAD;  // input tile origin, may lie in the padding
    const int ix0 = ox0 * STRIDE - PAD;
    // Channels c of image n, group g: planes (n * C + g * CG + c) = (ng * CG + c).
    const __global float* xg = x + ng * CG * (H * W);
    // The filters of group g: KG x CG x R x S.
    const __global float* wg = w + (ng % GROUPS) * KG * CG * RS;

#if SX
    __local float xs[CCH * XTH * XTW];  // [channel][row][column]
#endif
#if SW
    // [channel][r][s][output channel], aligned for a work-item's vector of KPT channels.
    __local float ws[CCH * RS * KWG] __attribute__((aligned(KPT * 4)));
#endif

    floatk acc[OHPT][OWPT];
#pragma unroll
    for (int i = 0; i < OHPT; ++i) {
#pragma unroll
        for (int j = 0; j < OWPT; ++j) acc[i][j] = 0.0f;
    }

    for (int c0 = 0; c0 < CG; c0 += CCH) {
        const int cn = min(CCH, CG - c0);  // channels in this chunk
#if SX
        for (int e = tid; e < cn * (XTH * XTW); e += WGS) {
            const int cc = e / (XTH * XTW);
            xs[e] = x_at(xg + (c0 + cc) * (H * W), iy0 + e / XTW % XTH, ix0 + e % XTW, H, W);
        }
#else
        const __global float* xc = xg + c0 * (H * W);
#endif
#if SW
        // Filter k's taps of channels c0 .. c0+cn-1 lie contiguously: q runs along them. Past
        // the group's last output channel, repeat it (computed, never stored).
        for (int e = tid; e < KWG * CCH * RS; e += WGS) {
            const int kk = e / (CCH * RS);
            const int q = e % (CCH * RS);
            if (q < cn * RS) ws[q * KWG + kk] = wg[(min(kb + kk, KG - 1) * CG + c0) * RS + q];
        }
#endif
#if SX || SW
        barrier(CLK_LOCAL_MEM_FENCE);
#endif

        for (int cc = 0; cc < cn; ++cc) {
#if UNROLL
#pragma unroll
#else
#pragma unroll 1
#endif
            for (int r = 0; r < R; ++r) {
#if UNROLL
#pragma unroll
#else
#pragma unroll 1
#endif
                for (int s = 0; s < S; ++s) {
#if SW
                    const int tap = (cc * R + r) * S + s;
                    const floatk wv = *(const __local floatk*)(ws + tap * KWG + tz * KPT);
#else
                    // Past the group's last channel, repeat it (computed, never stored).
                    float wk[KPT];
#pragma unroll
                    for (int kk = 0; kk < KPT; ++kk) {
                        wk[kk] = wg[(min(k0 + kk, KG - 1) * CG + c0 + cc) * RS + r * S + s];
                    }
                    const floatk wv = LOADK(wk);
#endif
#pragma unroll
                    for (int i = 0; i < OHPT; ++i) {
#pragma unroll
                        for (int j = 0; j < OWPT; ++j) {
                            const float xv = X_AT(cc, (ty * OHPT + i) * STRIDE + r * DILATION,
                                                  COL(j) * STRIDE + s * DILATION);
                            acc[i][j] += wv * xv;
                        }
                    }
                }
            }
        }
#if SX || SW
        barrier(CLK_LOCAL_MEM_FENCE);  // everyone is done reading the chunk
#endif
    }

#pragma unroll
    for (int i = 0; i < OHPT; ++i) {
        const int oy = oy0 + ty * OHPT + i;
#pragma unroll
        for (int j = 0; j < OWPT; ++j) {
            const int ox = ox0 + COL(j);
            float out[KPT];
            STOREK(acc[i][j], out);
            if (oy < OH && ox < OW) {
#pragma unroll
                for (int kk = 0; kk < KPT; ++kk) {
                    const int at = ((ng * KG + k0 + kk) * OH + oy) * OW + ox;
                    if (k0 + kk < KG) y[at] = EPILOGUE(out[kk], at);
                }
            }
        }
    }
}
