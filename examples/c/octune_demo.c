/* octune_demo: what a runtime written in C does with an exported octune header.
 *
 * For each check (a GEMM or conv2d shape) it asks the header for the config, builds the source
 * the answer names with the answer's build options, launches its entry and every follow-up
 * launch with the argument layout the answer gives (cfg.arguments) and the workspace it asks
 * for, reads the result back and compares it with a plain C reference. One line per check;
 * the exit status is nonzero when any check fails.
 *
 *   make -C examples/c HEADER_DIR=bundle/ && examples/c/octune_demo [CHECK...]
 *
 * A check is FAMILY:KEY,KEY,... in the family's key order (gemm:M,N,K[,TRANSA,TRANSB];
 * conv2d:N,C,H,W,K,R,S[,STRIDE,PAD,DILATION,GROUPS,NHWC]), keys left out at their defaults.
 * The device is the one the header was tuned on (OCTUNE_DEVICE_NAME and _DRIVER_VERSION);
 * OCTUNE_DEMO_ANY_DEVICE=1 takes the first device instead.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "octune_lookup.h"

#define MAX_KEYS 12
#define MAX_ARGS 16

struct check {
    const char *family;
    long keys[MAX_KEYS];
    int nkeys;
};

/* Inputs in [-1, 1), never all zero: a kernel that writes nothing cannot pass. */
static float next_input(unsigned long *state) {
    *state = *state * 6364136223846793005UL + 1442695040888963407UL;
    return (float)((*state >> 40) & 0xFFFFFF) / (float)0x800000 - 1.0f;
}

static float *random_floats(size_t count, unsigned long seed) {
    float *data = (float *)malloc(count * sizeof *data);
    size_t i;
    if (data == NULL) return NULL;
    for (i = 0; i < count; i++) data[i] = next_input(&seed);
    return data;
}

static int parse_check(const char *text, struct check *check) {
    const char *colon = strchr(text, ':');
    char *end;
    if (colon == NULL) return 0;
    check->family = strncmp(text, "gemm:", 5) == 0 ? "gemm"
                  : strncmp(text, "conv2d:", 7) == 0 ? "conv2d" : NULL;
    if (check->family == NULL) return 0;
    check->nkeys = 0;
    for (text = colon + 1; *text != '\0' && check->nkeys < MAX_KEYS; text = end) {
        check->keys[check->nkeys++] = strtol(text, &end, 10);
        if (end == text) return 0;
        if (*end == ',') end++;
    }
    return check->nkeys > 0;
}

static long key(const struct check *check, int i, long fallback) {
    return i < check->nkeys ? check->keys[i] : fallback;
}

/* The operands, their reference and the kernel's arguments for one check. */
struct problem {
    size_t count[3];     /* elements of the two inputs and of the output */
    float *input[2];
    double *reference;   /* float64 */
    double *magnitude;   /* the sum of |products| behind each output: the error scale */
    cl_int ints[8];
    int nints;
    int swap;            /* a pointwise NCHW conv as a GEMM: A = w, B = x */
};

static void gemm_reference(const float *a, const float *b, long m, long n, long k, int ta,
                           int tb, double *out, double *magnitude) {
    long i, j, l;
    long lda = ta ? m : k, ldb = tb ? k : n;
    for (i = 0; i < m; i++)
        for (j = 0; j < n; j++) {
            double sum = 0.0, size = 0.0;
            for (l = 0; l < k; l++) {
                double p = (double)(ta ? a[l * lda + i] : a[i * lda + l]) *
                           (double)(tb ? b[j * ldb + l] : b[l * ldb + j]);
                sum += p;
                size += fabs(p);
            }
            out[i * n + j] = sum;
            magnitude[i * n + j] = size;
        }
}

