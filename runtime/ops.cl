// The reference runtime's untuned operators (octune.runtime): everything around the tuned
// conv2d and GEMM kernels. One work-item per output element (a work-group per row for the row
// kernels); the host rounds the global size up to whole work-groups, hence the guards.
//
// Build defines, per kernel:
//   epilogue   EPILOGUE, HAS_SCALE, HAS_BIAS, OTHER, ACT (kernels/epilogue.clh)
//   pool       MAX (1 max, 0 average), KH, KW, SH, SW, PT, PL, PB, PR (pads), INCLUDE_PAD
//   row kernels  GROUP (work-items a row, a power of two); global_pool: MAX
//   broadcast  FUNCTION (numbered as FUNCTIONS in executor.py), INPUTS (1 to 3)
//   index_map  MODE (0 plain, 1 tile, 2 pad with a value, 3 edge, 4 reflect), TABLE (0/1)
//   index_map_pair  PAIR, with MODE 0 and TABLE 1
//   reduce     REDUCTION (numbered as REDUCTIONS in executor.py)
//   resize     LINEAR (0 nearest, 1 linear), COORDINATES, NEAREST (numbered in executor.py)
//   conv_transpose  KH, KW, SH, SW, PT, PL, DH, DW, GROUPS, HAS_BIAS
//   batched_matmul  BATCHED; tiled: BT, TPW
//   attention  ATTENTION, AQ (query rows a work-group), AK (keys a step), D, DV (head sizes)
//
// Shape-generic kernels (broadcast, index_map, reduce) read their axes from a small int
// buffer `meta`, six axes, leading ones of size 1.
#define RANK 6

#include "precision.clh"
#include "epilogue.clh"

// The epilogue of a conv or GEMM whose kernel does not fuse it (kernels/epilogue.clh), or of an
// element-wise chain with no such producer, over n elements, in place (y == x) or not. X_BYTES,
// Y_BYTES: x or y is a quantized model's uint8 tensor (a DequantizeLinear's input, a
// QuantizeLinear's output, whose ACT 30 has rounded and saturated the value already).
#ifdef EPILOGUE
#if X_BYTES
#define EPILOGUE_X uchar
#define EPILOGUE_LOAD(p, i) ((float)(p)[i])
#else
#define EPILOGUE_X STORED
#define EPILOGUE_LOAD LOAD
#endif
#if Y_BYTES
#define EPILOGUE_Y uchar
#define EPILOGUE_STORE(p, i, v) ((p)[i] = convert_uchar_sat(v))
#else
#define EPILOGUE_Y STORED
#define EPILOGUE_STORE STORE
#endif
__kernel void epilogue(const __global EPILOGUE_X* x, __global EPILOGUE_Y* y,
                       const int n EPILOGUE_ARGUMENTS) {
    const int i = get_global_id(0);
    if (i < n) EPILOGUE_STORE(y, i, EPILOGUE(EPILOGUE_LOAD(x, i), i));
}
#endif

// Max or average pooling of planes x[planes x H x W] into y[planes x OH x OW]; windows that
// run past the input (padding, ceil mode) skip those taps. An average divides by the taps
// inside the input, or with INCLUDE_PAD by the window clipped to the padded input (ONNX).
#ifdef INCLUDE_PAD
__kernel void pool(const __global STORED* x, __global STORED* y, const int planes, const int H,
                   const int W, const int OH, const int OW) {
    const int i = get_global_id(0);
    if (i >= planes * OH * OW) return;
    const int ow = i % OW, oh = (i / OW) % OH;
    const __global STORED* plane = x + (size_t)(i / (OW * OH)) * H * W;
    const int h0 = oh * SH - PT, w0 = ow * SW - PL;
    float acc = MAX ? -INFINITY : 0.0f;
    int taps = 0;
    for (int r = max(h0, 0); r < min(h0 + KH, H); ++r) {
        for (int s = max(w0, 0); s < min(w0 + KW, W); ++s) {
            const float v = LOAD(plane, r * W + s);
            acc = MAX ? fmax(acc, v) : acc + v;
            ++taps;
        }
    }
#if !MAX
#if INCLUDE_PAD
    taps = (min(h0 + KH, H + PB) - h0) * (min(w0 + KW, W + PR) - w0);
#endif
    acc /= (float)max(taps, 1);
#endif
    STORE(y, i, acc);
}
#endif

// Row kernels (softmax, layer_norm, global_pool): one work-group of GROUP work-items a row,
// each lane taking every GROUP-th element and the lanes' partial results combined in local
// memory. One work-item a row left most of a GPU idle (ConvNeXt's layer norms: 80 us each on
// an H100, 3,136 rows of 96).
#ifdef GROUP
#define SUM(a, b) ((a) + (b))
#define MAXIMUM(a, b) fmax(a, b)
#define GROUP_REDUCE(name, op)                                                                \
    inline float name(const float v, __local float* scratch) {                               \
        const int lane = get_local_id(0);                                                     \
        scratch[lane] = v;                                                                    \
        barrier(CLK_LOCAL_MEM_FENCE);                                                         \
        for (int stride = GROUP / 2; stride > 0; stride /= 2) {                                \
            if (lane < stride) scratch[lane] = op(scratch[lane], scratch[lane + stride]);     \
            barrier(CLK_LOCAL_MEM_FENCE);                                                     \
        }                                                                                     \
        const float result = scratch[0];                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                                         \
        return result;                                                                        \
    }
