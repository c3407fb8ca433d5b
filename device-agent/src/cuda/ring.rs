//! The staging ring: where the GEMMs whose weights stay in host memory
//! ([`Gemm::host_weights`](crate::Gemm::host_weights), offload's CG rows)
//! find their weights on the device. Such a GEMM owns no device weight
//! buffer: before it runs, its weights are copied into one of a few
//! device buffers (slots) shared by every such GEMM of the device, so
//! that the device holds the resident weights plus the ring, not every
//! weight of the model.
//!
//! Slots: [`RING_SLOTS`], each as large as the largest host-weight GEMM
//! registered so far: a GEMM registers when its host weights are set
//! ([`StagingRing::register`]), before it runs, and a larger one grows
//! every slot then (after waiting for the device's streams, since the old
//! slots are freed). The last GEMM to leave frees the slots. Two slots are
//! what overlap needs: the one the running GEMM reads, and the one the
//! next GEMM's copy fills meanwhile.
//!
//! The copies run on the device's copy stream, the GEMMs on its compute
//! stream. Each slot has two events, and the order on the device is kept
//! by them alone:
//! - `copied`, recorded on the copy stream after a copy into the slot; the
//!   GEMM that reads the slot makes the compute stream wait for it
//!   (`cuStreamWaitEvent`) before its kernels;
//! - `released`, recorded on the compute stream after the GEMM that read
//!   the slot; the next copy into the slot makes the copy stream wait for
//!   it first, so that no copy overwrites weights a GEMM still reads.
//!
//! `cuStreamWaitEvent` waits for the event's latest record when it is
//! called, so the host must queue these in order; [`SlotTable`] makes it:
//! a slot is *pending* from the copy's queueing until its GEMM's launch
//! (which queues the wait for `copied`, the kernels and the record of
//! `released` at once, under the ring's lock), and a pending slot is never
//! handed out again by a prefetch. So when a copy is queued, `released`'s
//! latest record is that of the slot's last reader, and when a GEMM waits
//! on `copied`, its latest record is that of its own copy. A launch that
//! finds every slot pending takes the least recently used one over: the
//! GEMM that had prefetched into it finds its ticket gone
//! ([`SlotTable::holds`]) and copies again at its own launch, and the copy
//! stream, being in order, finishes the first copy before the second
//! overwrites it.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, result, sys};

use super::At;
use super::mem::{DeviceBuf, PinnedBuf};
use crate::Result;

/// Slots of a device's staging ring (module docs).
pub(super) const RING_SLOTS: usize = 2;

/// One reservation of a slot: which slot, and a number that no other
/// reservation of the device has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket {
    pub slot: usize,
    seq: u64,
}

/// What the host knows of one slot.
#[derive(Debug, Clone, Copy, Default)]
struct SlotState {
    /// The reservation whose copy the slot holds or receives.
    holder: Option<u64>,
    /// Its copy is queued and its GEMM not yet launched.
    pending: bool,
    /// The clock of the slot's last reservation (0: never).
    used: u64,
}

/// The slots' assignment, as plain bookkeeping (no device calls): which
/// slot a copy goes to, and whether a prefetched copy is still there.
#[derive(Debug, Clone)]
pub(super) struct SlotTable {
    slots: Vec<SlotState>,
    clock: u64,
}

impl SlotTable {
    /// `n` free slots.
    pub(super) fn new(n: usize) -> SlotTable {
        SlotTable {
            slots: vec![SlotState::default(); n],
            clock: 0,
        }
    }

