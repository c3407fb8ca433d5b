//! The thread that runs submitted graphs.
//!
//! `graphExecute` blocks its caller until the HTP is done (on a phone: the
//! FastRPC round trip and the graph; on the emulator: the CPU emulation).
//! To overlap the HTP with other processors, [`QnnGemm::submit`] hands the
//! execution to this thread and returns; the host then waits on the run's
//! completion flag ([`crate::completion::Completion`]) with a polling or a
//! blocking wait, as for the other processors. One worker per open runtime
//! (started on first use) runs the jobs in order: the HTP runs one graph
//! at a time anyway.
//!
//! Where the library declares asynchronous execution
//! (`QNN_PROPERTY_GRAPH_SUPPORT_ASYNC_EXECUTION`), [`execute_async`] hands
//! the run to `QnnGraph_executeAsync` instead, and the library's notify
//! callback raises the same completion flag. It is an optional part of the
//! API: the emulator does not offer it, and a backend that refuses a call
//! sends that run and every later one to the worker.
//!
//! [`QnnGemm::submit`]: crate::Gemm::submit

use std::ffi::c_void;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::PROCESSOR_ID;
use super::ffi::{self, Handle, QnnError};
use super::runtime::QnnLib;
use crate::{Error, Result};

/// What to do when an asynchronous run ends, given its status. Called
/// exactly once: by the library's notify callback, or by
/// [`execute_async`] itself when the library refused the call.
pub(crate) type Notify = Box<dyn FnOnce(QnnError) + Send>;

/// The notify callback: takes back the boxed [`Notify`] and runs it.
unsafe extern "C" fn notified(param: *mut c_void, status: ffi::NotifyStatus) {
    // SAFETY: `param` is the Box<Notify> leaked by `execute_async`, and
    // the library calls back once per accepted run.
    let notify = unsafe { Box::from_raw(param.cast::<Notify>()) };
    notify(status.error);
}

/// A run's inputs and outputs as raw tensors.
pub(crate) struct RawTensors {
    pub inputs: Vec<ffi::Tensor>,
    pub outputs: Vec<ffi::Tensor>,
}

// SAFETY: plain records whose pointers lead into buffers that travel with
// them (the caller of `execute_async` moves those into the `Notify`).
unsafe impl Send for RawTensors {}

/// `graphExecuteAsync` over `tensors` with `notify` as the completion;
/// returns the call's own status. The tensor arrays are kept until the run
/// ends. On a refusal (non-zero) the library will not call back, so
/// `notify` runs here with that status.
///
/// # Safety
/// The buffers the tensors point at must stay valid and untouched until
/// `notify` runs (it should own them).
pub(crate) unsafe fn execute_async(
    lib: &QnnLib,
    graph: Handle,
    mut tensors: RawTensors,
    profile: Handle,
    notify: Notify,
) -> QnnError {
    let (p_in, n_in) = (tensors.inputs.as_ptr(), tensors.inputs.len() as u32);
    let (p_out, n_out) = (tensors.outputs.as_mut_ptr(), tensors.outputs.len() as u32);
    // The arrays' heap storage does not move with them.
    let keep: Notify = Box::new(move |err| {
        let _arrays = tensors;
        notify(err)
    });
    let param = Box::into_raw(Box::new(keep));
    let Some(exec) = lib.api().graph_execute_async else {
        // SAFETY: not handed to the library; taken back once.
        unsafe { notified(param.cast(), ffi::NotifyStatus { error: u64::MAX }) };
        return u64::MAX;
    };
    // SAFETY: the caller's contract covers the buffers; `param` is a
    // Box<Notify> that `notified` takes back.
    let err = unsafe {
        exec(
            graph,
            p_in,
            n_in,
            p_out,
            n_out,
            profile,
            std::ptr::null_mut(),
            Some(notified),
            param.cast(),
        )
    };
    if err != ffi::QNN_SUCCESS {
        // SAFETY: refused, so the library will not call back.
        unsafe { notified(param.cast(), ffi::NotifyStatus { error: err }) };
    }
    err
}

/// A job: runs one graph and reports through its own completion.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// A thread that runs jobs in the order they come.
pub(crate) struct Worker {
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the thread.
    pub(crate) fn spawn() -> Result<Worker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("qnn-exec".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .map_err(|e| Error::backend(PROCESSOR_ID, format!("starting the worker: {e}")))?;
        Ok(Worker {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues a job.
    pub(crate) fn run(&self, job: Job) -> Result<()> {
        self.tx
            .as_ref()
            .expect("present until dropped")
            .send(job)
            .map_err(|_| Error::backend(PROCESSOR_ID, "the worker thread has ended"))
    }
}

impl Drop for Worker {
    /// Closes the queue and joins the thread (after the jobs queued).
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn jobs_run_in_order_off_the_calling_thread() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let here = std::thread::current().id();
        let w = Worker::spawn().unwrap();
        for i in 0..5 {
            let s = Arc::clone(&seen);
            w.run(Box::new(move || {
                assert_ne!(std::thread::current().id(), here);
                s.lock().unwrap().push(i);
            }))
            .unwrap();
        }
        drop(w);
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    /// The notify callback, called from another thread as a library does,
    /// runs the boxed completion once with the status it is given.
    #[test]
    fn the_notify_callback_runs_its_completion_once() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        let notify: Notify = Box::new(move |e| s.lock().unwrap().push(e));
        let param = Box::into_raw(Box::new(notify)) as usize;
        std::thread::spawn(move || unsafe {
            notified(param as *mut c_void, ffi::NotifyStatus { error: 1002 })
        })
        .join()
        .unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![1002]);
        assert_eq!(Arc::strong_count(&seen), 1, "the closure was dropped");
    }
}
