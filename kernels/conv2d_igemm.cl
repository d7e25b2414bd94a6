// octune conv2d, implicit GEMM: im2col fused into the tile loads of a tiled GEMM, NCHW or NHWC,
// in float32 or with float16 storage (kernels/precision.clh; conv2d_igemm_float16.yaml).
//
// y[n, k, oh, ow] = sum over c, r, s of w[k, c, r, s] * x[n, g*Cg + c, oh*STRIDE - PAD +
// r*DILATION, ow*STRIDE - PAD + s*DILATION] (zero outside the input), g = k / Kg, as PyTorch's
// conv2d without bias, with Cg = C/GROUPS and Kg = K/GROUPS. NCHW (NHWC = 0): x is N x C x H x W,
// w is K x Cg x R x S, y is N x K x OH x OW; NHWC: x is N x H x W x C, w is K x R x S x Cg, y is
// N x OH x OW x K. Per group g (launch dimension 2) this is the GEMM
//   Y_g[Kg x N*OH*OW] = W_g[Kg x Cg*R*S] . col_g[Cg*R*S x N*OH*OW]
// where W_g is the filter as it lies (rows over (c, r, s) in NCHW, (r, s, c) in NHWC) and col_g
// the im2col matrix of the input, which is never built: the B tile is gathered straight from x
// (zero-filled outside the image) and Y_g lands in y as it lies (transposed in NHWC: pixels of K
// channels). No copies, no workspace; any shape, edges of every tile included. A tile's pixels
// run on from one image into the next: at batch 16, ResNet-50's 7 x 7 layers fill 64-pixel
// tiles (784 pixels in 13 tiles) where one image's 49 would leave 15 of 64 idle.
//
// The reduction runs over tiles of KWG channels x one filter tap (r, s): within a tile the tap
// is fixed, so a work-item finds its input pixels' rows and bounds once per tile and column, and
// each element costs an address and a select. NCHW: taps inner; consecutive tiles revisit the
// same input rows and filter sectors (an A tile reads W_g's columns R*S apart), which the caches
// still hold. NHWC: channels inner, as both operands lie: a tile's elements along the reduction
// are runs of contiguous channels of one filter row or one input pixel, loaded as vectors of VWK,
// and consecutive tiles read on where the last one stopped (vectors need Cg % VWK == 0, aligned
// and never straddling Cg; other layers load element by element). Channels past Cg in the last
// block read as zero. Rows and pixels past the edge are clamped onto the last one, so every load
// stays inside w and x; their results are not stored. Layers at batch 1 have few output tiles:
// small tiles (8 to 32) keep every compute unit busy.
//
// Workload defines: R, S, STRIDE, PAD, DILATION, GROUPS, NHWC (as in kernels/conv2d.py).
// Tuning defines (see search_spaces/conv2d_igemm.yaml, and conv2d_igemm_nhwc.yaml for NHWC):
//   MWG, NWG        work-group tile of Y_g: MWG output channels x NWG output pixels
//   KWG             input channels per reduction tile
//   MDIMC, NDIMC    work-group shape: NDIMC work-items along pixels (dimension 0), MDIMC along
//                   channels; neighbouring work-items gather neighbouring pixels (coalesced in
//                   NCHW; in NHWC a pixel's next channels go to the work-items NWG further on)
//   VWM, VWN        vector width of A/B fragment reads from local memory and of y stores (VWN
//                   in NCHW, VWM in NHWC: y's contiguous dimension)
//   VWK             NHWC only: vector width of global loads along the reduction (channels)
//   KUNROLL         unroll factor of the inner reduction loop
//   STRM, STRN      0: a work-item owns contiguous rows/columns; 1: strided by the work-group
//   PF              1: load the next tile into registers while computing on the current one,
//                   two local buffers (one barrier per tile); 0: load, then compute
// Derived: each work-item computes an MWI x NWI register tile, MWI = MWG/MDIMC, NWI = NWG/NDIMC.

#if !defined(MWG) || !defined(NWG) || !defined(KWG) || !defined(MDIMC) || !defined(NDIMC) || \
    !defined(VWM) || !defined(VWN) || !defined(KUNROLL) || !defined(STRM) || !defined(STRN) || \
    !defined(PF)