    /// Reserves a slot for a copy about to be queued: the least recently
    /// reserved slot that is not pending (not the one the GEMM launched
    /// last reads, while another is free), else, where `take_over`, the
    /// least recently reserved pending one, whose holder loses it. `None`
    /// when every slot is pending and `take_over` is false (a prefetch,
    /// which then does not happen).
    pub(super) fn reserve(&mut self, take_over: bool) -> Option<Ticket> {
        let lru = |pending: bool| {
            (0..self.slots.len())
                .filter(|&i| self.slots[i].pending == pending)
                .min_by_key(|&i| self.slots[i].used)
        };
        let slot = lru(false).or_else(|| take_over.then(|| lru(true)).flatten())?;
        self.clock += 1;
        self.slots[slot] = SlotState {
            holder: Some(self.clock),
            pending: true,
            used: self.clock,
        };
        Some(Ticket {
            slot,
            seq: self.clock,
        })
    }

    /// Frees every slot, forgetting every reservation (the slots were
    /// reallocated). The clock goes on, so no ticket handed out before
    /// matches one handed out after.
    pub(super) fn clear(&mut self) {
        self.slots.fill(SlotState::default());
    }

    /// Whether `t`'s copy is still in its slot and not yet consumed.
    pub(super) fn holds(&self, t: Ticket) -> bool {
        let s = &self.slots[t.slot];
        s.pending && s.holder == Some(t.seq)
    }

    /// `t`'s GEMM was launched: the slot may take the next copy (queued
    /// behind the GEMM's end on the device, through `released`).
    pub(super) fn consume(&mut self, t: Ticket) {
        debug_assert!(self.holds(t));
        self.slots[t.slot].pending = false;
    }

    /// `t`'s GEMM will not run from it (its weights changed, or it is
    /// dropped): the slot is free again if `t` still held it.
    pub(super) fn cancel(&mut self, t: Ticket) {
        if self.holds(t) {
            self.slots[t.slot].pending = false;
        }
    }
}

/// A slot on the device: its buffer and its two events (module docs).
struct Slot {
    buf: DeviceBuf,
    copied: CudaEvent,
    released: CudaEvent,
}

/// A device's staging ring.
pub(super) struct StagingRing {
    table: SlotTable,
    slots: Vec<Slot>,
    /// Bytes of each slot.
    slot_bytes: usize,
    /// GEMMs registered (with host weights, not dropped).
    users: usize,
}

impl StagingRing {
    /// An empty ring (no slots until a GEMM registers).
    pub(super) fn new() -> StagingRing {
        StagingRing {
            table: SlotTable::new(RING_SLOTS),
            slots: Vec::new(),
            slot_bytes: 0,
            users: 0,
        }
    }

    /// Device bytes the ring holds now.
    pub(super) fn bytes(&self) -> usize {
        self.slots.len() * self.slot_bytes
    }

    /// Counts a GEMM of `bytes` weights in, growing the slots to fit it.
    /// Growing waits for both streams (no work may read or fill a slot
    /// that is freed) and forgets every reservation: a GEMM that had
    /// prefetched copies again at its launch.
    pub(super) fn register(&mut self, dev: &RingDevice<'_>, bytes: usize) -> Result<()> {
        if bytes > self.slot_bytes || self.slots.is_empty() {
            dev.synchronize()?;
            self.slots.clear();
            let bytes = bytes.max(self.slot_bytes);
            for _ in 0..RING_SLOTS {
                let no_timing = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
                self.slots.push(Slot {
                    buf: DeviceBuf::new(dev.ctx, bytes, dev.id)?,
                    copied: dev.ctx.new_event(no_timing).at(dev.id, "cuEventCreate")?,
                    released: dev.ctx.new_event(no_timing).at(dev.id, "cuEventCreate")?,
                });
            }
            self.slot_bytes = bytes;
            self.table.clear();
        }
        self.users += 1;
        Ok(())
    }

    /// Counts a GEMM out (it was [`register`](StagingRing::register)ed);
    /// the last one frees the slots after waiting for both streams.
    pub(super) fn unregister(&mut self, dev: &RingDevice<'_>) {
        self.users = self.users.saturating_sub(1);
        if self.users == 0 && !self.slots.is_empty() {
            let _ = dev.synchronize();
            self.slots.clear();
            self.slot_bytes = 0;
            self.table.clear();
        }
    }