static void conv2d_reference(const float *x, const float *w, const long *s, long oh, long ow,
                             double *out, double *magnitude) {
    long n = s[0], c = s[1], h = s[2], wd = s[3], k = s[4], r = s[5], sz = s[6];
    long stride = s[7], pad = s[8], dilation = s[9], groups = s[10], nhwc = s[11];
    long cpg = c / groups, kpg = k / groups, b, o, y, xx, ci, fr, fs;
    for (b = 0; b < n; b++)
        for (o = 0; o < k; o++)
            for (y = 0; y < oh; y++)
                for (xx = 0; xx < ow; xx++) {
                    double sum = 0.0, size = 0.0;
                    long at = nhwc ? ((b * oh + y) * ow + xx) * k + o
                                   : ((b * k + o) * oh + y) * ow + xx;
                    for (ci = 0; ci < cpg; ci++)
                        for (fr = 0; fr < r; fr++)
                            for (fs = 0; fs < sz; fs++) {
                                long iy = y * stride - pad + fr * dilation;
                                long ix = xx * stride - pad + fs * dilation;
                                long channel = (o / kpg) * cpg + ci;
                                double p;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                                p = (double)(nhwc ? x[((b * h + iy) * wd + ix) * c + channel]
                                                  : x[((b * c + channel) * h + iy) * wd + ix]) *
                                    (double)(nhwc ? w[((o * r + fr) * sz + fs) * cpg + ci]
                                                  : w[((o * cpg + ci) * r + fr) * sz + fs]);
                                sum += p;
                                size += fabs(p);
                            }
                    out[at] = sum;
                    magnitude[at] = size;
                }
}

/* The check's shape, its config and its operands; 0 with a reason where it cannot run. */
static int prepare(const struct check *check, struct octune_config *cfg, struct problem *p,
                   const char **why) {
    int match = OCTUNE_MATCH_NONE;
    memset(p, 0, sizeof *p);
    if (strcmp(check->family, "gemm") == 0) {
#ifdef OCTUNE_HAS_GEMM
        struct octune_gemm_query q;
        memset(&q, 0, sizeof q);
        q.m = key(check, 0, 1); q.n = key(check, 1, 1); q.k = key(check, 2, 1);
        q.transa = key(check, 3, 0); q.transb = key(check, 4, 0);
        match = octune_gemm_lookup_query(&q, cfg);
        if (!match) { *why = "no gemm kernel of the header takes this shape"; return 0; }
        p->count[0] = (size_t)(q.m * q.k);
        p->count[1] = (size_t)(q.k * q.n);
        p->count[2] = (size_t)(q.m * q.n);
#else
        *why = "the header has no gemm kernel";
        return 0;
#endif
    } else {
#ifdef OCTUNE_HAS_CONV2D
        struct octune_conv2d_query q;
        long s[12], oh, ow;
        int i;
        memset(&q, 0, sizeof q);
        q.n = key(check, 0, 1); q.c = key(check, 1, 1); q.h = key(check, 2, 1);
        q.w = key(check, 3, 1); q.k = key(check, 4, 1); q.r = key(check, 5, 1);
        q.s = key(check, 6, 1); q.stride = key(check, 7, 1); q.pad = key(check, 8, 0);
        q.dilation = key(check, 9, 1); q.groups = key(check, 10, 1); q.nhwc = key(check, 11, 0);
        match = octune_conv2d_lookup_query(&q, cfg);
        if (!match) { *why = "no conv2d kernel of the header takes this shape"; return 0; }
        s[0] = q.n; s[1] = q.c; s[2] = q.h; s[3] = q.w; s[4] = q.k; s[5] = q.r; s[6] = q.s;
        s[7] = q.stride; s[8] = q.pad; s[9] = q.dilation; s[10] = q.groups; s[11] = q.nhwc;
        oh = (q.h + 2 * q.pad - q.dilation * (q.r - 1) - 1) / q.stride + 1;
        ow = (q.w + 2 * q.pad - q.dilation * (q.s - 1) - 1) / q.stride + 1;
        p->count[0] = (size_t)(q.n * q.c * q.h * q.w);
        p->count[1] = (size_t)(q.k * (q.c / q.groups) * q.r * q.s);
        p->count[2] = (size_t)(q.n * q.k * oh * ow);
        for (i = 0; i < 2; i++) p->input[i] = random_floats(p->count[i], 7u + (unsigned)i);
        p->reference = (double *)malloc(p->count[2] * sizeof(double));
        p->magnitude = (double *)malloc(p->count[2] * sizeof(double));
        if (!p->input[0] || !p->input[1] || !p->reference || !p->magnitude) {
            *why = "out of memory";
            return 0;
        }
        conv2d_reference(p->input[0], p->input[1], s, oh, ow, p->reference, p->magnitude);
        if (cfg->arguments == OCTUNE_ARGS_CONV2D) {
            cl_int ints[7];
            ints[0] = (cl_int)q.n; ints[1] = (cl_int)q.c; ints[2] = (cl_int)q.h;
            ints[3] = (cl_int)q.w; ints[4] = (cl_int)q.k; ints[5] = (cl_int)oh;
            ints[6] = (cl_int)ow;
            memcpy(p->ints, ints, sizeof ints);
            p->nints = 7;
        } else if (cfg->arguments == OCTUNE_ARGS_CONV2D_AS_GEMM) {
            /* a pointwise conv: a GEMM over its pixels (NCHW: each image's, one per image) */
            long pixels = (q.nhwc ? q.n : 1) * q.h * q.w;
            p->ints[0] = (cl_int)(q.nhwc ? pixels : q.k);    /* M */
            p->ints[1] = (cl_int)(q.nhwc ? q.k : pixels);    /* N */
            p->ints[2] = (cl_int)q.c;                        /* K */
            p->ints[3] = (cl_int)q.c;                        /* lda */
            p->ints[4] = (cl_int)(q.nhwc ? q.c : pixels);    /* ldb */
            p->nints = 5;
            p->swap = !q.nhwc;
        }
        return match;
#else
        *why = "the header has no conv2d kernel";
        return 0;
#endif
    }
    {
        long m = key(check, 0, 1), n = key(check, 1, 1), k = key(check, 2, 1);
        int ta = (int)key(check, 3, 0), tb = (int)key(check, 4, 0), i;
        for (i = 0; i < 2; i++) p->input[i] = random_floats(p->count[i], 7u + (unsigned)i);
        p->reference = (double *)malloc(p->count[2] * sizeof(double));
        p->magnitude = (double *)malloc(p->count[2] * sizeof(double));
        if (!p->input[0] || !p->input[1] || !p->reference || !p->magnitude) {
            *why = "out of memory";
            return 0;
        }
        gemm_reference(p->input[0], p->input[1], m, n, k, ta, tb, p->reference, p->magnitude);
        p->ints[0] = (cl_int)m; p->ints[1] = (cl_int)n; p->ints[2] = (cl_int)k;
        p->ints[3] = (cl_int)(ta ? m : k);  /* lda */
        p->ints[4] = (cl_int)(tb ? k : n);  /* ldb */
        p->nints = 5;
    }
    return match;
}