GROUP_REDUCE(group_sum, SUM)
GROUP_REDUCE(group_max, MAXIMUM)

// Softmax over `length` elements `inner` apart, for rows = outer x inner rows. A row of up to
// GROUP * KEPT elements (attention's 128-512 keys) is read once, each lane keeping its
// elements and their exponentials in registers; a longer one is read three times.
#define KEPT 8
__kernel void softmax(const __global STORED* x, __global STORED* y, const int length,
                      const int inner) {
    __local float scratch[GROUP];
    const int r = get_group_id(0), lane = get_local_id(0);
    const size_t base = (size_t)(r / inner) * length * inner + r % inner;
    float top = -INFINITY;
    if (length <= GROUP * KEPT) {
        float kept[KEPT];
#pragma unroll
        for (int c = 0; c < KEPT; ++c) {
            const int j = lane + c * GROUP;
            kept[c] = j < length ? LOAD(x, base + (size_t)j * inner) : -INFINITY;
            top = fmax(top, kept[c]);
        }
        top = group_max(top, scratch);
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < KEPT; ++c) {
            kept[c] = exp(kept[c] - top);  // 0 past the row's end
            sum += kept[c];
        }
        const float scale = 1.0f / group_sum(sum, scratch);
#pragma unroll
        for (int c = 0; c < KEPT; ++c) {
            const int j = lane + c * GROUP;
            if (j < length) STORE(y, base + (size_t)j * inner, kept[c] * scale);
        }
        return;
    }
    for (int j = lane; j < length; j += GROUP) top = fmax(top, LOAD(x, base + (size_t)j * inner));
    top = group_max(top, scratch);
    float sum = 0.0f;
    for (int j = lane; j < length; j += GROUP) sum += exp(LOAD(x, base + (size_t)j * inner) - top);
    const float scale = 1.0f / group_sum(sum, scratch);
    // Each exponential again rather than read back from y: half storage would round it twice.
    for (int j = lane; j < length; j += GROUP) {
        const size_t at = base + (size_t)j * inner;
        STORE(y, at, exp(LOAD(x, at) - top) * scale);
    }
}

// Layer normalisation over the last `length` elements of each row, then * gamma + beta.
__kernel void layer_norm(const __global STORED* x, __global STORED* y, const __global STORED* gamma,
                         const __global STORED* beta, const int length, const float epsilon) {
    __local float scratch[GROUP];
    const int r = get_group_id(0), lane = get_local_id(0);
    const __global STORED* row = x + (size_t)r * length;
    float sum = 0.0f;
    for (int j = lane; j < length; j += GROUP) sum += LOAD(row, j);
    const float mean = group_sum(sum, scratch) / length;
    float squares = 0.0f;
    for (int j = lane; j < length; j += GROUP) {
        const float d = LOAD(row, j) - mean;
        squares += d * d;
    }
    const float scale = rsqrt(group_sum(squares, scratch) / length + epsilon);
    for (int j = lane; j < length; j += GROUP)
        STORE(y, (size_t)r * length + j,
              (LOAD(row, j) - mean) * scale * LOAD(gamma, j) + LOAD(beta, j));
}

// Max or average of each plane of `length` elements: global pooling.
#ifdef MAX
__kernel void global_pool(const __global STORED* x, __global STORED* y, const int length) {
    __local float scratch[GROUP];
    const int r = get_group_id(0), lane = get_local_id(0);
    const __global STORED* plane = x + (size_t)r * length;
    float acc = MAX ? -INFINITY : 0.0f;
    for (int j = lane; j < length; j += GROUP) {
        const float v = LOAD(plane, j);
        acc = MAX ? fmax(acc, v) : acc + v;
    }
    acc = MAX ? group_max(acc, scratch) : group_sum(acc, scratch);
    if (lane == 0) STORE(y, r, MAX ? acc : acc / length);
}
#endif
#endif

// Copy x[outer x inner] into columns offset .. offset + inner - 1 of y[outer x out_inner]:
// one input of a concatenation.
__kernel void concat(const __global STORED* x, __global STORED* y, const int n, const int inner,
                     const int out_inner, const int offset) {
    const int i = get_global_id(0);
    if (i >= n) return;
    STORE(y, (size_t)(i / inner) * out_inner + offset + i % inner, LOAD(x, i));
}

// Element i's offset in an input whose strides along the output's axes are `strides`
// (0 where the input broadcasts): the output's index decoded axis by axis.
inline size_t offset_of(int i, const __global int* dims, const __global int* strides) {
    size_t offset = 0;
    for (int k = RANK - 1; k >= 0; --k) {
        offset += (size_t)(i % dims[k]) * strides[k];
        i /= dims[k];
    }
    return offset;
}