#error "tuning parameters missing: see search_spaces/conv2d_igemm.yaml for the full list"
#endif
#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD) || !defined(DILATION) || \
    !defined(GROUPS) || !defined(NHWC)
#error "workload defines missing: build with -D R= -D S= -D STRIDE= -D PAD= -D DILATION= -D GROUPS= -D NHWC="
#endif
#if NHWC && !defined(VWK)
#error "NHWC needs VWK: see search_spaces/conv2d_igemm_nhwc.yaml"
#elif !NHWC
#define VWK 1
#endif

#define MWI (MWG / MDIMC)
#define NWI (NWG / NDIMC)
#define WGS (MDIMC * NDIMC)
#define RS (R * S)
// Tile vectors each work-item moves (VWK elements along the reduction each): vector l is
// v = tid + l*WGS of the tile, A's (W_g's) as m = v % MWG, k = v / MWG * VWK; B's (col_g's) as
// n = v % NWG, k = v / NWG * VWK, so that neighbouring work-items load neighbouring rows of W_g
// and neighbouring pixels of x, and store to neighbouring local addresses (no bank conflicts).
// VWK is 1 in NCHW, where the reduction is strided in both operands.
#define A_VECS (MWG * KWG / VWK / WGS)
#define B_VECS (NWG * KWG / VWK / WGS)
// Distinct pixel columns a work-item gathers: column j is n = tid % NWG + j * WGS.
#define B_COLS (NWG > WGS ? NWG / WGS : 1)
#define NBUF (PF ? 2 : 1)

#include "precision.clh"
#include "vector_io.clh"
#include "epilogue.clh"

// VWK elements along the reduction from src (a vector where `whole`: aligned, and inside Cg
// whenever its first element is). Elements from c_left on, and all of them outside the image,
// read as zero.
inline void load_run(float* dst, const __global STORED* src, const bool inside, const int c_left,
                     const bool whole) {
    if (inside && whole && c_left > 0) {
        load_vec(VWK, src, dst);
    } else {
#pragma unroll
        for (int e = 0; e < VWK; ++e) dst[e] = inside && e < c_left ? LOAD(src, e) : 0.0f;
    }
}

// Reads this work-item's vectors of reduction tile t (channels c0..c0+KWG, tap rs) into
// registers. wg points at W_g; a_row[l] is the clamped row offset of A vector l (rows past Kg
// repeat row Kg-1: their results are never stored). xg points at group g of the first image;
// image[j] is where each gathered column's image starts, ih0/iw0 its top-left input pixel
// (clamped the same way past N*OH*OW).
inline void load_tiles(float* ra, float* rb, const int t, const __global STORED* wg,
                       const int* a_row, const __global STORED* xg, const int* image,
                       const int* ih0, const int* iw0, const int Cg, const int C, const int H,
                       const int W, const int tid) {
#if NHWC
    const int blocks = (Cg + KWG - 1) / KWG;  // channel blocks per tap
    const int c0 = (t % blocks) * KWG;
    const int rs = t / blocks;
    const bool whole = Cg % VWK == 0;
#else
    const int c0 = (t / RS) * KWG;
    const int rs = t % RS;
    const bool whole = true;  // single elements
#endif
    const int c_left = Cg - c0;
#pragma unroll
    for (int l = 0; l < A_VECS; ++l) {
        const int k = (tid + l * WGS) / MWG * VWK;
#if NHWC
        const __global STORED* src = wg + a_row[l] + rs * Cg + c0 + k;
#else
        const __global STORED* src = wg + a_row[l] + (c0 + k) * RS + rs;
#endif
        load_run(ra + l * VWK, src, true, c_left - k, whole);
    }
    // The tap's input pixel of each column, and whether it lies inside the image. Without
    // padding every tap of an output pixel does (OH and OW are defined so).
    const int dh = (rs / S) * DILATION;
    const int dw = (rs % S) * DILATION;
    int offset[B_COLS];
    bool inside[B_COLS];
#pragma unroll
    for (int j = 0; j < B_COLS; ++j) {
        const int ih = ih0[j] + dh;
        const int iw = iw0[j] + dw;
#if NHWC
        offset[j] = image[j] + (ih * W + iw) * C + c0;
#else
        offset[j] = image[j] + c0 * (H * W) + ih * W + iw;
#endif
        inside[j] = PAD == 0 || ((uint)ih < (uint)H && (uint)iw < (uint)W);
    }
#pragma unroll
    for (int l = 0; l < B_VECS; ++l) {
        const int j = l % B_COLS;
        const int k = (tid + l * WGS) / NWG * VWK;
#if NHWC
        const __global STORED* src = xg + offset[j] + k;
#else
        const __global STORED* src = xg + offset[j] + k * (H * W);
#endif
        load_run(rb + l * VWK, src, inside[j], c_left - k, whole);
    }
}