    /// Whether `t`'s prefetched copy is still in its slot.
    pub(super) fn holds(&self, t: Ticket) -> bool {
        self.table.holds(t)
    }

    /// Forgets `t` ([`SlotTable::cancel`]).
    pub(super) fn cancel(&mut self, t: Ticket) {
        self.table.cancel(t)
    }

    /// Reserves a slot ([`SlotTable::reserve`]) and queues the copy of
    /// `src`'s first `bytes` into it on the copy stream, behind the end of
    /// the slot's last reader, then records `copied`. `None`, queueing
    /// nothing, where every slot is pending and `take_over` is false.
    pub(super) fn queue_copy(
        &mut self,
        dev: &RingDevice<'_>,
        src: &PinnedBuf,
        bytes: usize,
        take_over: bool,
    ) -> Result<Option<Ticket>> {
        debug_assert!(bytes <= self.slot_bytes);
        let Some(t) = self.table.reserve(take_over) else {
            return Ok(None);
        };
        let slot = &self.slots[t.slot];
        let copy = dev.copy.cu_stream();
        let queued = (|| {
            // SAFETY (all three): the events, the slot and the stream belong
            // to this context, which `RingDevice::new` made current.
            // `released`'s latest record is that of the slot's last reader
            // (module docs); never recorded, the wait is a no-op.
            unsafe { result::stream::wait_event(copy, slot.released.cu_event(), WAIT) }
                .at(dev.id, "cuStreamWaitEvent(copy stream, slot released)")?;
            // SAFETY: the slot holds `slot_bytes` ≥ `bytes`, and the
            // page-locked `src` at least `bytes`; `src` outlives the copy
            // (its GEMM waits for the copy stream before freeing it).
            unsafe {
                result::memcpy_htod_async(slot.buf.ptr(), &src.as_slice::<u8>()[..bytes], copy)
            }
            .at(dev.id, "cuMemcpyHtoDAsync(host weights)")?;
            // SAFETY: as above.
            unsafe { result::event::record(slot.copied.cu_event(), copy) }
                .at(dev.id, "cuEventRecord(slot copied)")
        })();
        if let Err(e) = queued {
            // Nothing usable was queued for `t`: a later launch copies again.
            self.table.cancel(t);
            return Err(e);
        }
        Ok(Some(t))
    }

    /// The device address of `t`'s slot.
    pub(super) fn ptr(&self, t: Ticket) -> sys::CUdeviceptr {
        self.slots[t.slot].buf.ptr()
    }

    /// Makes the compute stream wait for `t`'s copy (queued before the
    /// GEMM's kernels).
    pub(super) fn wait_copied(&self, dev: &RingDevice<'_>, t: Ticket) -> Result<()> {
        debug_assert!(self.table.holds(t));
        // SAFETY: the event and the stream belong to the current context;
        // `copied`'s latest record is `t`'s copy (module docs).
        unsafe {
            result::stream::wait_event(
                dev.compute.cu_stream(),
                self.slots[t.slot].copied.cu_event(),
                WAIT,
            )
        }
        .at(dev.id, "cuStreamWaitEvent(compute stream, weights copied)")
    }

    /// Records the end of `t`'s GEMM on the compute stream (queued after
    /// its kernels) and frees the slot for the next copy.
    pub(super) fn release(&mut self, dev: &RingDevice<'_>, t: Ticket) -> Result<()> {
        // SAFETY: the event and the stream belong to the current context.
        let recorded = unsafe {
            result::event::record(
                self.slots[t.slot].released.cu_event(),
                dev.compute.cu_stream(),
            )
        }
        .at(dev.id, "cuEventRecord(slot released)");
        if recorded.is_err() {
            // No record for the next copy to wait for: wait here instead.
            let _ = dev.compute.synchronize();
        }
        self.table.consume(t);
        recorded
    }
}

const WAIT: sys::CUevent_wait_flags = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;

