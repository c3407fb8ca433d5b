//! The element types a GEMM computes in, and the host-side layout work of
//! its weights: conversion, transposition and padding.

use cudarc::driver::sys;
use hetero_plan::DType;

use super::super::kernels::Half;

/// Element types the backend computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Elem {
    F32,
    F16,
    Bf16,
}

impl Elem {
    /// The element for a dtype, if cuBLAS runs it here.
    pub(super) fn of(dtype: DType) -> Option<Elem> {
        match dtype {
            DType::F32 => Some(Elem::F32),
            DType::F16 => Some(Elem::F16),
            DType::Bf16 => Some(Elem::Bf16),
            _ => None,
        }
    }

    /// Bytes per element.
    pub(super) fn size(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F16 | Elem::Bf16 => 2,
        }
    }

    /// The type as cuBLASLt names it.
    pub(super) fn lt(self) -> cudarc::cublaslt::sys::cudaDataType {
        use cudarc::cublaslt::sys::cudaDataType as T;
        match self {
            Elem::F32 => T::CUDA_R_32F,
            Elem::F16 => T::CUDA_R_16F,
            Elem::Bf16 => T::CUDA_R_16BF,
        }
    }

    /// The conversion kernel that writes this type, if it is not f32.
    pub(super) fn half(self) -> Option<Half> {
        match self {
            Elem::F32 => None,
            Elem::F16 => Some(Half::F16),
            Elem::Bf16 => Some(Half::Bf16),
        }
    }
}

/// Runs `$body` with `$t` bound to the Rust type of `$elem`.
macro_rules! with_elem {
    ($elem:expr, $t:ident => $body:expr) => {
        match $elem {
            Elem::F32 => {
                type $t = f32;
                $body
            }
            Elem::F16 => {
                type $t = half::f16;
                $body
            }
            Elem::Bf16 => {
                type $t = half::bf16;
                $body
            }
        }
    };
}
pub(super) use with_elem;

/// A dimension as the GEMM computes it: K and N are rounded up to a
/// multiple of 8 over zeros, which leave the product as it is. cuBLAS
/// needs 16-byte aligned rows for its tensor-core kernels: with K = 8148 an
/// H100 took 308 µs for 256×8148×16384 `aw`, against 115 µs at K = 8104,
/// and `transposed` with N = 4148 took 2.2 times `aw`.
pub(super) fn padded(d: usize) -> usize {
    d.next_multiple_of(8)
}

/// A 2D copy with every field zero, for `..copy_2d()` after the fields a
/// copy sets.
pub(super) fn copy_2d() -> sys::CUDA_MEMCPY2D {
    sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
        srcHost: std::ptr::null(),
        srcDevice: 0,
        srcArray: std::ptr::null_mut(),
        srcPitch: 0,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
        dstHost: std::ptr::null_mut(),
        dstDevice: 0,
        dstArray: std::ptr::null_mut(),
        dstPitch: 0,
        WidthInBytes: 0,
        Height: 0,
    }
}