/* Set a kernel's arguments as cfg->arguments lays them out. */
static cl_int set_arguments(cl_kernel kernel, const struct octune_config *cfg,
                            const struct problem *p, cl_mem x, cl_mem w, cl_mem y,
                            cl_mem workspace) {
    cl_int err = CL_SUCCESS, i;
    cl_uint at = 0;
    cl_float alpha = 1.0f, beta = 0.0f;
    if (cfg->arguments == OCTUNE_ARGS_CONV2D) {
        err |= clSetKernelArg(kernel, at++, sizeof x, &x);
        err |= clSetKernelArg(kernel, at++, sizeof w, &w);
        err |= clSetKernelArg(kernel, at++, sizeof y, &y);
        for (i = 0; i < p->nints; i++) err |= clSetKernelArg(kernel, at++, sizeof(cl_int), &p->ints[i]);
    } else {  /* GEMM, or a pointwise conv as one: (M, N, K, alpha, beta, A, lda, B, ldb, C, ldc) */
        cl_mem a = p->swap ? w : x, b = p->swap ? x : w;
        for (i = 0; i < 3; i++) err |= clSetKernelArg(kernel, at++, sizeof(cl_int), &p->ints[i]);
        err |= clSetKernelArg(kernel, at++, sizeof alpha, &alpha);
        err |= clSetKernelArg(kernel, at++, sizeof beta, &beta);
        err |= clSetKernelArg(kernel, at++, sizeof a, &a);
        err |= clSetKernelArg(kernel, at++, sizeof(cl_int), &p->ints[3]);
        err |= clSetKernelArg(kernel, at++, sizeof b, &b);
        err |= clSetKernelArg(kernel, at++, sizeof(cl_int), &p->ints[4]);
        err |= clSetKernelArg(kernel, at++, sizeof y, &y);
        err |= clSetKernelArg(kernel, at++, sizeof(cl_int), &p->ints[1]);  /* ldc = N */
    }
    if (cfg->workspace_bytes > 0) err |= clSetKernelArg(kernel, at++, sizeof workspace, &workspace);
    return err;
}

