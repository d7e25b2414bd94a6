/* octune_query: the header's lookup alone, no OpenCL: one query per input line, one answer
 * per output line, as octune's Python lookup answers (tests/test_bundle.py compares them on
 * random queries, natively and cross-compiled for 32- and 64-bit ARM and RISC-V under qemu).
 *
 *   echo "gemm 64 48 32 0 0" | ./octune_query
 *   exact TRANSA=0 TRANSB=0 MR=6 ... | 8/8 16/4 | 1.2e-05 16.4 | 64 48 32 0 0 | -DTRANSA=0 ... | gemm_panel ...
 *
 * A line is a family and all its keys in the order of the header's positional lookup (gemm:
 * M N K TRANSA TRANSB; conv2d: N C H W K GROUPS R S STRIDE PAD DILATION NHWC, sizes before
 * the linear keys); "none" where nothing answers. A runtime's own code would rather fill the
 * query struct by name (octune_demo.c).
 * `octune_query source` prints the source a 4096^3 GEMM is answered with.
 */
#include <stdio.h>
#include <string.h>

#include "octune_lookup.h"

#define MAX_KEYS 16

static int lookup(const char *family, const long *q, struct octune_config *cfg) {
#ifdef OCTUNE_HAS_GEMM
    if (strcmp(family, "gemm") == 0) return octune_gemm_lookup(q[0], q[1], q[2], q[3], q[4], cfg);
#endif
#ifdef OCTUNE_HAS_CONV2D
    if (strcmp(family, "conv2d") == 0)
        return octune_conv2d_lookup(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9],
                                    q[10], q[11], cfg);
#endif
    (void)q;
    (void)cfg;
    return OCTUNE_MATCH_NONE;
}

int main(int argc, char **argv) {
    char line[1024], family[32], options[8192];
    long q[MAX_KEYS];
    int match, d, used, at, n;
    unsigned part;
    struct octune_config cfg;
    if (argc > 1 && strcmp(argv[1], "source") == 0) {
        if (!lookup("gemm", (const long[]){4096, 4096, 4096, 0, 0}, &cfg)) return 1;
        for (part = 0; part < cfg.source_count; part++) fputs(cfg.source[part], stdout);
        return 0;
    }
    while (fgets(line, sizeof line, stdin) != NULL) {
        if (sscanf(line, "%31s%n", family, &at) != 1) continue;
        memset(q, 0, sizeof q);
        for (n = 0; n < MAX_KEYS && sscanf(line + at, "%ld%n", &q[n], &used) == 1; n++) at += used;
        match = lookup(family, q, &cfg);
        if (!match) {
            printf("none\n");
            continue;
        }
        printf("%s", octune_match_names[match]);
        for (d = 0; d < cfg.ndefines; d++) printf(" %s=%d", cfg.define_names[d], cfg.defines[d]);
        printf(" |");
        for (d = 0; d < (int)cfg.work_dim; d++)
            printf(" %lu/%lu", (unsigned long)cfg.global_size[d], (unsigned long)cfg.local_size[d]);
        printf(" | %.17g %.17g |", cfg.time_s, cfg.gflops);
        if (cfg.source_index < 0) printf(" -");
        else for (d = 0; d < cfg.nkeys; d++) printf(" %lld", (long long)cfg.source_shape[d]);
        octune_build_options(&cfg, options, sizeof options);
        printf(" | %s | %s %s %s\n", options, cfg.kernel, cfg.entry, cfg.kernel_sha256);
    }
    return 0;
}
