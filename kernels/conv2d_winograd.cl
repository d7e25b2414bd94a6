// octune conv2d, Winograd F(2x2, 3x3): 3x3, stride 1 convolution, any dilation, float32, NCHW,
// one launch.
//
// y[n, k, oh, ow] = sum over c, r, s of w[k, c, r, s] * x[n, c, oh - PAD + r*D, ow - PAD + s*D]
// (zero outside the input, D = DILATION), as PyTorch's conv2d without bias; x is N x C x H x W,
// w is K x C x 3 x 3, y is N x K x OH x OW. The output is cut into 2x2 tiles of pixels D apart:
// tile (th, tw) of image n covers rows oh, oh + D and columns ow, ow + D from its origin
// (oh, ow) = (TILE_ORIGIN(th), TILE_ORIGIN(tw)) and reads the 4x4 input pixels D apart from
// (oh - PAD, ow - PAD): a dilated 3x3 is an undilated one on each of the D x D interleaved grids
// of pixels, DeepLab's atrous convolutions included. Tiles are numbered across the batch,
// t = (n * TH + th) * TW + tw with TH = TILES_ALONG(OH), TW = TILES_ALONG(OW). Per tile and channel
//   U = G g G^T (filter, 4x4), V = B^T d B (input, 4x4), M = sum over c of U (.) V,
//   Y = A^T M A (2x2 outputs)
// so each of the 16 positions e of M is a GEMM M_e[K x tiles] = U_e[K x C] . V_e[C x tiles]:
// 16 multiplies per 4 outputs and channel instead of 36. Any shape: tiles and channels past the
// edges transform as zeros and store nothing, and the output edge (odd OH, OW) is guarded.
//
// Workload defines: R, S, STRIDE, PAD, DILATION, GROUPS (the kernel takes R = S = 3,
// STRIDE = DILATION = GROUPS = 1; see search_spaces/conv2d_winograd.yaml).
// Tuning defines (see search_spaces/conv2d_winograd.yaml):
//   TDIM, KDIM        work-items along tiles (dimension 0) and output channels (dimension 1);
//                     dimension 2 holds EDIM = 16 / EPT work-items along the positions of M
//   TPT, KPT, EPT     tiles, output channels and positions per work-item: a register tile of
//                     EPT x KPT x TPT accumulators
//   CT                input channels per chunk staged (transformed) in local memory
//   KUNROLL           unroll factor of the channel loop within a chunk
//   PF                1: load the next chunk's filters and input tiles into registers while
//                     computing on the current one, transform them after, two local buffers
//                     (one barrier per chunk); 0: load and transform, then compute
//
// Design: a work-group owns KWG = KDIM*KPT output channels x TWG = TDIM*TPT tiles. Per chunk of
// CT input channels it transforms the KWG x CT filters and the TWG x CT input tiles once,
// cooperatively, into local memory (Us[c][e][k], Vs[c][e][t]; the filter transform is repeated
// by every work-group along the tiles, so wide TWG amortises it), then every work-item runs its
// EPT small register-tiled GEMMs out of local memory: per channel EPT*(KPT + TPT) local reads
// for EPT*KPT*TPT multiply-adds. Splitting the 16 positions over EDIM work-items (EPT < 16)
// leaves room for larger KPT x TPT tiles within the same registers, hence fewer local reads per
// multiply-add; the output transform, which needs all 16 positions of a tile, then gathers M
// through local memory, one row of the KPT channels at a time. With EPT = 16 it runs on the
// registers. Work-item rows and columns are strided by the work-group in vectors of up to 4
// (as gemm.cl's STRM/STRN = 1), so fragment reads are 4 wide and free of bank conflicts.

#if !defined(TDIM) || !defined(KDIM) || !defined(EPT) || !defined(TPT) || !defined(KPT) || \
    !defined(CT) || !defined(KUNROLL) || !defined(PF)
#error "tuning parameters missing: see search_spaces/conv2d_winograd.yaml for the full list"
#endif
#if !defined(R) || !defined(S) || !defined(STRIDE) || !defined(PAD) || !defined(DILATION) || \
    !defined(GROUPS)
#error "workload defines missing: build with -D R= -D S= -D STRIDE= -D PAD= -D DILATION= -D GROUPS="
#endif
#if R != 3 || S != 3 || STRIDE != 1 || GROUPS != 1
#error "conv2d_winograd takes 3x3 filters, stride 1, one group"
#endif

