/* Runs one linear operator of a plan through the hetero-runtime C API.
 *
 *   cc example.c -I ../../include -L ../../../target/debug -lhetero_runtime -o example
 *   LD_LIBRARY_PATH=../../../target/debug ./example plan.ron config.json attn_q 5 1
 *
 * Arguments: plan, model config.json, operator, sequence length, layer.
 * The input is a fixed pattern; the program prints a checksum of the output
 * (the test compares it with the Rust API's), the times, and then shows
 * that an unknown operator is refused with HETERO_BAD_INPUT. */
#include <stdio.h>
#include <stdlib.h>

#include "hetero_runtime.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s PLAN CONFIG OP SEQ_LEN LAYER\n", argv[0]);
        return 2;
    }
    const char *op = argv[3];
    uint32_t seq_len = (uint32_t)strtoul(argv[4], NULL, 10);
    uint32_t layer = (uint32_t)strtoul(argv[5], NULL, 10);

    HeteroOptions o = hetero_options_default();
    o.model_config = argv[2];
    o.sync = HETERO_SYNC_POLL;
    HeteroRuntime *rt = hetero_runtime_open(argv[1], &o);
    if (!rt) {
        fprintf(stderr, "open: %s\n", hetero_last_error());
        return 2;
    }

    uint32_t m, k, n, inst;
    if (hetero_op_dims(rt, op, HETERO_PREFILL, seq_len, &m, &k, &n, &inst) != HETERO_OK) {
        fprintf(stderr, "dims: %s\n", hetero_last_error());
        hetero_runtime_close(rt);
        return 2;
    }
    size_t in_len = (size_t)inst * m * k, out_len = (size_t)inst * m * n;
    float *in = malloc(in_len * sizeof(float));
    float *out = malloc(out_len * sizeof(float));
    for (size_t i = 0; i < in_len; i++) in[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;

    int rc = hetero_linear_ex(rt, op, HETERO_PREFILL, layer, seq_len, in, out);
    if (rc != HETERO_OK) {
        fprintf(stderr, "linear: %s\n", hetero_last_error());
        hetero_runtime_close(rt);
        return rc;
    }
    double sum = 0.0;
    for (size_t i = 0; i < out_len; i++) sum += (double)out[i] * (double)(i % 5 + 1);
    HeteroTiming t;
    hetero_last_timing(rt, &t);
    printf("dims %u %u %u %u\n", m, k, n, inst);
    printf("checksum %.9e\n", sum);
    printf("measured_us %.3f predicted_us %.3f dispatch_us %.3f\n", t.measured_us,
           t.predicted_us, t.dispatch_us);

    rc = hetero_linear(rt, "no_such_op", seq_len, in, out);
    printf("unknown op rc %d: %s\n", rc, hetero_last_error());

    hetero_runtime_close(rt);
    free(in);
    free(out);
    return 0;
}