// y = f(a, b[, c]) with numpy's broadcasting: meta holds the output's dims, then each
// input's strides along them.
#ifdef FUNCTION
__kernel void broadcast(const __global STORED* a, const __global STORED* b,
                        const __global STORED* c, __global STORED* y, const __global int* meta,
                        const int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const float u = LOAD(a, offset_of(i, meta, meta + RANK));
#if INPUTS > 1
    const float v = LOAD(b, offset_of(i, meta, meta + 2 * RANK));
#endif
#if FUNCTION == 0
    float r = u + v;
#elif FUNCTION == 1
    float r = u - v;
#elif FUNCTION == 2
    float r = u * v;
#elif FUNCTION == 3
    float r = u / v;
#elif FUNCTION == 4
    float r = v == 2.0f ? u * u : pow(u, v);
#elif FUNCTION == 5
    float r = fmin(u, v);
#elif FUNCTION == 6
    float r = fmax(u, v);
#elif FUNCTION == 7  // Mod, fmod=0: the remainder takes the divisor's sign
    float r = fmod(u, v);
    if (r != 0.0f && (r < 0.0f) != (v < 0.0f)) r += v;
#elif FUNCTION == 8  // Mod, fmod=1
    float r = fmod(u, v);
#elif FUNCTION == 9
    float r = u == v ? 1.0f : 0.0f;
#elif FUNCTION == 10
    float r = u < v ? 1.0f : 0.0f;
#elif FUNCTION == 11
    float r = u <= v ? 1.0f : 0.0f;
#elif FUNCTION == 12
    float r = u > v ? 1.0f : 0.0f;
#elif FUNCTION == 13
    float r = u >= v ? 1.0f : 0.0f;
#elif FUNCTION == 14
    float r = (u != 0.0f && v != 0.0f) ? 1.0f : 0.0f;
#elif FUNCTION == 15
    float r = (u != 0.0f || v != 0.0f) ? 1.0f : 0.0f;
#elif FUNCTION == 16
    float r = ((u != 0.0f) != (v != 0.0f)) ? 1.0f : 0.0f;
#elif FUNCTION == 17  // PRelu: slope b
    float r = u >= 0.0f ? u : u * v;
#elif FUNCTION == 18  // Where: condition a, then b, else c
    float r = u != 0.0f ? v : LOAD(c, offset_of(i, meta, meta + 3 * RANK));
#elif FUNCTION == 19  // Expand: a alone
    float r = u;
#endif
    STORE(y, i, r);
}
#endif

// y[o] = x[sum_k c_k * stride_k], c_k = start_k + o_k * step_k (or table[o_k] along the table
// axis): slices, steps, transposes, broadcasts, gathers, tiles (MODE 1: c_k mod the input's
// size) and pads (MODE 2 to 4: a coordinate outside the input reads `value`, the edge, or its
// reflection). meta: per axis out_dim, start, step, in_dim, stride.
#ifdef MODE
// The element of x that output element i reads (meta's axes, table along table_axis); inside:
// cleared where a pad reads `value` instead.
inline size_t index_source(const __global int* meta, const __global int* table,
                           const int table_axis, int rest, int* inside) {
    size_t source = 0;
    for (int k = RANK - 1; k >= 0; --k) {
        const __global int* m = meta + 5 * k;
        const int o = rest % m[0];
        rest /= m[0];
        int c = m[1] + o * m[2];
#if TABLE
        if (k == table_axis) c = table[o];
#endif
#if MODE == 1
        c %= m[3];
#elif MODE == 2
        *inside &= c >= 0 && c < m[3];
        c = clamp(c, 0, m[3] - 1);
#elif MODE == 3
        c = clamp(c, 0, m[3] - 1);
#elif MODE == 4
        if (m[3] > 1) {
            const int period = 2 * (m[3] - 1);
            c = abs(c) % period;
            if (c >= m[3]) c = period - c;
        } else {
            c = 0;
        }
#endif
        source += (size_t)c * m[4];
    }
    return source;
}

__kernel void index_map(const __global STORED* x, __global STORED* y, const __global int* meta,
                        const __global int* table, const int table_axis, const int n,
                        const float value EPILOGUE_ARGUMENTS) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int inside = 1;
    const size_t source = index_source(meta, table, table_axis, i, &inside);
    STORE(y, i, EPILOGUE(inside ? LOAD(x, source) : value, i));
}

// Two plain index maps (built with MODE 0, TABLE 1) of one input, n elements each, in one
// launch: the first n work-items write y0 by meta's first RANK axes (and table from 0 along
// table_axis0), the next n write y1 by the next RANK (table from table_start1 along
// table_axis1; -1: no table). ShuffleNet's split of a block's input into the half it convolves
// and the half it passes on: one launch where two would each pay the host's cost of an enqueue.
#if PAIR
__kernel void index_map_pair(const __global STORED* x, __global STORED* y0, __global STORED* y1,
                             const __global int* meta, const __global int* table,
                             const int table_axis0, const int table_axis1, const int table_start1,
                             const int n) {
    const int i = get_global_id(0);
    if (i >= 2 * n) return;
    const int second = i >= n, index = second ? i - n : i;
    const __global int* gathered = table + (second ? table_start1 : 0);
    int inside = 1;
    const size_t source = index_source(meta + second * 5 * RANK, gathered,
                                       second ? table_axis1 : table_axis0, index, &inside);
    STORE(second ? y1 : y0, index, LOAD(x, source));
}
#endif
#endif