// Writes one tile's vectors, as load_tiles read them, into local memory [k][COLS] (COLS = MWG
// for A, NWG for B): element e of vector v lies at (v / COLS * VWK + e) * COLS + v % COLS (with
// VWK = 1, at v).
inline void store_tile(__local float* dst, const float* regs, const int COLS, const int VECS,
                       const int tid) {
#pragma unroll
    for (int l = 0; l < VECS; ++l) {
        const int v = tid + l * WGS;
        const int at = v / COLS * (VWK * COLS) + v % COLS;
#pragma unroll
        for (int e = 0; e < VWK; ++e) dst[at + e * COLS] = regs[l * VWK + e];
    }
}

inline void store_tiles(__local float* Als, __local float* Bls, const float* ra, const float* rb,
                        const int tid) {
    store_tile(Als, ra, MWG, A_VECS, tid);
    store_tile(Bls, rb, NWG, B_VECS, tid);
}

__kernel __attribute__((reqd_work_group_size(NDIMC, MDIMC, 1)))
void conv2d_igemm(const __global STORED* restrict x, const __global STORED* restrict w,
                  __global STORED* restrict y, const int N, const int C, const int H, const int W,
                  const int K, const int OH, const int OW EPILOGUE_ARGUMENTS) {
    const int tn = get_local_id(0);
    const int tm = get_local_id(1);
    const int tid = tm * NDIMC + tn;
    const int n0 = get_group_id(0) * NWG;  // first output pixel of the tile, over all images
    const int m0 = get_group_id(1) * MWG;  // first output channel of the tile, within the group
    const int g = get_global_id(2);
    const int Cg = C / GROUPS;
    const int Kg = K / GROUPS;
    const int P = OH * OW;  // an image's output pixels
    const int PN = P * N;   // every image's
    const int ld = Cg * RS;  // row length of W_g

    const __global STORED* wg = w + g * Kg * ld;
#if NHWC
    const __global STORED* xg = x + g * Cg;
    __global STORED* yg = y + g * Kg;
#else
    const __global STORED* xg = x + g * Cg * (H * W);
    __global STORED* yg = y + g * Kg * P;
#endif

    // Per work-item, once: the filter rows it loads and the output pixels it gathers for.
    int a_row[A_VECS];
#pragma unroll
    for (int l = 0; l < A_VECS; ++l) a_row[l] = min(m0 + (tid + l * WGS) % MWG, Kg - 1) * ld;
    int image[B_COLS];
    int ih0[B_COLS];
    int iw0[B_COLS];
#pragma unroll
    for (int j = 0; j < B_COLS; ++j) {
        const int p = min(n0 + tid % NWG + j * WGS, PN - 1);
        const int q = p % P;
        image[j] = p / P * (C * H * W);
        ih0[j] = (q / OW) * STRIDE - PAD;
        iw0[j] = (q % OW) * STRIDE - PAD;
    }

    __local float Als[NBUF * KWG * MWG] __attribute__((aligned(32)));  // [buffer][k][m]
    __local float Bls[NBUF * KWG * NWG] __attribute__((aligned(32)));  // [buffer][k][n]
    float ra[A_VECS * VWK];
    float rb[B_VECS * VWK];

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

    const int tiles = (Cg + KWG - 1) / KWG * RS;
#if PF
    load_tiles(ra, rb, 0, wg, a_row, xg, image, ih0, iw0, Cg, C, H, W, tid);
    store_tiles(Als, Bls, ra, rb, tid);
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    int buf = 0;  // local buffer the compute loop reads
    for (int t = 0; t < tiles; ++t) {
#if PF
        // Issue the next tile's global loads now; they complete while this tile is computed.
        const bool more = t + 1 < tiles;
        if (more) load_tiles(ra, rb, t + 1, wg, a_row, xg, image, ih0, iw0, Cg, C, H, W, tid);
#else
        load_tiles(ra, rb, t, wg, a_row, xg, image, ih0, iw0, Cg, C, H, W, tid);
        store_tiles(Als, Bls, ra, rb, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        const __local float* Acur = Als + buf * (KWG * MWG);
        const __local float* Bcur = Bls + buf * (KWG * NWG);
#pragma unroll 1
        for (int kk = 0; kk < KWG; kk += KUNROLL) {
#pragma unroll
            for (int ku = 0; ku < KUNROLL; ++ku) {
                const int k = kk + ku;
                float a[MWI];
                float b[NWI];
#pragma unroll
                for (int i = 0; i < MWI; i += VWM) load_local_vec(VWM, Acur + k * MWG + m_of[i], a + i);
#pragma unroll
                for (int j = 0; j < NWI; j += VWN) load_local_vec(VWN, Bcur + k * NWG + n_of[j], b + j);
                // a * b + c, which compilers contract to an FMA: PoCL's mad() is a call its
                // vectoriser does not see through (2-3x slower on CPUs).
#pragma unroll
                for (int i = 0; i < MWI; ++i) {
#pragma unroll
                    for (int j = 0; j < NWI; ++j) acc[i][j] = a[i] * b[j] + acc[i][j];
                }
            }
        }
#if PF
        // The other buffer was last read before the previous barrier: safe to fill now.
        buf = 1 - buf;
        if (more) store_tiles(Als + buf * (KWG * MWG), Bls + buf * (KWG * NWG), ra, rb, tid);
#endif
        // PF: the next tile is in place; otherwise: everyone is done reading this one.
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    // Interior tiles with aligned rows store whole vectors; edge tiles store element by element.
    const int m_left = Kg - m0;
    const int n_left = PN - n0;
#if NHWC
    // Y_g lies transposed (pixels of K channels, image after image): vectors of VWM channels.
    const bool fast_store = m_left >= MWG && n_left >= NWG && Kg % VWM == 0;
#pragma unroll
    for (int j = 0; j < NWI; ++j) {
        const int n = n_of[j];
        __global STORED* y_pixel = yg + (n0 + n) * K + m0;
        if (fast_store) {
#pragma unroll
            for (int i = 0; i < MWI; i += VWM) {
                float out[VWM];
#pragma unroll
                for (int e = 0; e < VWM; ++e) out[e] = acc[i + e][j];
                EPILOGUE_RUN(out, VWM, y_pixel + m_of[i] - y);
                store_vec(VWM, out, y_pixel + m_of[i]);
            }
        } else if (n < n_left) {
#pragma unroll
            for (int i = 0; i < MWI; ++i) {
                if (m_of[i] < m_left) STORE(y_pixel, m_of[i], EPILOGUE(acc[i][j], y_pixel + m_of[i] - y));
            }
        }
    }
#else
    // Pixel p of row m lies in image p / P: a vector of VWN pixels never straddles two when P
    // is a multiple of VWN (vectors start at multiples of VWN).
    const bool fast_store = m_left >= MWG && n_left >= NWG && P % VWN == 0;
#pragma unroll
    for (int i = 0; i < MWI; ++i) {
        const int m = m0 + m_of[i];
        if (fast_store) {
#pragma unroll
            for (int j = 0; j < NWI; j += VWN) {
                const int p = n0 + n_of[j];
                __global STORED* at = yg + (p / P * K + m) * P + p % P;
                EPILOGUE_RUN(acc[i] + j, VWN, at - y);
                store_vec(VWN, acc[i] + j, at);
            }
        } else if (m_of[i] < m_left) {
#pragma unroll
            for (int j = 0; j < NWI; ++j) {
                const int p = n0 + n_of[j];
                const int at = (p / P * K + m) * P + p % P;
                if (n_of[j] < n_left) STORE(yg, at, EPILOGUE(acc[i][j], yg + at - y));
            }
        }
    }
#endif
}
