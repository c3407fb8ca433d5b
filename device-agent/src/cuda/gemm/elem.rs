//! The element types a GEMM computes in, and the host-side layout work of
//! its weights: conversion, transposition and padding.

use cudarc::driver::sys;
use half::{bf16, f16};
use hetero_plan::DType;

use super::super::kernels::Half;
use super::super::mem::Pod;

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

/// Conversion from f32 to an element type, for the weights (converted
/// once, on the host, when a GEMM is prepared).
pub(super) trait Scalar: Pod + Send {
    fn from_f32(x: f32) -> Self;
}

impl Scalar for f32 {
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl Scalar for f16 {
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl Scalar for bf16 {
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
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

/// `dst[j*pitch + i] = src[i*cols + j]`: transposes a row-major `rows×cols`
/// matrix while converting, in cache-sized blocks, on all cores (weights of
/// a vocabulary projection are half a billion elements). `pitch` ≥ `rows`;
/// the elements of `dst` past `rows` in each row, and the rows past `cols`,
/// are left as they are (the zero padding of [`padded`]).
pub(super) fn transpose_convert<T: Scalar + Send>(
    src: &[f32],
    rows: usize,
    cols: usize,
    pitch: usize,
    dst: &mut [T],
) {
    const B: usize = 64;
    debug_assert!(pitch >= rows && dst.len() >= cols * pitch);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Each thread owns a band of destination rows (source columns).
    let band = cols.div_ceil(threads).div_ceil(B).max(1) * B;
    std::thread::scope(|scope| {
        for (t, chunk) in dst.chunks_mut(band * pitch).enumerate() {
            let j_start = t * band;
            scope.spawn(move || {
                let j_end = (j_start + chunk.len() / pitch).min(cols);
                for i0 in (0..rows).step_by(B) {
                    for j0 in (j_start..j_end).step_by(B) {
                        for i in i0..(i0 + B).min(rows) {
                            for j in j0..(j0 + B).min(j_end) {
                                chunk[(j - j_start) * pitch + i] = T::from_f32(src[i * cols + j]);
                            }
                        }
                    }
                }
            });
        }
    });
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_convert_moves_every_element() {
        let (rows, cols) = (70, 130); // not multiples of the block
        let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
        let mut dst = vec![0f32; rows * cols];
        transpose_convert::<f32>(&src, rows, cols, rows, &mut dst);
        // Into rows of a longer pitch, with rows to spare: the padding is
        // left as it was.
        let pitch = rows + 6;
        let mut wide = vec![-1f32; (cols + 3) * pitch];
        transpose_convert::<f32>(&src, rows, cols, pitch, &mut wide);
        for j in 0..cols + 3 {
            for i in 0..pitch {
                let want = if i < rows && j < cols {
                    src[i * cols + j]
                } else {
                    -1.0
                };
                assert_eq!(wide[j * pitch + i], want, "({j}, {i})");
            }
        }
        for i in 0..rows {
            for j in 0..cols {
                assert_eq!(dst[j * rows + i], src[i * cols + j]);
            }
        }
        let mut h = vec![f16::ZERO; rows * cols];
        transpose_convert::<f16>(&src[..], rows, cols, rows, &mut h);
        assert_eq!(h[rows].to_f32(), 1.0);
    }
}