// A reduction per output element over the reduced axes: meta holds the output's dims, the
// input's strides, then the reduced axes' sizes (1 on the others); count is their product.
#ifdef REDUCTION
__kernel void reduce(const __global STORED* x, __global STORED* y, const __global int* meta,
                     const int n, const int count) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const size_t base = offset_of(i, meta, meta + RANK);
#if REDUCTION == 2
    float acc = -INFINITY;
#elif REDUCTION == 3
    float acc = INFINITY;
#elif REDUCTION == 6
    float acc = 1.0f;
#else
    float acc = 0.0f;
#endif
    for (int r = 0; r < count; ++r) {
        const float v = LOAD(x, base + offset_of(r, meta + 2 * RANK, meta + RANK));
#if REDUCTION == 2
        acc = fmax(acc, v);
#elif REDUCTION == 3
        acc = fmin(acc, v);
#elif REDUCTION == 4 || REDUCTION == 5
        acc += v * v;
#elif REDUCTION == 6
        acc *= v;
#else
        acc += v;
#endif
    }
#if REDUCTION == 1
    acc /= (float)count;
#elif REDUCTION == 4
    acc = sqrt(acc);
#endif
    STORE(y, i, acc);
}
#endif

// Resize of planes x[planes x H x W] to y[planes x OH x OW], nearest or bilinear, with ONNX's
// coordinate transformations (0 half_pixel, 1 pytorch_half_pixel, 2 align_corners,
// 3 asymmetric, 4 tf_half_pixel_for_nn) and nearest rounding (0 round_prefer_floor,
// 1 round_prefer_ceil, 2 floor, 3 ceil). scale_h and scale_w are output over input.
#ifdef COORDINATES
inline float source_coordinate(const int o, const float scale, const int in, const int out) {
#if COORDINATES == 0
    return ((float)o + 0.5f) / scale - 0.5f;
#elif COORDINATES == 1
    return out > 1 ? ((float)o + 0.5f) / scale - 0.5f : 0.0f;
#elif COORDINATES == 2
    return out > 1 ? (float)o * (float)(in - 1) / (float)(out - 1) : 0.0f;
#elif COORDINATES == 3
    return (float)o / scale;
#else
    return ((float)o + 0.5f) / scale;
#endif
}

inline int nearest(const float c, const int size) {
#if NEAREST == 0
    const int r = (c == floor(c) + 0.5f) ? (int)floor(c) : (int)round(c);
#elif NEAREST == 1
    const int r = (int)round(c);
#elif NEAREST == 2
    const int r = (int)floor(c);
#else
    const int r = (int)ceil(c);
#endif
    return clamp(r, 0, size - 1);
}

__kernel void resize(const __global STORED* x, __global STORED* y, const int planes, const int H,
                     const int W, const int OH, const int OW, const float scale_h,
                     const float scale_w) {
    const int i = get_global_id(0);
    if (i >= planes * OH * OW) return;
    const int ow = i % OW, oh = (i / OW) % OH;
    const __global STORED* plane = x + (size_t)(i / (OW * OH)) * H * W;
    const float ch = source_coordinate(oh, scale_h, H, OH);
    const float cw = source_coordinate(ow, scale_w, W, OW);
#if LINEAR
    const float fh = clamp(ch, 0.0f, (float)(H - 1)), fw = clamp(cw, 0.0f, (float)(W - 1));
    const int h0 = (int)floor(fh), w0 = (int)floor(fw);
    const int h1 = min(h0 + 1, H - 1), w1 = min(w0 + 1, W - 1);
    const float dh = fh - h0, dw = fw - w0;
    const float top = LOAD(plane, h0 * W + w0) * (1.0f - dw) + LOAD(plane, h0 * W + w1) * dw;
    const float bottom = LOAD(plane, h1 * W + w0) * (1.0f - dw) + LOAD(plane, h1 * W + w1) * dw;
    STORE(y, i, top * (1.0f - dh) + bottom * dh);
#else
    STORE(y, i, LOAD(plane, nearest(ch, H) * W + nearest(cw, W)));
#endif
}
#endif