// Tile origins along a dimension of `size` outputs: the rows o whose o / D is even, so that o
// and o + D pair up (the last ones may lack their o + D); 2*i where D = 1. The yaml's launch
// counts the tiles the same way.
#define TILES_ALONG(size) \
    ((size) / (2 * DILATION) * DILATION + min((size) % (2 * DILATION), DILATION))
#define TILE_ORIGIN(i) ((i) / DILATION * 2 * DILATION + (i) % DILATION)

#define EDIM (16 / EPT)
#define WGS (TDIM * KDIM * EDIM)
#define KWG (KDIM * KPT)
#define TWG (TDIM * TPT)
#define VWK (KPT < 4 ? KPT : 4)
#define VWT (TPT < 4 ? TPT : 4)
// Transforms per work-item and chunk: element v = tid + l*WGS of the CT x KWG filters is row
// v % KWG of channel v / KWG, of the CT x TWG input tiles tile v % TWG of channel v / TWG, so
// that neighbouring work-items store to neighbouring local addresses (no bank conflicts). All
// sizes are powers of 2: the guard v < total only bites when a chunk has fewer elements than
// the work-group has work-items.
#define U_LOADS ((CT * KWG + WGS - 1) / WGS)
#define V_LOADS ((CT * TWG + WGS - 1) / WGS)
// Distinct tiles a work-item transforms: tile j is tid % TWG + j * WGS.
#define V_TILES (TWG > WGS ? TWG / WGS : 1)
#define U_SIZE (CT * 16 * KWG)
#define V_SIZE (CT * 16 * TWG)
#define CHUNK_SIZE (U_SIZE + V_SIZE)
#define NBUF (PF ? 2 : 1)
#define M_SIZE (EDIM > 1 ? 16 * KDIM * TWG : 0)  // one row of M per work-item row, staged
#define LDS_SIZE (NBUF * CHUNK_SIZE > M_SIZE ? NBUF * CHUNK_SIZE : M_SIZE)

#include "precision.clh"
#include "vector_io.clh"
#include "epilogue.clh"

// U = G g G^T with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]: g is 3x3, u is 4x4, row-major.
inline void filter_transform(const float* g, float* u) {
    float t[4][3];
#pragma unroll
    for (int j = 0; j < 3; ++j) {
        const float even = 0.5f * (g[j] + g[6 + j]);
        t[0][j] = g[j];
        t[1][j] = 0.5f * g[3 + j] + even;
        t[2][j] = -0.5f * g[3 + j] + even;
        t[3][j] = g[6 + j];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float even = 0.5f * (t[i][0] + t[i][2]);
        u[4 * i] = t[i][0];
        u[4 * i + 1] = 0.5f * t[i][1] + even;
        u[4 * i + 2] = -0.5f * t[i][1] + even;
        u[4 * i + 3] = t[i][2];
    }
}

// V = B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], in place on a 4x4 tile.
inline void input_transform(float* d) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float d0 = d[j], d1 = d[4 + j], d2 = d[8 + j], d3 = d[12 + j];
        d[j] = d0 - d2;
        d[4 + j] = d1 + d2;
        d[8 + j] = d2 - d1;
        d[12 + j] = d1 - d3;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float d0 = d[4 * i], d1 = d[4 * i + 1], d2 = d[4 * i + 2], d3 = d[4 * i + 3];
        d[4 * i] = d0 - d2;
        d[4 * i + 1] = d1 + d2;
        d[4 * i + 2] = d2 - d1;
        d[4 * i + 3] = d1 - d3;
    }
}

// Y = A^T m A with A^T = [1 1 1 0; 0 1 -1 -1]: the 2x2 outputs of tile t, output channel k,
// stored where they lie inside y.
inline void store_output(const float* m, const int k, const int t, __global float* y,
                         const int N, const int K, const int OH, const int OW EPILOGUE_ARGUMENTS) {
    const int TW = TILES_ALONG(OW);
    const int TH = TILES_ALONG(OH);
    const int n = t / (TH * TW);
    if (k >= K || n >= N) return;
    float s[2][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        s[0][j] = m[j] + m[4 + j] + m[8 + j];
        s[1][j] = m[4 + j] - m[8 + j] - m[12 + j];
    }
    const int oh = TILE_ORIGIN((t / TW) % TH);
    const int ow = TILE_ORIGIN(t % TW);
    const int at = ((n * K + k) * OH + oh) * OW + ow;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (oh + i * DILATION < OH) {
            const int row = at + i * DILATION * OW;
            y[row] = EPILOGUE(s[i][0] + s[i][1] + s[i][2], row);
            if (ow + DILATION < OW) {
                y[row + DILATION] = EPILOGUE(s[i][1] - s[i][2] - s[i][3], row + DILATION);
            }
        }
    }
}

