// Kernels of the hetero OpenCL backend (OpenCL C 1.2).
//
// gemm: C[R,S] = X[R,K] . Y[K,S]. X is row-major with row pitch ldx; C
// row-major with pitch ldc; Y row-major (K rows, pitch ldy), except for DOT,
// which takes Y transposed (S rows of K, pitch ldy). The backend maps both
// operand orders onto it: `aw` is X = A, Y = W (R = M, S = N); `wt_at` is
// X = W^T, Y = A^T, C = C^T (R = N, S = M). Pitches are padded by the host
// (zeros) to the vector widths below.
//
// Three families, chosen at build time by -D options:
//
// * LMEM (default): a work-group computes a TR x TS block of C, staging
//   TK-wide slices of X and Y in local memory; each work-item computes
//   WR x WS outputs strided by TR/WR and TS/WS, so neighbouring work-items
//   touch neighbouring columns. Every load and store is bounds-checked.
//   The classic GPU tiling.
// * DIRECT: no local memory and no barrier. Each work-item computes WR
//   consecutive rows by WS vectors of VW columns (VW = 1, 4, 8 or 16),
//   loading Y with vloadVW and broadcasting X; the caches do the blocking.
//   Loads clamp their index into range instead of branching, so the inner
//   loop is straight-line; stores are masked per row and per vector (ldy and
//   ldc are multiples of VW, so a vector starting inside S stays in the row).
// * DOT: no local memory. Y is stored transposed, so both operands are
//   K-contiguous; each work-item computes WR x WS dot products, loading VW
//   elements of K at a time from each row and reducing at the end. ldx and
//   ldy are multiples of VW with zero padding, so the K loop has no tail.
//   The layout CPUs (PoCL) and matrix-vector products want.
//
// HALF selects f16 storage: operands and result are `half` in memory, read
// and written with vload_half / vstore_half (core OpenCL C, no cl_khr_fp16
// needed), accumulation is f32.

#ifndef TR
#error "TR, TS, TK, WR, WS must be defined"
#endif
#ifndef VW
#define VW 1
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#ifdef HALF
typedef half T;
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half((v), (i), (p))
#else
typedef float T;
#define LOAD(p, i) ((p)[(i)])
#define STORE(p, i, v) ((p)[(i)] = (v))
#endif

#if defined(DIRECT) || defined(DOT)

#if VW == 1
typedef float VT;
#define VLOAD(p, i) LOAD(p, i)
#define VSTORE(p, i, v) STORE(p, i, v)
#else
typedef CAT(float, VW) VT;
#ifdef HALF
#define VLOAD(p, i) CAT(vload_half, VW)(0, (p) + (i))
#define VSTORE(p, i, v) CAT(vstore_half, VW)((v), 0, (p) + (i))
#else
#define VLOAD(p, i) CAT(vload, VW)(0, (p) + (i))
#define VSTORE(p, i, v) CAT(vstore, VW)((v), 0, (p) + (i))
#endif
#endif

#endif

// Work-item rows of a work-group, in every family; each family defines
// LS, its work-item columns.
#define LR (TR / WR)

// The kernel's signature, the same in every family (the host sets the
// arguments in this order); Yname names the second operand: Yt for DOT,
// which takes it transposed.
#define GEMM_KERNEL(Yname)                                     \
    __kernel __attribute__((reqd_work_group_size(LS, LR, 1))) \
    void gemm(const int R, const int S, const int K,           \
              const int ldx, const int ldy, const int ldc,     \
              __global const T* restrict X,                    \
              __global const T* restrict Yname,                \
              __global T* restrict C)

#if defined(DIRECT)

#define LS (TS / (WS * VW))

GEMM_KERNEL(Y)
{
    // Vector column index of this work-item's first vector.
    const int v0 = get_group_id(0) * (LS * WS) + get_local_id(0);
    const int r0 = get_group_id(1) * TR + get_local_id(1) * WR;
    int xrow[WR], ycol[WS];
    for (int i = 0; i < WR; i++)
        xrow[i] = min(r0 + i, R - 1) * ldx;
    for (int j = 0; j < WS; j++)
        ycol[j] = min((v0 + j * LS) * VW, ldy - VW);

    VT acc[WR][WS];
    for (int i = 0; i < WR; i++)
        for (int j = 0; j < WS; j++)
            acc[i][j] = (VT)(0.0f);

    for (int k = 0; k < K; k++) {
        VT ys[WS];
        for (int j = 0; j < WS; j++)
            ys[j] = VLOAD(Y, k * ldy + ycol[j]);
        for (int i = 0; i < WR; i++) {
            const VT x = (VT)(LOAD(X, xrow[i] + k));
            for (int j = 0; j < WS; j++)
                acc[i][j] = mad(x, ys[j], acc[i][j]);
        }
    }

    for (int i = 0; i < WR; i++) {
        const int gr = r0 + i;
        if (gr >= R)
            continue;
        for (int j = 0; j < WS; j++) {
            const int c0 = (v0 + j * LS) * VW;
            if (c0 < S)
                VSTORE(C, gr * ldc + c0, acc[i][j]);
        }
    }
}

