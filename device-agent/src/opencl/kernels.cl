// Kernels of the hetero OpenCL backend (OpenCL C 1.2).
//
// gemm: C[R,S] = X[R,K] . Y[K,S], every matrix row-major. The backend maps
// both operand orders onto it: `aw` is X = A, Y = W (R = M, S = N); `wt_at`
// is X = W^T, Y = A^T, C = C^T (R = N, S = M).
//
// Tiling, fixed at build time by -D options:
//   TR x TS  the block of C one work-group computes,
//   TK       the slice of K staged in local memory per step,
//   WR x WS  the outputs one work-item computes (strided by TR/WR, TS/WS so
//            neighbouring work-items touch neighbouring columns).
// Every load and store is bounds-checked, so any R, S, K >= 1 works; tiles
// past the edge are zero-filled.
//
// HALF selects f16 storage: operands and result are `half` in memory, read
// and written with vload_half / vstore_half, accumulation is f32.

#ifndef TR
#error "TR, TS, TK, WR, WS must be defined"
#endif

#define LR (TR / WR)
#define LS (TS / WS)
#define NT (LR * LS)

#ifdef HALF
typedef half T;
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half((v), (i), (p))
#else
typedef float T;
#define LOAD(p, i) ((p)[(i)])
#define STORE(p, i, v) ((p)[(i)] = (v))
#endif

__kernel __attribute__((reqd_work_group_size(LS, LR, 1)))
void gemm(const int R, const int S, const int K,
          __global const T* restrict X,
          __global const T* restrict Y,
          __global T* restrict C)
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
            Xs[kk][rr] = (gr < R && gk < K) ? LOAD(X, gr * K + gk) : 0.0f;
        }
        for (int i = tid; i < TK * TS; i += NT) {
            const int kk = i / TS, ss = i % TS;
            const int gk = k0 + kk, gs = s0 + ss;
            Ys[kk][ss] = (gk < K && gs < S) ? LOAD(Y, gk * S + gs) : 0.0f;
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
                STORE(C, gr * S + gs, acc[i][j]);
        }
    }
}