// Reads this work-item's raw filters (9 floats each, into g) and input tiles (16 each, into
// d) of the chunk at input channel c0: rows past K, channels past C and pixels outside the
// image read as zero.
inline void load_chunk(float* g, float* d, const __global float* x, const __global float* w,
                       const int c0, const int k0, const int* x_base, const int* ih0,
                       const int* iw0, const int C, const int H, const int W, const int K,
                       const int tid) {
#pragma unroll
    for (int l = 0; l < U_LOADS; ++l) {
        const int v = tid + l * WGS;
        const int k = v % KWG;
        const int c = v / KWG;
        const bool inside = v < CT * KWG && k0 + k < K && c0 + c < C;
        const __global float* wk = w + ((k0 + k) * C + c0 + c) * 9;
#pragma unroll
        for (int r = 0; r < 9; ++r) g[l * 9 + r] = inside ? wk[r] : 0.0f;
    }
#pragma unroll
    for (int l = 0; l < V_LOADS; ++l) {
        const int v = tid + l * WGS;
        const int j = l % V_TILES;
        const int c = v / TWG;
        const bool inside = v < CT * TWG && x_base[j] >= 0 && c0 + c < C;
        const __global float* xc = x + x_base[j] + (c0 + c) * H * W;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int ih = ih0[j] + r * DILATION;
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const int iw = iw0[j] + s * DILATION;
                const bool ok = inside && (uint)ih < (uint)H && (uint)iw < (uint)W;
                d[l * 16 + 4 * r + s] = ok ? xc[ih * W + iw] : 0.0f;
            }
        }
    }
}

// Transforms what load_chunk read into the local chunk at Us: Us[c][e][k], then Vs[c][e][t].
inline void store_chunk(__local float* Us, float* g, float* d, const int tid) {
    __local float* Vs = Us + U_SIZE;
#pragma unroll
    for (int l = 0; l < U_LOADS; ++l) {
        const int v = tid + l * WGS;
        if (v < CT * KWG) {
            float u[16];
            filter_transform(g + l * 9, u);
#pragma unroll
            for (int e = 0; e < 16; ++e) Us[((v / KWG) * 16 + e) * KWG + v % KWG] = u[e];
        }
    }
#pragma unroll
    for (int l = 0; l < V_LOADS; ++l) {
        const int v = tid + l * WGS;
        if (v < CT * TWG) {
            input_transform(d + l * 16);
#pragma unroll
            for (int e = 0; e < 16; ++e) Vs[((v / TWG) * 16 + e) * TWG + v % TWG] = d[l * 16 + e];
        }
    }
}