// A transposed 2-D convolution, one output element per work-item: x[N x C x H x W],
// weight[C x K/GROUPS x KH x KW], y[N x K x OH x OW]. Untuned: segmentation decoders use few.
#ifdef GROUPS
__kernel void conv_transpose(const __global STORED* x, const __global STORED* weight,
                             const __global STORED* bias, __global STORED* y, const int N,
                             const int C, const int H, const int W, const int K, const int OH,
                             const int OW) {
    const int i = get_global_id(0);
    if (i >= N * K * OH * OW) return;
    const int ow = i % OW, oh = (i / OW) % OH, k = (i / (OW * OH)) % K, n = i / (OW * OH * K);
    const int per_group_out = K / GROUPS, per_group_in = C / GROUPS, g = k / per_group_out;
#if HAS_BIAS
    float acc = LOAD(bias, k);
#else
    float acc = 0.0f;
#endif
    for (int c = g * per_group_in; c < (g + 1) * per_group_in; ++c) {
        const __global STORED* plane = x + ((size_t)n * C + c) * H * W;
        const __global STORED* taps = weight + ((size_t)c * per_group_out + k % per_group_out) * KH * KW;
        for (int r = 0; r < KH; ++r) {
            const int th = oh + PT - r * DH;
            if (th < 0 || th % SH) continue;
            const int h = th / SH;
            if (h >= H) continue;
            for (int s = 0; s < KW; ++s) {
                const int tw = ow + PL - s * DW;
                if (tw < 0 || tw % SW) continue;
                const int w = tw / SW;
                if (w < W) acc += LOAD(plane, h * W + w) * LOAD(taps, r * KW + s);
            }
        }
    }
    STORE(y, i, acc);
}
#endif

// y[batch] = alpha * a[batch] @ b[batch] for batches whose matrices cannot be sub-buffers of
// their tensors (broadcast batch axes, sizes off the device's alignment, operands read where a
// transpose or slice left them: runtime/views.py): one output element per work-item. meta: the
// output's batch dims; a's, b's and y's element strides along them; then (offset, row stride,
// column stride) of a, b and y.
#ifdef BATCHED
inline size_t matrix_at(const int batch, const __global int* meta, const int operand) {
    return offset_of(batch, meta, meta + (1 + operand) * RANK) + meta[4 * RANK + 3 * operand];
}

__kernel void batched_matmul(const __global STORED* a, const __global STORED* b,
                             __global STORED* y, const __global int* meta, const int n,
                             const int M, const int N, const int K, const float alpha) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const __global int* at = meta + 4 * RANK;
    const int col = i % N, row = (i / N) % M, batch = i / (M * N);
    const __global STORED* ra = a + matrix_at(batch, meta, 0) + (size_t)row * at[1];
    const __global STORED* cb = b + matrix_at(batch, meta, 1) + (size_t)col * at[5];
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += LOAD(ra, (size_t)k * at[2]) * LOAD(cb, (size_t)k * at[4]);
    STORE(y, matrix_at(batch, meta, 2) + (size_t)row * at[7] + (size_t)col * at[8], alpha * acc);
}

// The same product tiled, for a GPU: a work-group of G x G work-items (G = BT / TPW) computes
// a BT x BT tile of one matrix of y, each work-item TPW x TPW outputs G apart (so neighbours
// store neighbouring columns), K in steps of 16 through local memory; matrix `batch` is the
// third dimension. Tiles are loaded with neighbouring work-items on neighbouring addresses
// whichever way an operand lies (a transposed one along its rows). Edges read zeros and store
// nothing. Untuned: for products too small to pay a tuned launch each (attention's scores and
// context, B x heads of them), which one output a work-item leaves bound by loads. The plans
// (runtime/batched.py's TILES) differ in tile: 32 for matrices a 64-wide tile covers badly
// (ViT's 197 rows: 256 computed), 128 with 8 x 8 a work-item for long sequences.
#ifndef BT
#define BT 64
#endif
#ifndef TPW
#define TPW 4
#endif
#define BK 16
#define G (BT / TPW)
__kernel __attribute__((reqd_work_group_size(G, G, 1)))
void batched_matmul_tiled(const __global STORED* a, const __global STORED* b,
                          __global STORED* y, const __global int* meta, const int M,
                          const int N, const int K, const float alpha) {
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * G + tx;
    const int col0 = get_group_id(0) * BT, row0 = get_group_id(1) * BT, batch = get_global_id(2);
    const __global int* at = meta + 4 * RANK;
    const int ars = at[1], acs = at[2], brs = at[4], bcs = at[5];
    const __global STORED* ab = a + matrix_at(batch, meta, 0);
    const __global STORED* bb = b + matrix_at(batch, meta, 1);
    __global STORED* yb = y + matrix_at(batch, meta, 2);
    const bool a_down = ars == 1 && acs != 1;  // a's tile is contiguous along its rows
    const bool b_down = brs == 1 && bcs != 1;  // b's along k
    __local float as[BK][BT + 1];  // as[k][row], bs[k][col]: padded, so that writing along k
    __local float bs[BK][BT + 1];  // spreads over the banks
    float acc[TPW][TPW];
    for (int i = 0; i < TPW; ++i) {
        for (int j = 0; j < TPW; ++j) acc[i][j] = 0.0f;
    }
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = lid; e < BT * BK; e += G * G) {
            const int r = a_down ? e % BT : e / BK, k = a_down ? e / BT : e % BK;
            const bool inside = row0 + r < M && k0 + k < K;
            as[k][r] = inside ? LOAD(ab, (size_t)(row0 + r) * ars + (size_t)(k0 + k) * acs) : 0.0f;
        }
        for (int e = lid; e < BK * BT; e += G * G) {
            const int k = b_down ? e % BK : e / BT, c = b_down ? e / BK : e % BT;
            const bool inside = k0 + k < K && col0 + c < N;
            bs[k][c] = inside ? LOAD(bb, (size_t)(k0 + k) * brs + (size_t)(col0 + c) * bcs) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float ar[TPW], br[TPW];
#pragma unroll
            for (int i = 0; i < TPW; ++i) ar[i] = as[k][ty + G * i];
#pragma unroll
            for (int j = 0; j < TPW; ++j) br[j] = bs[k][tx + G * j];
#pragma unroll
            for (int i = 0; i < TPW; ++i) {
#pragma unroll
                for (int j = 0; j < TPW; ++j) acc[i][j] += ar[i] * br[j];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < TPW; ++i) {
        const int row = row0 + ty + G * i;
        for (int j = 0; j < TPW; ++j) {
            const int col = col0 + tx + G * j;
            if (row < M && col < N) {
                STORE(yb, (size_t)row * at[7] + (size_t)col * at[8], alpha * acc[i][j]);
            }
        }
    }
}
#endif

