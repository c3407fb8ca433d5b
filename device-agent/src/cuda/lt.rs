//! cuBLASLt: the matmul behind every GEMM, and the algorithms its
//! heuristic offers for a shape.
//!
//! `cublasGemmEx` runs the first algorithm of cuBLAS's heuristic and
//! offers no other on sm_80 and later (its `CUBLAS_GEMM_ALGO*` values are
//! ignored there). `cublasLtMatmulAlgoGetHeuristic` returns up to
//! [`ALGOS`] candidates, best guess first, and
//! [`CudaGemm::choose`](super::gemm) times them: where the first guess
//! is slow for one shape (the jumps of `docs/benchmarks.md`, Predictors),
//! another algorithm may not be.
//!
//! One [`Lt`] per device holds the handle, the heuristic's preference and
//! one workspace; every GEMM of the device runs on its one stream, so they
//! share the workspace without overlapping. One [`LtMatmul`] per (rows,
//! form) of a GEMM holds the descriptors of `D = op(A)·B` with
//! `op(A) = Aᵀ` (the `TN` call of [`super::gemm`]) and the algorithms.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublaslt::result::{self as lt, CublasError};
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaContext, sys as driver};

use super::At;
use super::mem::DeviceBuf;
use crate::{Error, Result};

impl<T> At<T> for std::result::Result<T, CublasError> {
    fn at(self, id: &str, call: &str) -> Result<T> {
        self.map_err(|e| Error::backend(id, format!("{call}: {e}")))
    }
}

/// The workspace an algorithm may use: 32 MiB, cuBLAS's own default on
/// Hopper, so that the candidates are those `cublasGemmEx` would choose
/// among.
pub(super) const WORKSPACE_BYTES: usize = 32 << 20;

/// How many algorithms the heuristic is asked for.
pub(super) const ALGOS: usize = 8;

/// A device's cuBLASLt handle, heuristic preference and workspace.
pub(super) struct Lt {
    handle: sys::cublasLtHandle_t,
    pref: sys::cublasLtMatmulPreference_t,
    workspace: DeviceBuf,
}

// SAFETY: the handle and the preference are used from one thread at a
// time (the device's GEMMs are driven by their owner), as cuBLASLt allows
// for a handle; they are plain pointers to library state.
unsafe impl Send for Lt {}
// SAFETY: as above; `&Lt` only reads the pointers.
unsafe impl Sync for Lt {}

