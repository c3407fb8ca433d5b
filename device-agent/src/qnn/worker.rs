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
//! `QnnGraph_executeAsync` would hand the wait to the library instead; it
//! is an optional part of the API that the emulator does not offer, so the
//! worker thread is the form that runs everywhere.
//!
//! [`QnnGemm::submit`]: crate::Gemm::submit

use std::sync::mpsc;
use std::thread::JoinHandle;

use super::PROCESSOR_ID;
use crate::{Error, Result};

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
}