__kernel __attribute__((reqd_work_group_size(TDIM, KDIM, EDIM)))
void conv2d_winograd(const __global float* restrict x, const __global float* restrict w,
                     __global float* restrict y, const int N, const int C, const int H,
                     const int W, const int K, const int OH, const int OW EPILOGUE_ARGUMENTS) {
    const int tt = get_local_id(0);
    const int tk = get_local_id(1);
    const int te = get_local_id(2);
    const int tid = (te * KDIM + tk) * TDIM + tt;
    const int t0 = get_group_id(0) * TWG;  // first tile of the work-group
    const int k0 = get_group_id(1) * KWG;  // first output channel of the work-group
    const int TH = TILES_ALONG(OH);
    const int TW = TILES_ALONG(OW);
    const int tiles = N * TH * TW;

    __local float lds[LDS_SIZE] __attribute__((aligned(16)));  // NBUF x (Us, Vs), or Ms

    // The input tiles this work-item transforms: image offset and top-left pixel, once.
    int x_base[V_TILES];
    int ih0[V_TILES];
    int iw0[V_TILES];
#pragma unroll
    for (int j = 0; j < V_TILES; ++j) {
        const int t = t0 + tid % TWG + j * WGS;
        const int n = t / (TH * TW);
        x_base[j] = t < tiles ? n * C * H * W : -1;  // -1: past the last tile, all zeros
        ih0[j] = TILE_ORIGIN((t / TW) % TH) - PAD;
        iw0[j] = TILE_ORIGIN(t % TW) - PAD;
    }

    int k_of[KPT];
    int t_of[TPT];
#pragma unroll
    for (int i = 0; i < KPT; ++i) k_of[i] = tile_offset(i, tk, KPT, KDIM, VWK, 1);
#pragma unroll
    for (int j = 0; j < TPT; ++j) t_of[j] = tile_offset(j, tt, TPT, TDIM, VWT, 1);

    float acc[EPT][KPT][TPT];
#pragma unroll
    for (int q = 0; q < EPT; ++q) {
#pragma unroll
        for (int i = 0; i < KPT; ++i) {
#pragma unroll
            for (int j = 0; j < TPT; ++j) acc[q][i][j] = 0.0f;
        }
    }

    float g[U_LOADS * 9];
    float d[V_LOADS * 16];
#if PF
    load_chunk(g, d, x, w, 0, k0, x_base, ih0, iw0, C, H, W, K, tid);
    store_chunk(lds, g, d, tid);
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    int buf = 0;  // local buffer the GEMMs read
    for (int c0 = 0; c0 < C; c0 += CT) {
#if PF
        // Issue the next chunk's global loads now; they complete while this one is computed.
        const bool more = c0 + CT < C;
        if (more) load_chunk(g, d, x, w, c0 + CT, k0, x_base, ih0, iw0, C, H, W, K, tid);
#else
        load_chunk(g, d, x, w, c0, k0, x_base, ih0, iw0, C, H, W, K, tid);
        store_chunk(lds, g, d, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        const __local float* Us = lds + buf * CHUNK_SIZE;
        const __local float* Vs = Us + U_SIZE;

        // The 16 GEMMs: this work-item's positions e = te*EPT + q.
#pragma unroll 1
        for (int cc = 0; cc < CT; cc += KUNROLL) {
#pragma unroll
            for (int cu = 0; cu < KUNROLL; ++cu) {
#pragma unroll
                for (int q = 0; q < EPT; ++q) {
                    const int row = (cc + cu) * 16 + te * EPT + q;
                    float u[KPT];
                    float v[TPT];
#pragma unroll
                    for (int i = 0; i < KPT; i += VWK) load_local_vec(VWK, Us + row * KWG + k_of[i], u + i);
#pragma unroll
                    for (int j = 0; j < TPT; j += VWT) load_local_vec(VWT, Vs + row * TWG + t_of[j], v + j);
#pragma unroll
                    for (int i = 0; i < KPT; ++i) {
#pragma unroll
                        for (int j = 0; j < TPT; ++j) acc[q][i][j] = u[i] * v[j] + acc[q][i][j];
                    }
                }
            }
        }
#if PF
        // The other buffer was last read before the previous barrier: safe to fill now.
        buf = 1 - buf;
        if (more) store_chunk(lds + buf * CHUNK_SIZE, g, d, tid);
#endif
        // PF: the next chunk is in place; otherwise: everyone is done reading this one.
        barrier(CLK_LOCAL_MEM_FENCE);
    }

#if EDIM == 1
    // Every position of a tile is in this work-item's registers.
#pragma unroll
    for (int i = 0; i < KPT; ++i) {
#pragma unroll
        for (int j = 0; j < TPT; ++j) {
            float m[16];
#pragma unroll
            for (int e = 0; e < 16; ++e) m[e] = acc[e][i][j];
            store_output(m, k0 + k_of[i], t0 + t_of[j], y, N, K, OH, OW EPILOGUE_PASS);
        }
    }
#else
    // Row i of every work-item row (KDIM channels x TWG tiles x 16 positions) goes through
    // local memory, Ms[e][kd][t]; then the work-group transforms its KDIM x TWG output tiles.
    __local float* Ms = lds;
#pragma unroll
    for (int i = 0; i < KPT; ++i) {
#pragma unroll
        for (int q = 0; q < EPT; ++q) {
#pragma unroll
            for (int j = 0; j < TPT; ++j) Ms[((te * EPT + q) * KDIM + tk) * TWG + t_of[j]] = acc[q][i][j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int v = tid; v < KDIM * TWG; v += WGS) {
            const int kd = v / TWG;
            const int t = v % TWG;
            float m[16];
#pragma unroll
            for (int e = 0; e < 16; ++e) m[e] = Ms[(e * KDIM + kd) * TWG + t];
            store_output(m, k0 + tile_offset(i, kd, KPT, KDIM, VWK, 1), t0 + t, y, N, K, OH, OW EPILOGUE_PASS);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
}