static void release(struct problem *p) {
    free(p->input[0]);
    free(p->input[1]);
    free(p->reference);
    free(p->magnitude);
}

/* Build, launch and compare one check; prints its line, returns 1 when it passed. */
static int run_check(cl_context context, cl_device_id device, cl_command_queue queue,
                     const char *label, const struct check *check) {
    struct octune_config cfg;
    struct problem p;
    const char *why = NULL;
    char options[8192], log[2048];
    cl_program program = NULL;
    cl_kernel kernels[1 + OCTUNE_MAX_THEN];
    cl_mem x = NULL, w = NULL, y = NULL, workspace = NULL;
    cl_int err;
    unsigned launch, launches = 0;
    size_t i;
    float *out = NULL;
    double worst = 0.0;
    int passed = 0, match;

    memset(kernels, 0, sizeof kernels);
    match = prepare(check, &cfg, &p, &why);
    if (!match) {
        printf("%s: FAIL %s\n", label, why);
        release(&p);
        return 0;
    }
    if (cfg.arguments != OCTUNE_ARGS_GEMM && cfg.arguments != OCTUNE_ARGS_CONV2D &&
        cfg.arguments != OCTUNE_ARGS_CONV2D_AS_GEMM) {
        printf("%s: FAIL %s answers %s, whose arguments this demo does not lay out\n", label,
               octune_match_names[match], cfg.kernel);
        release(&p);
        return 0;
    }
    if (octune_build_options(&cfg, options, sizeof options) >= (int)sizeof options) {
        printf("%s: FAIL build options too long\n", label);
        release(&p);
        return 0;
    }
    program = clCreateProgramWithSource(context, cfg.source_count, (const char **)cfg.source,
                                        NULL, &err);
    if (err == CL_SUCCESS) err = clBuildProgram(program, 1, &device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        log[0] = '\0';
        if (program) clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        printf("%s: FAIL %s does not build (%d): %.200s\n", label, cfg.kernel, err, log);
        goto done;
    }
    kernels[launches++] = clCreateKernel(program, cfg.entry, &err);
    for (i = 0; err == CL_SUCCESS && i < cfg.then_count; i++)
        kernels[launches++] = clCreateKernel(program, cfg.then_entry[i], &err);
    x = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                       p.count[0] * sizeof(float), p.input[0], &err);
    if (err == CL_SUCCESS)
        w = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                           p.count[1] * sizeof(float), p.input[1], &err);
    if (err == CL_SUCCESS)
        y = clCreateBuffer(context, CL_MEM_READ_WRITE, p.count[2] * sizeof(float), NULL, &err);
    if (err == CL_SUCCESS && cfg.workspace_bytes > 0) {
        /* Zero-filled once, when allocated: the header says a kernel's counters start there. */
        void *zeros = calloc(1, cfg.workspace_bytes);
        workspace = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                   cfg.workspace_bytes, zeros, &err);
        free(zeros);
    }
    for (launch = 0; err == CL_SUCCESS && launch < launches; launch++) {
        const size_t *global = launch ? cfg.then_global_size[launch - 1] : cfg.global_size;
        const size_t *local = launch ? cfg.then_local_size[launch - 1] : cfg.local_size;
        cl_uint dims = launch ? cfg.then_work_dim[launch - 1] : cfg.work_dim;
        err = set_arguments(kernels[launch], &cfg, &p, x, w, y, workspace);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(queue, kernels[launch], dims, NULL, global, local, 0,
                                         NULL, NULL);
    }
    out = (float *)malloc(p.count[2] * sizeof *out);
    if (err == CL_SUCCESS && out != NULL)
        err = clEnqueueReadBuffer(queue, y, CL_TRUE, 0, p.count[2] * sizeof *out, out, 0, NULL,
                                  NULL);
    if (err != CL_SUCCESS || out == NULL) {
        printf("%s: FAIL %s %s: OpenCL error %d\n", label, octune_match_names[match], cfg.kernel,
               err);
        goto done;
    }
    /* float32: each output within 2^-13 of the sum of |products| behind it. */
    for (i = 0; i < p.count[2]; i++) {
        double error = fabs((double)out[i] - p.reference[i]) / (p.magnitude[i] + 1e-30);
        if (error > worst) worst = error;
    }
    passed = worst <= 1.0 / 8192.0;
    printf("%s: %s %s %s (%s, %u launch%s%s), error %.2g of the tolerance: %s\n", label,
           passed ? "ok" : "FAIL", octune_match_names[match], cfg.kernel, cfg.entry, launches,
           launches == 1 ? "" : "es", cfg.workspace_bytes ? ", workspace" : "",
           worst * 8192.0, passed ? "matches the C reference" : "WRONG RESULT");