impl Lt {
    /// Creates the handle, the preference (at most [`WORKSPACE_BYTES`] of
    /// workspace) and the workspace.
    pub(super) fn new(ctx: &Arc<CudaContext>, id: &str) -> Result<Lt> {
        ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        let workspace = DeviceBuf::new(ctx, WORKSPACE_BYTES, id)?;
        let handle = lt::create_handle().at(id, "cublasLtCreate")?;
        let pref = match lt::create_matmul_pref() {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: created above, destroyed once.
                let _ = unsafe { lt::destroy_handle(handle) };
                return Err(e).at(id, "cublasLtMatmulPreferenceCreate");
            }
        };
        let lt = Lt {
            handle,
            pref,
            workspace,
        };
        let bytes = WORKSPACE_BYTES as u64;
        // SAFETY: a live preference; the attribute is a u64.
        unsafe {
            lt::set_matmul_pref_attribute(
                lt.pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &bytes as *const u64 as *const c_void,
                size_of::<u64>(),
            )
        }
        .at(id, "cublasLtMatmulPreferenceSetAttribute(workspace)")?;
        Ok(lt)
    }

    /// The version of cuBLASLt, as `major·10000 + minor·100 + patch`.
    pub(super) fn version() -> usize {
        // SAFETY: takes no arguments.
        unsafe { sys::cublasLtGetVersion() }
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once; nothing runs on them now
        // (the GEMMs that used them hold the device, which owns this).
        unsafe {
            let _ = lt::destroy_matmul_pref(self.pref);
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

/// The problem of one [`LtMatmul`], in cuBLAS's column-major terms:
/// `D[m,n] = Aᵀ·B` with `A` stored `k×m` (ld k), `B` `k×n` (ld k) and
/// `D` f32 `m×n` (ld `ldd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Problem {
    /// The element type of `A` and `B`.
    pub input: sys::cudaDataType,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ldd: usize,
}

/// The descriptors of one problem and the algorithms cuBLASLt offers for
/// it, its first guess first.
pub(super) struct LtMatmul {
    problem: Problem,
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algos: Vec<sys::cublasLtMatmulHeuristicResult_t>,
}

// SAFETY: descriptors are plain host-side library objects, used by one
// thread at a time through `&mut CudaGemm`.
unsafe impl Send for LtMatmul {}

impl LtMatmul {
    /// Describes `problem` and asks the heuristic for up to `wanted`
    /// algorithms that fit the workspace. An error if it offers none.
    pub(super) fn new(lt: &Lt, problem: Problem, wanted: usize, id: &str) -> Result<LtMatmul> {
        let Problem {
            input,
            m,
            n,
            k,
            ldd,
        } = problem;
        let desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .at(id, "cublasLtMatmulDescCreate")?;
        // From here on, drop destroys whatever was created.
        let mut mm = LtMatmul {
            problem,
            desc,
            a: std::ptr::null_mut(),
            b: std::ptr::null_mut(),
            d: std::ptr::null_mut(),
            algos: Vec::new(),
        };
        let transa = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T as i32;
        // SAFETY: a live descriptor; TRANSA takes an int32 operation.
        unsafe {
            lt::set_matmul_desc_attribute(
                mm.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &transa as *const i32 as *const c_void,
                size_of::<i32>(),
            )
        }
        .at(id, "cublasLtMatmulDescSetAttribute(TRANSA)")?;
        let layout = |t: sys::cudaDataType, rows: usize, cols: usize, ld: usize| {
            lt::create_matrix_layout(t, rows as u64, cols as u64, ld as i64)
                .at(id, "cublasLtMatrixLayoutCreate")
        };
        mm.a = layout(input, k, m, k)?;
        mm.b = layout(input, k, n, k)?;
        mm.d = layout(sys::cudaDataType::CUDA_R_32F, m, n, ldd)?;
        let wanted = wanted.max(1);
        // SAFETY: a zeroed result is a valid value of this plain C struct.
        let mut results: Vec<sys::cublasLtMatmulHeuristicResult_t> =
            vec![unsafe { std::mem::zeroed() }; wanted];
        let mut count: i32 = 0;
        // SAFETY: live descriptors and preference; `results` holds `wanted`
        // entries and cuBLASLt writes at most that many.
        unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(
                lt.handle,
                mm.desc,
                mm.a,
                mm.b,
                mm.d,
                mm.d,
                lt.pref,
                wanted as i32,
                results.as_mut_ptr(),
                &mut count,
            )
            .result()
        }
        .at(id, "cublasLtMatmulAlgoGetHeuristic")?;
        results.truncate(count.max(0) as usize);
        mm.algos = results
            .into_iter()
            .filter(|r| {
                r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                    && r.workspaceSize <= WORKSPACE_BYTES
            })
            .collect();
        if mm.algos.is_empty() {
            return Err(Error::backend(
                id,
                format!("cuBLASLt offers no algorithm for {problem:?}"),
            ));
        }
        Ok(mm)
    }

    /// The problem described.
    pub(super) fn problem(&self) -> Problem {
        self.problem
    }

    /// How many algorithms the heuristic offered (at least one).
    pub(super) fn algos(&self) -> usize {
        self.algos.len()
    }

    /// Queues `D = 1·Aᵀ·B + 0·D` with algorithm `algo` on `stream`, the
    /// operands given as `[a, b, d]`.
    ///
    /// # Safety
    /// `a`, `b` and `d` are live allocations of the current context, sized
    /// for [`LtMatmul::problem`]; `stream` belongs to that context; `lt` is
    /// the device's, and nothing else uses its workspace meanwhile.
    pub(super) unsafe fn enqueue(
        &self,
        lt: &Lt,
        algo: usize,
        [a, b, d]: [driver::CUdeviceptr; 3],
        stream: driver::CUstream,
        id: &str,
    ) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let chosen = &self.algos[algo.min(self.algos.len() - 1)];
        // SAFETY: the caller's contract; alpha and beta are host f32 values,
        // as the 32F scale type requires in the default pointer mode; C is
        // D (beta = 0, never read).
        unsafe {
            lt::matmul(
                lt.handle,
                self.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                a as *const c_void,
                self.a,
                b as *const c_void,
                self.b,
                d as *const c_void,
                self.d,
                d as *mut c_void,
                self.d,
                &chosen.algo,
                lt.workspace.ptr() as *mut c_void,
                chosen.workspaceSize,
                stream as sys::cudaStream_t,
            )
        }
        .at(id, "cublasLtMatmul")
    }
}

impl Drop for LtMatmul {
    fn drop(&mut self) {
        // SAFETY: each was created once in `new` (null where creation did
        // not get that far) and is destroyed once here.
        unsafe {
            for layout in [self.a, self.b, self.d] {
                if !layout.is_null() {
                    let _ = lt::destroy_matrix_layout(layout);
                }
            }
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}
