/* Runs one linear operator of a plan through the hetero-runtime C API.
 *
 *   cc example.c -I ../../include -L ../../../target/debug -lhetero_runtime -o example
 *   LD_LIBRARY_PATH=../../../target/debug ./example plan.ron config.json attn_q 5 1
 *   LD_LIBRARY_PATH=../../../target/debug ./example plan.ron model/config.json attn_q 5 1 model 1,5,9 8
 *
 * Arguments: plan, model config.json, operator, sequence length, layer;
 * then optionally a model folder (config.json and safetensors), prompt
 * token ids and the tokens to generate.
 * The input is a fixed pattern; the program prints a checksum of the output
 * (the test compares it with the Rust API's), the times, and then shows
 * that an unknown operator is refused with HETERO_BAD_INPUT. With a model
 * folder it then opens the plan with the model's weights and generates
 * greedily, printing the token ids and the times. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hetero_runtime.h"

/* Opens PLAN with the weights of MODEL_DIR and generates MAX_NEW tokens
 * after the comma-separated ids of PROMPT. */
static int generate(const char *plan, const char *config, const char *model_dir,
                    const char *prompt, uint32_t max_new) {
    uint32_t ids[256];
    size_t len = 0;
    for (const char *p = prompt; *p && len < 256;) {
        ids[len++] = (uint32_t)strtoul(p, NULL, 10);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    HeteroOptions o = hetero_options_default();
    o.model_config = config;
    o.weights = model_dir;
    HeteroRuntime *rt = hetero_runtime_open(plan, &o);
    if (!rt) {
        fprintf(stderr, "open with weights: %s\n", hetero_last_error());
        return 2;
    }
    uint32_t *out = malloc(max_new * sizeof(uint32_t));
    HeteroGenerateTimes t;
    int rc = hetero_generate(rt, model_dir, ids, len, max_new, out, &t);
    if (rc == HETERO_OK) {
        printf("generated");
        for (uint32_t i = 0; i < max_new; i++) printf(" %u", out[i]);
        printf("\nttft_us %.1f tpot_us %.1f decode_tokens_per_s %.1f\n", t.ttft_us, t.tpot_us,
               t.decode_tokens_per_s);
    } else {
        fprintf(stderr, "generate: %s\n", hetero_last_error());
    }
    free(out);
    hetero_runtime_close(rt);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 9) {
        fprintf(stderr, "usage: %s PLAN CONFIG OP SEQ_LEN LAYER [MODEL_DIR PROMPT_IDS MAX_NEW]\n",
                argv[0]);
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
    if (argc == 9) return generate(argv[1], argv[2], argv[6], argv[7], (uint32_t)strtoul(argv[8], NULL, 10));
    return 0;
}
