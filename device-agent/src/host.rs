//! Host memory for the activations a processor reads and writes.
//!
//! [`Gemm::write_input`](crate::Gemm::write_input) and
//! [`Gemm::read_output`](crate::Gemm::read_output) take plain `f32` slices.
//! A discrete GPU copies from page-locked memory with one DMA, but from
//! ordinary (pageable) memory only through the driver's own bounce buffers,
//! at a fraction of the bus rate and with a time that depends on the host.
//! So a caller that moves activations every operator (the runtime's buffer
//! pool) asks a backend for memory it can reach directly
//! ([`Backend::alloc_host`](crate::Backend::alloc_host)) and falls back to
//! the heap where no backend offers any.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// Memory a backend allocated for the host side of its copies.
pub trait HostMem: Send {
    /// The values.
    fn as_slice(&self) -> &[f32];
    /// The values, mutable.
    fn as_mut_slice(&mut self) -> &mut [f32];
}

/// A buffer of `f32` values in host memory: heap memory, or memory a
/// backend allocated (page-locked for a discrete GPU). Dereferences to a
/// slice of exactly the length asked for.
pub enum HostBuf {
    /// Ordinary heap memory.
    Heap(Vec<f32>),
    /// Memory from [`Backend::alloc_host`](crate::Backend::alloc_host).
    Backend(Box<dyn HostMem>),
}

impl HostBuf {
    /// `len` zeros on the heap.
    pub fn heap(len: usize) -> HostBuf {
        HostBuf::Heap(vec![0.0; len])
    }

    /// `len` zeros in `backend`'s host memory for direct copies
    /// ([`Backend::alloc_host`](crate::Backend::alloc_host)), or on the heap
    /// where it has none or the allocation fails.
    pub fn for_backend(backend: &dyn crate::Backend, len: usize) -> HostBuf {
        backend
            .alloc_host(len)
            .map_or_else(|_| HostBuf::heap(len), HostBuf::Backend)
    }

    /// Whether a backend allocated it (page-locked memory on a GPU).
    pub fn is_backend_memory(&self) -> bool {
        matches!(self, HostBuf::Backend(_))
    }
}

impl Default for HostBuf {
    fn default() -> Self {
        HostBuf::Heap(Vec::new())
    }
}

impl Deref for HostBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            HostBuf::Heap(v) => v,
            HostBuf::Backend(m) => m.as_slice(),
        }
    }
}

impl DerefMut for HostBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        match self {
            HostBuf::Heap(v) => v,
            HostBuf::Backend(m) => m.as_mut_slice(),
        }
    }
}

impl fmt::Debug for HostBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            HostBuf::Heap(_) => "heap",
            HostBuf::Backend(_) => "backend",
        };
        f.debug_struct("HostBuf")
            .field("memory", &kind)
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(Vec<f32>);
    impl HostMem for Fake {
        fn as_slice(&self) -> &[f32] {
            &self.0
        }
        fn as_mut_slice(&mut self) -> &mut [f32] {
            &mut self.0
        }
    }

    #[test]
    fn both_kinds_read_and_write_as_slices() {
        let mut heap = HostBuf::heap(3);
        heap[1] = 2.0;
        assert_eq!(&heap[..], &[0.0, 2.0, 0.0]);
        assert!(!heap.is_backend_memory());
        let mut pinned = HostBuf::Backend(Box::new(Fake(vec![0.0; 4])));
        pinned[..2].copy_from_slice(&[1.0, 2.0]);
        assert_eq!(&pinned[..], &[1.0, 2.0, 0.0, 0.0]);
        assert!(pinned.is_backend_memory());
        assert_eq!(
            format!("{pinned:?}"),
            "HostBuf { memory: \"backend\", len: 4 }"
        );
        assert_eq!(HostBuf::default().len(), 0);
    }
}
