//! A GEMM whose weights stay in host memory ([`Gemm::host_weights`]):
//! `Wᵀ[Nₚ,Kₚ]` in page-locked host memory, copied before every run into a
//! slot of the device's staging ring (`ring.rs`) on the copy stream,
//! early where the caller prefetches ([`Gemm::prefetch`]), else at the
//! launch. The GEMM frees its own device weights once the host holds them.
//!
//! A copy is identified by its [`Ticket`]: a prefetch leaves the ticket
//! here, and the launch reads the slot only while the ring says the ticket
//! still holds it (another launch may have taken the slot over, or the
//! ring grown since); otherwise the launch queues a copy of its own.
//!
//! [`Gemm::host_weights`]: crate::Gemm::host_weights
//! [`Gemm::prefetch`]: crate::Gemm::prefetch

use super::super::Device;
use super::super::mem::PinnedBuf;
use super::super::ring::{RingDevice, StagingRing, Ticket};
use super::{At, CudaGemm, Elem, transpose_convert, with_elem};
use crate::convert::FromF32;
use crate::{Error, Result};

/// The weights kept on the host, and the copy of them queued, if any.
pub(in crate::cuda) struct HostWeights {
    /// `Wᵀ[Nₚ,Kₚ]` in the element type, zero past N and K.
    buf: PinnedBuf,
    /// The bytes a copy moves: Nₚ·Kₚ·e.
    bytes: usize,
    /// The copy queued by a prefetch and not yet read by a launch.
    ticket: Option<Ticket>,
}

impl HostWeights {
    /// For a launch with host weights `w` on `dev`: the ring locked until
    /// the launch is queued, and the ticket of the copy the kernels read
    /// (the prefetched one, or one queued now, taking a slot over if
    /// every one is pending). `None` for resident weights.
    pub(super) fn stage<'a>(
        w: &mut Option<HostWeights>,
        dev: &'a Device,
    ) -> Result<Option<Staged<'a>>> {
        let Some(h) = w else {
            return Ok(None);
        };
        let rd = dev.ring_device()?;
        let mut ring = dev.lock_ring();
        let ticket = h
            .ticket(&mut ring, &rd, true)?
            .expect("a launch takes a slot over when none is free");
        // Read by this launch: a later one copies again.
        h.ticket = None;
        Ok(Some(Staged {
            ring,
            dev: rd,
            ticket,
            released: false,
        }))
    }

    /// The ticket of a copy of these weights in a slot: the prefetched one
    /// while it still holds its slot, else a copy queued now (`None` where
    /// every slot is pending and `take_over` is false).
    fn ticket(
        &mut self,
        ring: &mut StagingRing,
        dev: &RingDevice<'_>,
        take_over: bool,
    ) -> Result<Option<Ticket>> {
        if let Some(t) = self.ticket.filter(|&t| ring.holds(t)) {
            return Ok(Some(t));
        }
        self.ticket = ring.queue_copy(dev, &self.buf, self.bytes, take_over)?;
        Ok(self.ticket)
    }
}

/// What a launch of a GEMM with host weights holds between queueing its
/// copy and its kernels: the ring (locked) and its copy's ticket.
pub(super) struct Staged<'a> {
    ring: std::sync::MutexGuard<'a, StagingRing>,
    dev: RingDevice<'a>,
    ticket: Ticket,
    /// The release was queued ([`Staged::release`]).
    released: bool,
}

impl Drop for Staged<'_> {
    /// A launch that failed before its release: nothing will read the
    /// copy, and the slot is free again (not left pending for good).
    fn drop(&mut self) {
        if !self.released {
            self.ring.cancel(self.ticket);
        }
    }
}

impl Staged<'_> {
    /// The device address the kernels read the weights from.
    pub(super) fn ptr(&self) -> cudarc::driver::sys::CUdeviceptr {
        self.ring.ptr(self.ticket)
    }

    /// Queues the compute stream's wait for the copy (after the start
    /// event, so the GEMM's time holds what of the copy it waits for).
    pub(super) fn wait_copied(&self) -> Result<()> {
        self.ring.wait_copied(&self.dev, self.ticket)
    }

    /// Queues the slot's release behind the kernels, and frees it for the
    /// next copy.
    pub(super) fn release(mut self) -> Result<()> {
        self.released = true;
        self.ring.release(&self.dev, self.ticket)
    }
}

impl CudaGemm {
    /// [`Gemm::host_weights`](crate::Gemm::host_weights): transposes and
    /// converts `w` into page-locked host memory, joins the device's
    /// staging ring (growing its slots if this GEMM is the largest) and
    /// frees the device weights.
    pub(super) fn keep_weights_on_host(&mut self, w: &[f32]) -> Result<()> {
        let (_, k, n) = self.spec.shape.mkn();
        let (k, n) = (k as usize, n as usize);
        self.spec.check_weights_len(&self.dev.id, w.len())?;
        if self.submitted.is_some() {
            return Err(Error::backend(
                self.id(),
                "host weights set while an execution is in flight",
            ));
        }
        let (kp, np) = (self.kp, self.np);
        let bytes = kp * np * self.elem.size();
        // Cached page-locked memory: the transposing writes below are
        // strided, which write-combined memory makes very slow.
        let mut h = PinnedBuf::new(&self.dev.ctx, bytes, 0, &self.dev.id)?;
        with_elem!(self.elem, T => {
            let wt = &mut h.as_mut_slice::<T>()[..kp * np];
            if (kp, np) != (k, n) {
                wt.fill(T::from_f32(0.0));
            }
            transpose_convert::<T>(w, k, n, kp, wt);
        });
        let dev = self.dev.clone();
        let rd = dev.ring_device()?;
        let mut ring = dev.lock_ring();
        match &mut self.w_host {
            Some(old) => {
                // Weights replaced: a prefetched copy of the old ones is not
                // to be read, and must finish before their buffer goes.
                if let Some(t) = old.ticket.take() {
                    ring.cancel(t);
                }
                dev.copy_stream
                    .synchronize()
                    .at(&dev.id, "cuStreamSynchronize(copy)")?;
            }
            None => ring.register(&rd, bytes)?,
        }
        self.w_host = Some(HostWeights {
            buf: h,
            bytes,
            ticket: None,
        });
        // The ring holds the weights from now on; graphs captured over the
        // device weights read them no more.
        self.w = None;
        self.captured.clear();
        Ok(())
    }

    /// [`Gemm::prefetch`](crate::Gemm::prefetch): queues the copy of the
    /// host weights into a free slot now, unless one is queued already or
    /// no slot is free (every one holds a copy whose GEMM has not run).
    pub(super) fn prefetch_weights(&mut self) -> Result<()> {
        let Some(h) = &mut self.w_host else {
            return Ok(());
        };
        let dev = self.dev.clone();
        let rd = dev.ring_device()?;
        let mut ring = dev.lock_ring();
        h.ticket(&mut ring, &rd, false)?;
        Ok(())
    }

    /// On drop: cancels a prefetched copy, waits for the copy stream (it
    /// may still read the host weights) and leaves the ring.
    pub(super) fn leave_ring(&mut self) {
        let Some(mut h) = self.w_host.take() else {
            return;
        };
        let dev = self.dev.clone();
        let mut ring = dev.lock_ring();
        if let Some(t) = h.ticket.take() {
            ring.cancel(t);
        }
        let _ = dev.copy_stream.synchronize();
        if let Ok(rd) = dev.ring_device() {
            ring.unregister(&rd);
        }
        drop(h);
    }
}
