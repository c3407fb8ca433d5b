/* One process's host-path speed on a CUDA GPU (issue 10): the median cost of
 * single CUDA driver calls, against a pure CPU loop and a host memcpy, as a
 * runtime-min process meets them. Run it in many fresh processes: earlier
 * replays found the host's CUDA path runs at one speed per process, and this
 * says which calls carry that speed.
 *
 *   cc -O2 -o probe scripts/cuda-host-path-probe.c -ldl
 *   for i in $(seq 40); do ./probe; done > probe.jsonl
 *
 * Needs no CUDA headers: libcuda.so.1 is opened at run time and the few
 * entry points it uses are declared below. One JSON line per process:
 * medians in µs over REPS calls after WARM untimed ones.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *H;

#define REPS 2001
#define WARM 200

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(H *, int);
static CUresult (*cuCtxSetCurrent)(H);
static CUresult (*cuStreamCreate)(H *, unsigned);
static CUresult (*cuStreamSynchronize)(H);
static CUresult (*cuStreamQuery)(H);
static CUresult (*cuEventCreate)(H *, unsigned);
static CUresult (*cuEventRecord)(H, H);
static CUresult (*cuModuleLoadData)(H *, const void *);
static CUresult (*cuModuleGetFunction)(H *, H, const char *);
static CUresult (*cuLaunchKernel)(H, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, H, void **, void **);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemAllocHost)(void **, size_t);
static CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, H);
static CUresult (*cuStreamWriteValue32)(H, CUdeviceptr, uint32_t, unsigned);

static void *sym(void *lib, const char *a, const char *b) {
    void *p = dlsym(lib, a);
    if (!p && b) p = dlsym(lib, b);
    if (!p) {
        fprintf(stderr, "probe: libcuda.so.1 has no %s\n", a);
        exit(2);
    }
    return p;
}

#define CK(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != 0) {                                                         \
            fprintf(stderr, "probe: %s failed: CUresult %d\n", #call, r_);    \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

static const char PTX[] = ".version 7.0\n.target sm_50\n.address_size 64\n"
                          ".visible .entry empty()\n{\n\tret;\n}\n";

static double samples[REPS];

int main(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "probe: %s\n", dlerror());
        return 2;
    }
    cuInit = sym(lib, "cuInit", 0);
    cuDeviceGet = sym(lib, "cuDeviceGet", 0);
    cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain", 0);
    cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent", 0);
    cuStreamCreate = sym(lib, "cuStreamCreate", 0);
    cuStreamSynchronize = sym(lib, "cuStreamSynchronize", 0);
    cuStreamQuery = sym(lib, "cuStreamQuery", 0);
    cuEventCreate = sym(lib, "cuEventCreate", 0);
    cuEventRecord = sym(lib, "cuEventRecord", 0);
    cuModuleLoadData = sym(lib, "cuModuleLoadData", 0);
    cuModuleGetFunction = sym(lib, "cuModuleGetFunction", 0);
    cuLaunchKernel = sym(lib, "cuLaunchKernel", 0);
    cuMemAlloc = sym(lib, "cuMemAlloc_v2", "cuMemAlloc");
    cuMemAllocHost = sym(lib, "cuMemAllocHost_v2", "cuMemAllocHost");
    cuMemcpyHtoDAsync = sym(lib, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync");
    cuStreamWriteValue32 = sym(lib, "cuStreamWriteValue32_v2", "cuStreamWriteValue32");

    double t_init = now_us();
    int dev;
    H ctx, stream, ev, mod, fn;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    t_init = now_us() - t_init;
    CK(cuStreamCreate(&stream, 1 /* non-blocking */));
    CK(cuEventCreate(&ev, 2 /* disable timing */));
    CK(cuModuleLoadData(&mod, PTX));
    CK(cuModuleGetFunction(&fn, mod, "empty"));
    CUdeviceptr dbuf, dflag;
    CK(cuMemAlloc(&dbuf, 1 << 20));
    CK(cuMemAlloc(&dflag, 256));
    void *pinned;
    CK(cuMemAllocHost(&pinned, 1 << 20));
    char *pageable = malloc(1 << 20), *scratch = malloc(1 << 20);
    memset(pageable, 1, 1 << 20);
    memset(scratch, 2, 1 << 20);
    memset(pinned, 3, 1 << 20);

    /* Each measurement: WARM untimed rounds, then REPS timed; median. */
#define MEASURE(name, setup, timed, after)                                     \
    double name;                                                               \
    for (int i = 0; i < WARM + REPS; i++) {                                    \
        setup;                                                                 \
        double t0 = now_us();                                                  \
        timed;                                                                 \
        double t1 = now_us();                                                  \
        after;                                                                 \
        if (i >= WARM) samples[i - WARM] = t1 - t0;                           \
    }                                                                          \
    name = median(samples, REPS);

    volatile double x = 1.0;
    MEASURE(cpu_loop, , for (int j = 0; j < 2000; j++) x = x * 1.0000001 + 1e-9, );
    MEASURE(memcpy_64k, , memcpy(scratch, pageable, 65536), );
    MEASURE(ctx_set, , CK(cuCtxSetCurrent(ctx)), );
    MEASURE(stream_query, , cuStreamQuery(stream), );
    MEASURE(event_record, , CK(cuEventRecord(ev, stream)), CK(cuStreamSynchronize(stream)));
    MEASURE(write_value, , CK(cuStreamWriteValue32(stream, dflag, (uint32_t)i, 0)),
            CK(cuStreamSynchronize(stream)));
    MEASURE(launch, , CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, 0, 0)),
            CK(cuStreamSynchronize(stream)));
    MEASURE(launch_sync, ,
            CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, 0, 0));
            CK(cuStreamSynchronize(stream)), );
    MEASURE(h2d_pinned_4k, ,
            CK(cuMemcpyHtoDAsync(dbuf, pinned, 4096, stream));
            CK(cuStreamSynchronize(stream)), );
    MEASURE(h2d_pageable_4k, ,
            CK(cuMemcpyHtoDAsync(dbuf, pageable, 4096, stream));
            CK(cuStreamSynchronize(stream)), );
    MEASURE(h2d_pageable_64k, ,
            CK(cuMemcpyHtoDAsync(dbuf, pageable, 65536, stream));
            CK(cuStreamSynchronize(stream)), );

    printf("{\"pid\": %d, \"cpu\": %d, \"init_ms\": %.1f, \"cpu_loop\": %.3f, "
           "\"memcpy_64k\": %.3f, \"ctx_set\": %.3f, \"stream_query\": %.3f, "
           "\"event_record\": %.3f, \"write_value\": %.3f, \"launch\": %.3f, "
           "\"launch_sync\": %.3f, \"h2d_pinned_4k\": %.3f, \"h2d_pageable_4k\": %.3f, "
           "\"h2d_pageable_64k\": %.3f}\n",
           getpid(), sched_getcpu(), t_init / 1e3, cpu_loop, memcpy_64k, ctx_set,
           stream_query, event_record, write_value, launch, launch_sync, h2d_pinned_4k,
           h2d_pageable_4k, h2d_pageable_64k);
    return 0;
}