// Attention, y = softmax(alpha * q k) v over the last axis (runtime/attention.py), k as the
// scores' B (D x SK): one query row a work-item, AQ rows of one matrix a work-group (matrix
// `batch` is the second dimension). Keys and values come AK at a time through local memory as
// vectors of 4 along the head (zero past D or DV), every work-item reading the same vector at
// once (a broadcast): a key's dot product and a value's update are 4 multiply-adds a local
// read, the AK dot products of a step independent of each other. The softmax is online: the
// row's running maximum and sum, its sum of p v rescaled where the maximum grows; the scores are
// never stored. meta as batched_matmul's, for q, k, v and y (corners after five rows).
// Both attention kernels: a score (scaled already) through the scores' epilogue, where the
// scores have one (a position bias), at its index in the scores' tensor, plus the mask's element
// where MASK (meta's mask row: its strides along the batch axes, then along rows and keys);
// rows past SQ are computed but never stored, and their scores are not the tensor's elements.
#ifdef EPILOGUE
#define SCORE_EPILOGUE(v, i) EPILOGUE((v), (i))
#else
#define SCORE_EPILOGUE(v, i) (v)
#endif
#if MASK
#define MASK_BASE                                                                          \
    const __global STORED* mb = mask + offset_of(batch, meta, meta + 5 * RANK + 12);       \
    const int mrs = meta[6 * RANK + 12], mks = meta[6 * RANK + 13]
#define SCORE_MASK(row, key) LOAD(mb, (size_t)(row) * mrs + (size_t)(key) * mks)
#else
#define MASK_BASE
#define SCORE_MASK(row, key) 0.0f
#endif
// Where matrix `batch`'s q, k, v, y (and mask) start; `at`: their offsets, row and column
// strides.
#define ATTENTION_BASES                                                                    \
    const __global int* at = meta + 5 * RANK;                                              \
    const __global STORED* qb = q + offset_of(batch, meta, meta + RANK) + at[0];           \
    const __global STORED* kb = k + offset_of(batch, meta, meta + 2 * RANK) + at[3];       \
    const __global STORED* vb = v + offset_of(batch, meta, meta + 3 * RANK) + at[6];       \
    __global STORED* yb = y + offset_of(batch, meta, meta + 4 * RANK) + at[9];             \
    MASK_BASE
#define SCORE(v, batch, row, key)                                                          \
    ((row) < SQ ? SCORE_EPILOGUE((v), ((batch) * SQ + (row)) * SK + (key)) + SCORE_MASK(row, key) \
                : (v))