/// What the ring's device calls need of the device: its context (current
/// once made), both streams and its id.
pub(super) struct RingDevice<'a> {
    pub ctx: &'a Arc<CudaContext>,
    pub compute: &'a CudaStream,
    pub copy: &'a CudaStream,
    pub id: &'a str,
}

impl<'a> RingDevice<'a> {
    /// Makes the context current for the calls that follow.
    pub(super) fn new(
        ctx: &'a Arc<CudaContext>,
        compute: &'a CudaStream,
        copy: &'a CudaStream,
        id: &'a str,
    ) -> Result<RingDevice<'a>> {
        ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        Ok(RingDevice {
            ctx,
            compute,
            copy,
            id,
        })
    }

    /// Waits for both streams.
    fn synchronize(&self) -> Result<()> {
        self.copy
            .synchronize()
            .at(self.id, "cuStreamSynchronize(copy)")?;
        self.compute
            .synchronize()
            .at(self.id, "cuStreamSynchronize(compute)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefetch_takes_the_slot_not_read_last() {
        let mut t = SlotTable::new(2);
        // The first GEMM copies and launches.
        let a = t.reserve(true).unwrap();
        t.consume(a);
        // The next one's prefetch goes to the other slot, so its copy
        // need not wait for the first GEMM to end.
        let b = t.reserve(false).unwrap();
        assert_ne!(b.slot, a.slot);
        t.consume(b);
        // Then back to the first slot, the least recently used.
        let c = t.reserve(false).unwrap();
        assert_eq!(c.slot, a.slot);
        assert_ne!(c, a, "every reservation has a number of its own");
    }

    #[test]
    fn a_pending_copy_is_never_handed_out_by_a_prefetch() {
        let mut t = SlotTable::new(2);
        let a = t.reserve(false).unwrap();
        let b = t.reserve(false).unwrap();
        assert_ne!(a.slot, b.slot);
        // Both pending: a third prefetch does not happen, and both copies
        // stay where their GEMMs will read them.
        assert_eq!(t.reserve(false), None);
        assert!(t.holds(a) && t.holds(b));
        // Once one is launched, its slot is the one handed out.
        t.consume(a);
        assert!(!t.holds(a), "consumed: not to be read again");
        let c = t.reserve(false).unwrap();
        assert_eq!(c.slot, a.slot);
        assert!(t.holds(b));
    }

    #[test]
    fn a_launch_takes_over_the_oldest_pending_slot_and_its_holder_copies_again() {
        let mut t = SlotTable::new(2);
        let a = t.reserve(false).unwrap();
        let b = t.reserve(false).unwrap();
        let c = t.reserve(true).unwrap();
        assert_eq!(c.slot, a.slot, "the least recently reserved");
        assert!(!t.holds(a), "a's copy was overwritten");
        assert!(t.holds(b) && t.holds(c));
        // a's late cancel does not free c's slot.
        t.cancel(a);
        assert!(t.holds(c));
        t.cancel(c);
        assert!(!t.holds(c));
        assert_eq!(t.reserve(false).map(|x| x.slot), Some(c.slot));
    }

    #[test]
    fn a_ticket_from_before_the_slots_were_cleared_holds_nothing_after() {
        let mut t = SlotTable::new(2);
        let old = t.reserve(false).unwrap();
        t.clear();
        let new = t.reserve(false).unwrap();
        assert_eq!(new.slot, old.slot);
        assert!(t.holds(new) && !t.holds(old));
    }

    #[test]
    fn reservations_in_turn_use_every_slot_before_reusing_one() {
        for n in 2..5 {
            let mut t = SlotTable::new(n);
            let mut seen = Vec::new();
            for _ in 0..3 * n {
                let x = t.reserve(false).unwrap();
                seen.push(x.slot);
                t.consume(x);
            }
            for w in seen.windows(n) {
                let mut s = w.to_vec();
                s.sort();
                s.dedup();
                assert_eq!(s.len(), n, "{seen:?}");
            }
        }
    }
}