#elif defined(DOT)

#if VW == 1
#define HSUM(v) (v)
#elif VW == 2
#define HSUM(v) ((v).s0 + (v).s1)
#elif VW == 4
#define HSUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
#elif VW == 8
#define HSUM4_(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
#define HSUM(v) HSUM4_((v).lo + (v).hi)
#elif VW == 16
#define HSUM4_(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
#define HSUM8_(v) HSUM4_((v).lo + (v).hi)
#define HSUM(v) HSUM8_((v).lo + (v).hi)
#endif

#define LS (TS / WS)

GEMM_KERNEL(Yt)
{
    const int s0 = get_group_id(0) * TS + get_local_id(0);
    const int r0 = get_group_id(1) * TR + get_local_id(1) * WR;
    int xrow[WR], yrow[WS];
    for (int i = 0; i < WR; i++)
        xrow[i] = min(r0 + i, R - 1) * ldx;
    for (int j = 0; j < WS; j++)
        yrow[j] = min(s0 + j * LS, S - 1) * ldy;

    VT acc[WR][WS];
    for (int i = 0; i < WR; i++)
        for (int j = 0; j < WS; j++)
            acc[i][j] = (VT)(0.0f);

    // K is padded with zeros to a multiple of VW in both operands.
    for (int k = 0; k < K; k += VW) {
        VT xs[WR], ys[WS];
        for (int i = 0; i < WR; i++)
            xs[i] = VLOAD(X, xrow[i] + k);
        for (int j = 0; j < WS; j++)
            ys[j] = VLOAD(Yt, yrow[j] + k);
        for (int i = 0; i < WR; i++)
            for (int j = 0; j < WS; j++)
                acc[i][j] = mad(xs[i], ys[j], acc[i][j]);
    }

    for (int i = 0; i < WR; i++) {
        const int gr = r0 + i;
        if (gr >= R)
            continue;
        for (int j = 0; j < WS; j++) {
            const int gs = s0 + j * LS;
            if (gs < S)
                STORE(C, gr * ldc + gs, HSUM(acc[i][j]));
        }
    }
}

#else // LMEM

#define LS (TS / WS)
#define NT (LR * LS)

GEMM_KERNEL(Y)
{
    const int ls = get_local_id(0);
    const int lr = get_local_id(1);
    const int tid = lr * LS + ls;
    const int r0 = get_group_id(1) * TR;
    const int s0 = get_group_id(0) * TS;

    __local float Xs[TK][TR];
    __local float Ys[TK][TS];

    float acc[WR][WS];
    for (int i = 0; i < WR; i++)
        for (int j = 0; j < WS; j++)
            acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int i = tid; i < TR * TK; i += NT) {
            const int rr = i / TK, kk = i % TK;
            const int gr = r0 + rr, gk = k0 + kk;
            Xs[kk][rr] = (gr < R && gk < K) ? LOAD(X, gr * ldx + gk) : 0.0f;
        }
        for (int i = tid; i < TK * TS; i += NT) {
            const int kk = i / TS, ss = i % TS;
            const int gk = k0 + kk, gs = s0 + ss;
            Ys[kk][ss] = (gk < K && gs < S) ? LOAD(Y, gk * ldy + gs) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; kk++) {
            float xr[WR], ys[WS];
            for (int i = 0; i < WR; i++)
                xr[i] = Xs[kk][lr + i * LR];
            for (int j = 0; j < WS; j++)
                ys[j] = Ys[kk][ls + j * LS];
            for (int i = 0; i < WR; i++)
                for (int j = 0; j < WS; j++)
                    acc[i][j] = mad(xr[i], ys[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    for (int i = 0; i < WR; i++) {
        const int gr = r0 + lr + i * LR;
        if (gr >= R)
            continue;
        for (int j = 0; j < WS; j++) {
            const int gs = s0 + ls + j * LS;
            if (gs < S)
                STORE(C, gr * ldc + gs, acc[i][j]);
        }
    }
}

#endif