#ifdef ATTENTION
#define D4 ((D + 3) / 4)
#define DV4 ((DV + 3) / 4)
__kernel __attribute__((reqd_work_group_size(AQ, 1, 1)))
void attention(const __global STORED* q, const __global STORED* k, const __global STORED* v,
               const __global STORED* mask, __global STORED* y, const __global int* meta,
               const int SQ, const int SK, const float alpha EPILOGUE_ARGUMENTS) {
    const int lid = get_local_id(0), row = get_group_id(0) * AQ + lid, batch = get_group_id(1);
    ATTENTION_BASES;
    const bool k_down = at[4] == 1;  // a key's elements lie together: load along d
    const bool v_across = at[8] == 1;
    __local float4 ks[AK][D4];
    __local float4 vs[AK][DV4];
    __local float* kf = (__local float*)ks;
    __local float* vf = (__local float*)vs;
    float4 qr[D4], acc[DV4];
    const bool inside = row < SQ;
#pragma unroll
    for (int d = 0; d < D4 * 4; ++d) {
        const bool real = inside && d < D;
        ((float*)qr)[d] = real ? alpha * LOAD(qb, (size_t)row * at[1] + (size_t)d * at[2]) : 0.0f;
    }
#pragma unroll
    for (int d = 0; d < DV4; ++d) acc[d] = (float4)(0.0f);
    float top = -INFINITY, sum = 0.0f;
    for (int j0 = 0; j0 < SK; j0 += AK) {
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < AK * D4 * 4; e += AQ) {
            const int j = k_down ? e / (D4 * 4) : e % AK, d = k_down ? e % (D4 * 4) : e / AK;
            const bool real = j0 + j < SK && d < D;
            kf[j * D4 * 4 + d] = real ? LOAD(kb, (size_t)d * at[4] + (size_t)(j0 + j) * at[5]) : 0.0f;
        }
        for (int e = lid; e < AK * DV4 * 4; e += AQ) {
            const int j = v_across ? e / (DV4 * 4) : e % AK, d = v_across ? e % (DV4 * 4) : e / AK;
            const bool real = j0 + j < SK && d < DV;
            vf[j * DV4 * 4 + d] = real ? LOAD(vb, (size_t)(j0 + j) * at[7] + (size_t)d * at[8]) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[AK];
#pragma unroll
        for (int j = 0; j < AK; ++j) s[j] = 0.0f;
#pragma unroll
        for (int d = 0; d < D4; ++d) {
#pragma unroll
            for (int j = 0; j < AK; ++j) s[j] += dot(qr[d], ks[j][d]);
        }
        float most = top;
#pragma unroll
        for (int j = 0; j < AK; ++j) {
            s[j] = j0 + j >= SK ? -INFINITY : SCORE(s[j], batch, row, j0 + j);
            most = fmax(most, s[j]);
        }
        const float rescale = exp(top - most);  // 0 on the first step (top is -inf)
        sum *= rescale;
#pragma unroll
        for (int d = 0; d < DV4; ++d) acc[d] *= rescale;
#pragma unroll
        for (int j = 0; j < AK; ++j) {
            const float p = exp(s[j] - most);
            sum += p;
#pragma unroll
            for (int d = 0; d < DV4; ++d) acc[d] += p * vs[j][d];
        }
        top = most;
    }
    if (inside) {
#pragma unroll
        for (int d = 0; d < DV; ++d) {
            STORE(yb, (size_t)row * at[10] + (size_t)d * at[11], ((float*)acc)[d] / sum);
        }
    }
}
#endif