done:
    free(out);
    for (launch = 0; launch < launches; launch++) if (kernels[launch]) clReleaseKernel(kernels[launch]);
    if (program) clReleaseProgram(program);
    if (x) clReleaseMemObject(x);
    if (w) clReleaseMemObject(w);
    if (y) clReleaseMemObject(y);
    if (workspace) clReleaseMemObject(workspace);
    release(&p);
    return passed;
}

/* The device the header was tuned on, or the first one where OCTUNE_DEMO_ANY_DEVICE=1. */
static cl_device_id find_device(void) {
    cl_platform_id platforms[16];
    cl_device_id devices[16];
    cl_uint nplatforms = 0, ndevices, i, j;
    char name[512], driver[512];
    const char *any = getenv("OCTUNE_DEMO_ANY_DEVICE");
    if (clGetPlatformIDs(16, platforms, &nplatforms) != CL_SUCCESS) return NULL;
    for (i = 0; i < nplatforms && i < 16; i++) {
        if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, 16, devices, &ndevices) != CL_SUCCESS)
            continue;
        for (j = 0; j < ndevices && j < 16; j++) {
            clGetDeviceInfo(devices[j], CL_DEVICE_NAME, sizeof name, name, NULL);
            clGetDeviceInfo(devices[j], CL_DRIVER_VERSION, sizeof driver, driver, NULL);
            if ((any && any[0] == '1') || (strcmp(name, OCTUNE_DEVICE_NAME) == 0 &&
                                           strcmp(driver, OCTUNE_DRIVER_VERSION) == 0))
                return devices[j];
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    static const char *const defaults[] = {
        "gemm:64,48,32", "gemm:100,37,29", "conv2d:1,8,16,16,16,3,3,1,1",
        "conv2d:1,3,17,17,8,3,3,2,1",
    };
    const char *const *texts = argc > 1 ? (const char *const *)(argv + 1) : defaults;
    int count = argc > 1 ? argc - 1 : (int)(sizeof defaults / sizeof defaults[0]);
    int i, failed = 0;
    cl_int err;
    cl_device_id device = find_device();
    cl_context context;
    cl_command_queue queue;
    if (device == NULL) {
        fprintf(stderr, "octune_demo: no OpenCL device here is %s (driver %s), the one the "
                "header was tuned on: run on that device, or set OCTUNE_DEMO_ANY_DEVICE=1\n",
                OCTUNE_DEVICE_NAME, OCTUNE_DRIVER_VERSION);
        return 2;
    }
    context = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    if (err != CL_SUCCESS) return 2;
    queue = clCreateCommandQueue(context, device, 0, &err);
    if (err != CL_SUCCESS) return 2;
    for (i = 0; i < count; i++) {
        struct check check;
        if (!parse_check(texts[i], &check)) {
            printf("%s: FAIL not a check: write gemm:M,N,K or conv2d:N,C,H,W,K,R,S[,...]\n",
                   texts[i]);
            failed++;
            continue;
        }
        failed += !run_check(context, device, queue, texts[i], &check);
    }
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
    return failed ? 1 : 0;
}
