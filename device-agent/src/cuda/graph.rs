//! A GEMM's work (its small copies and kernels) as one CUDA graph:
//! captured once from the stream, then queued by a single `cuGraphLaunch`.
//!
//! cudarc's safe `CudaGraph` is not `Send` (it holds raw pointers) and
//! keeps a `CudaStream`, while the backend drives its one stream through
//! the raw `result` layer ([`super::mem`] says why). This owner is the
//! same few calls on that layer, with the `Send` a [`Gemm`](crate::Gemm)
//! needs.

use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};

use super::At;
use crate::{Error, Result};

/// An instantiated graph and the graph it came from, destroyed on drop.
pub(super) struct Graph {
    ctx: Arc<CudaContext>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: the graph is owned by this value alone and used from one thread
// at a time (its GEMM's owner), as CUDA requires of graph objects.
unsafe impl Send for Graph {}

impl Graph {
    /// Captures what `enqueue` queues on `stream` and instantiates it.
    /// The capture is thread-local: other threads' CUDA calls neither end
    /// it nor are refused while it lasts. Nothing runs until
    /// [`Graph::launch`]. On any failure the stream leaves capture mode
    /// and the partial graph is destroyed.
    pub(super) fn capture(
        ctx: &Arc<CudaContext>,
        stream: sys::CUstream,
        id: &str,
        enqueue: impl FnOnce() -> Result<()>,
    ) -> Result<Graph> {
        ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: the stream belongs to this context, which is current.
        unsafe { result::stream::begin_capture(stream, mode) }.at(id, "cuStreamBeginCapture")?;
        let queued = enqueue();
        // SAFETY: as above; capture was begun on this stream just now.
        let ended = unsafe { result::stream::end_capture(stream) };
        let graph = match (queued, ended) {
            (Ok(()), Ok(g)) if !g.is_null() => g,
            (queued, ended) => {
                if let Some(&g) = ended.as_ref().ok().filter(|g| !g.is_null()) {
                    // SAFETY: captured above and owned by nobody else.
                    let _ = unsafe { result::graph::destroy(g) };
                }
                queued?;
                ended.at(id, "cuStreamEndCapture")?;
                return Err(Error::backend(id, "cuStreamEndCapture returned no graph"));
            }
        };
        // SAFETY: `graph` is a valid graph just captured.
        match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => Ok(Graph {
                ctx: ctx.clone(),
                graph,
                exec,
            }),
            Err(e) => {
                // SAFETY: as above; not instantiated, so destroyed once here.
                let _ = unsafe { result::graph::destroy(graph) };
                Err(e).at(id, "cuGraphInstantiate")
            }
        }
    }

    /// Queues the graph on `stream` (a stream of its context, which must
    /// be current).
    pub(super) fn launch(&self, stream: sys::CUstream, id: &str) -> Result<()> {
        // SAFETY: `exec` is a live instantiated graph of this context;
        // the caller made the context current and owns the stream.
        unsafe { result::graph::launch(self.exec, stream) }.at(id, "cuGraphLaunch")
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: both were created in `capture` and are destroyed once;
            // a launch still queued keeps its own copy of the work, which
            // CUDA completes before releasing it. Errors cannot be reported
            // from drop.
            unsafe {
                let _ = result::graph::exec_destroy(self.exec);
                let _ = result::graph::destroy(self.graph);
            }
        }
    }
}