// Attention in tiles (the plans `fused-tiled`, TG 16, and `fused-tiled-32`, TG 8): a work-group
// of 16 x TG work-items computes the output of TQ = 4 TG query rows of one matrix, keys TK = 32
// a step, as a GEMM kernel computes a tile: q, the step's keys and values, and the step's
// probabilities go through local memory, and each work-item computes 4 rows x 2 keys of the
// scores (rows ty + TG i, keys tx + 16 j) and 4 rows x 4 columns of the output (columns 4 tx ..),
// every local read a vector of 4 used by 8 or 16 multiply-adds. 32 rows a group leave less of a
// sequence of 197 (ViT's) as padding (224 rows computed, not 256) and make twice the groups where
// there are few matrices. A row's maximum for the step and its sum at the end are gathered
// from its 16 work-items, which are 16 lanes of one warp on NVIDIA's compiler (a group's
// work-item 16 ty + tx), by shuffles there and through local memory elsewhere; the softmax is
// online as in `attention`. For heads up to 64 wide (D, DV); its local memory is 47 KiB at most.
#ifdef ATTENTION_TILED
#ifdef cl_nv_pragma_unroll
// The maximum or sum of x over the 16 lanes xor 1..8 apart: a row's 16 work-items. The local
// memory way took 64 reads and a barrier a step for each work-item, a fifth of the kernel's
// local traffic: the shuffles took 9 % off the kernel at ViT's shapes on the H200
// (benchmarks/results/networks.md).
#define LANES_SHUFFLE 1
inline float lane_xor(const float x, const int m) {
    uint o;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(o) : "r"(as_uint(x)), "r"(m));
    return as_float(o);
}
inline float lanes_max(float x) {
    for (int m = 8; m > 0; m >>= 1) x = fmax(x, lane_xor(x, m));
    return x;
}
inline float lanes_sum(float x) {
    for (int m = 8; m > 0; m >>= 1) x += lane_xor(x, m);
    return x;
}
#else
#define LANES_SHUFFLE 0
#endif
#define TQ (4 * TG)  // query rows a work-group
#define TK 32
#define DT (((D + 3) / 4) * 4)  // q's and k's head, padded with zeros to whole vectors
#define DP (DT + 4)  // a row of the q and k tiles: whole vectors, rows 4 banks apart
#define VP 68  // a row of the value tile: 64 columns and 4
#define PP (TK + 4)  // a row of the probabilities
__kernel __attribute__((reqd_work_group_size(16, TG, 1)))
void attention_tiled(const __global STORED* q, const __global STORED* k,
                     const __global STORED* v, const __global STORED* mask, __global STORED* y,
                     const __global int* meta, const int SQ, const int SK,
                     const float alpha EPILOGUE_ARGUMENTS) {
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * 16 + tx;
    const int row0 = get_group_id(0) * TQ, batch = get_group_id(1);
    ATTENTION_BASES;
    __local float4 q4[TQ * DP / 4], k4[TK * DP / 4], v4[TK * VP / 4], p4[TQ * PP / 4];
#if !LANES_SHUFFLE
    __local float red[16 * TQ];  // red[t * TQ + r]: row r's part from work-item tx = t
#endif
    __local float *qs = (__local float*)q4, *ks = (__local float*)k4;
    __local float *vs = (__local float*)v4, *ps = (__local float*)p4;
    const bool q_across = at[2] == 1, k_down = at[4] == 1, v_across = at[8] == 1;
    for (int e = lid; e < TQ * DT; e += 16 * TG) {
        const int r = q_across ? e / DT : e % TQ, d = q_across ? e % DT : e / TQ;
        const bool real = row0 + r < SQ && d < D;
        qs[r * DP + d] = real ? alpha * LOAD(qb, (size_t)(row0 + r) * at[1] + (size_t)d * at[2]) : 0.0f;
    }
    float4 acc[4];
    float top[4], sum[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        acc[i] = (float4)(0.0f);
        top[i] = -INFINITY;
        sum[i] = 0.0f;
    }
    for (int j0 = 0; j0 < SK; j0 += TK) {
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < TK * DT; e += 16 * TG) {
            const int j = k_down ? e / DT : e % TK, d = k_down ? e % DT : e / TK;
            const bool real = j0 + j < SK && d < D;
            ks[j * DP + d] = real ? LOAD(kb, (size_t)d * at[4] + (size_t)(j0 + j) * at[5]) : 0.0f;
        }
        for (int e = lid; e < TK * 64; e += 16 * TG) {
            const int j = v_across ? e / 64 : e % TK, d = v_across ? e % 64 : e / TK;
            const bool real = j0 + j < SK && d < DV;
            vs[j * VP + d] = real ? LOAD(vb, (size_t)(j0 + j) * at[7] + (size_t)d * at[8]) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i) s[i][0] = s[i][1] = 0.0f;
#pragma unroll
        for (int d = 0; d < DT / 4; ++d) {
            const float4 key0 = k4[tx * (DP / 4) + d], key1 = k4[(tx + 16) * (DP / 4) + d];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float4 query = q4[(ty + TG * i) * (DP / 4) + d];
                s[i][0] += dot(query, key0);
                s[i][1] += dot(query, key1);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = row0 + ty + TG * i;
            s[i][0] = j0 + tx >= SK ? -INFINITY : SCORE(s[i][0], batch, row, j0 + tx);
            s[i][1] = j0 + tx + 16 >= SK ? -INFINITY : SCORE(s[i][1], batch, row, j0 + tx + 16);
#if !LANES_SHUFFLE
            red[tx * TQ + ty + TG * i] = fmax(s[i][0], s[i][1]);
#endif
        }
#if !LANES_SHUFFLE
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#if LANES_SHUFFLE
            const float most = fmax(top[i], lanes_max(fmax(s[i][0], s[i][1])));
#else
            float most = top[i];
            for (int t = 0; t < 16; ++t) most = fmax(most, red[t * TQ + ty + TG * i]);
#endif
            const float rescale = exp(top[i] - most);  // 0 on the first step (top is -inf)
            const float p0 = exp(s[i][0] - most), p1 = exp(s[i][1] - most);
            sum[i] = sum[i] * rescale + p0 + p1;
            acc[i] *= rescale;
            top[i] = most;
            ps[(ty + TG * i) * PP + tx] = p0;
            ps[(ty + TG * i) * PP + tx + 16] = p1;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int j = 0; j < TK / 4; ++j) {
            const float4 v0 = v4[(4 * j) * (VP / 4) + tx], v1 = v4[(4 * j + 1) * (VP / 4) + tx];
            const float4 v2 = v4[(4 * j + 2) * (VP / 4) + tx], v3 = v4[(4 * j + 3) * (VP / 4) + tx];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float4 p = p4[(ty + TG * i) * (PP / 4) + j];
                acc[i] += p.x * v0 + p.y * v1 + p.z * v2 + p.w * v3;
            }
        }
    }
#if !LANES_SHUFFLE
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int i = 0; i < 4; ++i) red[tx * TQ + ty + TG * i] = sum[i];
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#if LANES_SHUFFLE
        const float total = lanes_sum(sum[i]);
#else
        float total = 0.0f;
        for (int t = 0; t < 16; ++t) total += red[t * TQ + ty + TG * i];
#endif
        const int row = row0 + ty + TG * i;
        const float values[4] = {acc[i].x, acc[i].y, acc[i].z, acc[i].w};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int d = 4 * tx + c;
            if (row < SQ && d < DV) STORE(yb, (size_t)row * at[10] + (size_t)d * at[11], values[c] / total);
        }
    }
}
#endif
