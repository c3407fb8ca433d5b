/* Misuses runtime handles through the hetero-runtime C API and checks that
 * each misuse is refused with HETERO_BAD_HANDLE and a message, never a
 * crash: NULL, values never returned by hetero_runtime_open, use after
 * close and a double close. Run by `cargo test -p hetero-runtime --test
 * capi`.
 *
 * Arguments: plan, model config.json. Prints one line per check, and
 * exits 1 when any failed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hetero_runtime.h"

static int failures = 0;

/* Checks that `rc` is `want` and, when `text` is not NULL, that the last
 * error holds it. */
static void expect(const char *what, int rc, int want, const char *text) {
    /* The last error is kept over successful calls: show it only for a failure. */
    const char *msg = rc == HETERO_OK ? "" : hetero_last_error();
    int ok = rc == want && (text == NULL || strstr(msg, text) != NULL);
    printf("%s %s: rc %d, %s\n", ok ? "ok" : "FAIL", what, rc, msg);
    if (!ok) {
        printf("  expected rc %d and a message with \"%s\"\n", want, text ? text : "");
        failures++;
    }
}

/* Every call that takes a handle, with `rt`, expecting HETERO_BAD_HANDLE
 * and `text` in the message. */
static void refused(const char *what, HeteroRuntime *rt, const char *text) {
    float in[64] = {0}, out[64];
    uint32_t m, k, n, inst;
    HeteroTiming t;
    char label[128];
    snprintf(label, sizeof label, "%s: hetero_linear", what);
    expect(label, hetero_linear(rt, "attn_q", 1, in, out), HETERO_BAD_HANDLE, text);
    snprintf(label, sizeof label, "%s: hetero_linear_ex", what);
    expect(label, hetero_linear_ex(rt, "attn_q", HETERO_PREFILL, 0, 1, in, out),
           HETERO_BAD_HANDLE, text);
    snprintf(label, sizeof label, "%s: hetero_op_dims", what);
    expect(label, hetero_op_dims(rt, "attn_q", HETERO_PREFILL, 1, &m, &k, &n, &inst),
           HETERO_BAD_HANDLE, text);
    snprintf(label, sizeof label, "%s: hetero_last_timing", what);
    expect(label, hetero_last_timing(rt, &t), HETERO_BAD_HANDLE, text);
}

/* Runs attn_q of layer 0 at length 4 on `rt`; returns its return code. */
static int run_once(HeteroRuntime *rt) {
    uint32_t m, k, n, inst;
    int rc = hetero_op_dims(rt, "attn_q", HETERO_PREFILL, 4, &m, &k, &n, &inst);
    if (rc != HETERO_OK) return rc;
    float *in = calloc((size_t)inst * m * k, sizeof(float));
    float *out = malloc((size_t)inst * m * n * sizeof(float));
    rc = hetero_linear(rt, "attn_q", 4, in, out);
    free(in);
    free(out);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PLAN CONFIG\n", argv[0]);
        return 2;
    }
    HeteroOptions o = hetero_options_default();
    o.model_config = argv[2];
    HeteroRuntime *rt = hetero_runtime_open(argv[1], &o);
    HeteroRuntime *other = hetero_runtime_open(argv[1], &o);
    if (!rt || !other) {
        fprintf(stderr, "open: %s\n", hetero_last_error());
        return 2;
    }
    expect("open runtime: hetero_linear", run_once(rt), HETERO_OK, NULL);

    /* NULL: refused, except by close, which ignores it as free() does. */
    refused("NULL", NULL, "rt is NULL");
    expect("NULL: hetero_runtime_close", hetero_runtime_close(NULL), HETERO_OK, NULL);

    /* Values never returned by hetero_runtime_open: small integers, all
     * bits set, and the address of memory that is not a runtime. */
    HeteroRuntime *garbage[] = {
        (HeteroRuntime *)(uintptr_t)1,
        (HeteroRuntime *)(uintptr_t)0x1234,
        (HeteroRuntime *)UINTPTR_MAX,
        (HeteroRuntime *)(void *)&o,
        (HeteroRuntime *)(void *)garbage,
    };
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        refused("garbage", garbage[i], "is not a runtime from hetero_runtime_open");
        expect("garbage: hetero_runtime_close", hetero_runtime_close(garbage[i]),
               HETERO_BAD_HANDLE, "is not a runtime from hetero_runtime_open");
    }

    /* Use after close and a double close. */
    expect("close", hetero_runtime_close(rt), HETERO_OK, NULL);
    refused("use after close", rt, "was closed");
    expect("double close", hetero_runtime_close(rt), HETERO_BAD_HANDLE, "was closed");

    /* A later open gets a new handle: the closed one stays refused. */
    HeteroRuntime *again = hetero_runtime_open(argv[1], &o);
    if (!again) {
        fprintf(stderr, "open: %s\n", hetero_last_error());
        return 2;
    }
    expect("reopened: hetero_linear", run_once(again), HETERO_OK, NULL);
    refused("closed after a reopen", rt, "was closed");

    /* The other runtimes are untouched by all of the above. */
    expect("other runtime: hetero_linear", run_once(other), HETERO_OK, NULL);
    expect("close other", hetero_runtime_close(other), HETERO_OK, NULL);
    expect("close reopened", hetero_runtime_close(again), HETERO_OK, NULL);

    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
