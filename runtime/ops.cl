// The reference runtime's untuned operators (octune.runtime): everything around the tuned
// conv2d and GEMM kernels. One work-item per output element (per row for softmax and layer
// normalisation); the host rounds the global size up to whole work-groups, hence the guards.
//
// Build defines, per kernel:
//   epilogue   HAS_SCALE, HAS_BIAS (0/1), OTHER (0 none, 1 add, 2 multiply),
//              ACT (0 none, 1 relu, 2 clip to [low, high], 3 erf)
//   pool       MAX (1 max, 0 average), KH, KW, SH, SW, PT, PL, PB, PR (pads), INCLUDE_PAD

// y = act(x * scale[c] + bias[c] (+ or *) other[i]): batch-norm, bias, residual add and
// activation after a conv or GEMM in one pass, in place (y == x) or not. Element i's channel
// is c = (i / inner) % channels, so one vector broadcasts along any one block of axes.
#ifdef ACT
__kernel void epilogue(const __global float* x, __global float* y, const __global float* scale,
                       const __global float* bias, const __global float* other, const int n,
                       const int inner, const int channels, const float low, const float high) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int c = (i / inner) % channels;
    float v = x[i];
#if HAS_SCALE
    v *= scale[c];
#endif
#if HAS_BIAS
    v += bias[c];
#endif
#if OTHER == 1
    v += other[i];
#elif OTHER == 2
    v *= other[i];
#endif
#if ACT == 1
    v = fmax(v, 0.0f);
#elif ACT == 2
    v = fmin(fmax(v, low), high);
#elif ACT == 3
    v = erf(v);
#endif
    y[i] = v;
}
#endif

// Max or average pooling of planes x[planes x H x W] into y[planes x OH x OW]; windows that
// run past the input (padding, ceil mode) skip those taps. An average divides by the taps
// inside the input, or with INCLUDE_PAD by the window clipped to the padded input (ONNX).
#ifdef KH
__kernel void pool(const __global float* x, __global float* y, const int planes, const int H,
                   const int W, const int OH, const int OW) {
    const int i = get_global_id(0);
    if (i >= planes * OH * OW) return;
    const int ow = i % OW, oh = (i / OW) % OH;
    const __global float* plane = x + (size_t)(i / (OW * OH)) * H * W;
    const int h0 = oh * SH - PT, w0 = ow * SW - PL;
    float acc = MAX ? -INFINITY : 0.0f;
    int taps = 0;
    for (int r = max(h0, 0); r < min(h0 + KH, H); ++r) {
        for (int s = max(w0, 0); s < min(w0 + KW, W); ++s) {
            const float v = plane[r * W + s];
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
    y[i] = acc;
}
#endif

// Softmax over `length` elements `inner` apart, for rows = outer x inner rows.
__kernel void softmax(const __global float* x, __global float* y, const int rows,
                      const int length, const int inner) {
    const int r = get_global_id(0);
    if (r >= rows) return;
    const size_t base = (size_t)(r / inner) * length * inner + r % inner;
    float top = -INFINITY;
    for (int j = 0; j < length; ++j) top = fmax(top, x[base + (size_t)j * inner]);
    float sum = 0.0f;
    for (int j = 0; j < length; ++j) {
        const float e = exp(x[base + (size_t)j * inner] - top);
        y[base + (size_t)j * inner] = e;
        sum += e;
    }
    const float scale = 1.0f / sum;
    for (int j = 0; j < length; ++j) y[base + (size_t)j * inner] *= scale;
}

// Layer normalisation over the last `length` elements of each row, then * gamma + beta.
__kernel void layer_norm(const __global float* x, __global float* y, const __global float* gamma,
                         const __global float* beta, const int rows, const int length,
                         const float epsilon) {
    const int r = get_global_id(0);
    if (r >= rows) return;
    const __global float* row = x + (size_t)r * length;
    float mean = 0.0f;
    for (int j = 0; j < length; ++j) mean += row[j];
    mean /= length;
    float var = 0.0f;
    for (int j = 0; j < length; ++j) var += (row[j] - mean) * (row[j] - mean);
    const float scale = rsqrt(var / length + epsilon);
    for (int j = 0; j < length; ++j)
        y[(size_t)r * length + j] = (row[j] - mean) * scale * gamma[j] + beta[j];
}

// y = x transposed: y's index (i0, i1, i2, i3) reads x at i0*s0 + i1*s1 + i2*s2 + i3*s3, the
// strides of x's axes in y's order (fewer axes: leading sizes of 1).
__kernel void transpose(const __global float* x, __global float* y, const int d1, const int d2,
                        const int d3, const int n, const int s0, const int s1, const int s2,
                        const int s3) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int i3 = i % d3, i2 = (i / d3) % d2, i1 = (i / (d3 * d2)) % d1, i0 = i / (d3 * d2 * d1);
    y[i] = x[(size_t)i0 * s0 + (size_t)i1 * s1 + (size_t)i2 * s2 + (size_t)i3 * s3];
}

// Copy x[outer x inner] into columns offset .. offset + inner - 1 of y[outer x out_inner]:
// one input of a concatenation.
__kernel void concat(const __global float* x, __global float* y, const int n, const int inner,
                     const int out_inner, const int offset) {
    const int i = get_global_id(0);
    if (i >= n) return;
    y[(size_t)(i / inner) * out_inner + offset + i % inner] = x[i];
}
