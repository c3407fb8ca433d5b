//! Weights converted from the `Gemm` interface's f32 to a processor's type
//! and operand order when a GEMM is prepared, on every core: a model's
//! worth of weights is billions of values, and one thread converting and
//! transposing them made preparing an 8B model take minutes.

use half::vec::HalfBitsVecExt;
use half::{bf16, f16};

/// Conversion from f32 to a stored element type.
pub trait FromF32: Copy + Send + Sync {
    /// The element nearest `x`.
    fn from_f32(x: f32) -> Self;
    /// `len` zeros from zeroed memory, which the allocator maps without
    /// touching: the pages arrive when first written, so the threads of
    /// [`convert`] and [`transpose_convert`] fault them in side by side.
    fn zeros(len: usize) -> Vec<Self>;
}

impl FromF32 for f32 {
    fn from_f32(x: f32) -> Self {
        x
    }
    fn zeros(len: usize) -> Vec<Self> {
        vec![0.0; len]
    }
}

impl FromF32 for f16 {
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn zeros(len: usize) -> Vec<Self> {
        vec![0u16; len].reinterpret_into()
    }
}

impl FromF32 for bf16 {
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn zeros(len: usize) -> Vec<Self> {
        vec![0u16; len].reinterpret_into()
    }
}

/// Below this many values one thread converts: starting threads costs more.
const PARALLEL_MIN: usize = 1 << 18;

/// Edge of the square blocks a transpose moves, in values.
const BLOCK: usize = 64;

/// `dst[i] = src[i]` converted, on all cores for a large slice.
pub fn convert<T: FromF32>(src: &[f32], dst: &mut [T]) {
    assert_eq!(src.len(), dst.len(), "convert: lengths differ");
    let threads = crate::threads_for(src.len(), PARALLEL_MIN);
    if threads == 1 {
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, &s)| *d = T::from_f32(s));
        return;
    }
    let chunk = src.len().div_ceil(threads);
    std::thread::scope(|scope| {
        for (d, s) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
            scope.spawn(move || d.iter_mut().zip(s).for_each(|(d, &s)| *d = T::from_f32(s)));
        }
    });
}

/// `dst[j*pitch + i] = src[i*cols + j]`: transposes a row-major `rows×cols`
/// matrix while converting, in cache-sized blocks, on all cores for a large
/// one. `pitch` ≥ `rows`; the elements of `dst` past `rows` in each row,
/// and the rows past `cols`, are left as they are (a caller's zero padding).
pub fn transpose_convert<T: FromF32>(
    src: &[f32],
    rows: usize,
    cols: usize,
    pitch: usize,
    dst: &mut [T],
) {
    assert!(pitch >= rows && dst.len() >= cols * pitch && src.len() >= rows * cols);
    if cols == 0 || rows == 0 {
        return;
    }
    let threads = crate::threads_for(rows * cols, PARALLEL_MIN);
    // Each thread owns a band of destination rows (source columns).
    let band = cols.div_ceil(threads).div_ceil(BLOCK).max(1) * BLOCK;
    let run = |t: usize, chunk: &mut [T]| {
        let j_start = t * band;
        let j_end = (j_start + chunk.len() / pitch).min(cols);
        for i0 in (0..rows).step_by(BLOCK) {
            for j0 in (j_start..j_end).step_by(BLOCK) {
                for i in i0..(i0 + BLOCK).min(rows) {
                    for j in j0..(j0 + BLOCK).min(j_end) {
                        chunk[(j - j_start) * pitch + i] = T::from_f32(src[i * cols + j]);
                    }
                }
            }
        }
    };
    let dst = &mut dst[..cols * pitch];
    if threads == 1 {
        return run(0, dst);
    }
    std::thread::scope(|scope| {
        for (t, chunk) in dst.chunks_mut(band * pitch).enumerate() {
            scope.spawn(move || run(t, chunk));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transposed_by_hand(src: &[f32], rows: usize, cols: usize, pitch: usize) -> Vec<f32> {
        let mut d = vec![-1.0; cols * pitch];
        for i in 0..rows {
            for j in 0..cols {
                d[j * pitch + i] = src[i * cols + j];
            }
        }
        d
    }

    #[test]
    fn transpose_convert_moves_every_element_small_and_threaded() {
        // Small (one thread), and large enough for threads, with sides that
        // are not multiples of the block or of the bands.
        for (rows, cols) in [(3, 5), (130, 70), (517, 1031)] {
            let src: Vec<f32> = (0..rows * cols).map(|x| x as f32).collect();
            for pitch in [rows, rows + 3] {
                let mut d = vec![-1.0f32; cols * pitch];
                transpose_convert(&src, rows, cols, pitch, &mut d);
                assert_eq!(
                    d,
                    transposed_by_hand(&src, rows, cols, pitch),
                    "{rows}x{cols}"
                );
            }
        }
    }

    #[test]
    fn convert_rounds_every_value_as_half_does() {
        let src: Vec<f32> = (0..(PARALLEL_MIN + 77)).map(|x| x as f32 * 0.37).collect();
        let mut h = vec![f16::ZERO; src.len()];
        convert(&src, &mut h);
        assert!(h.iter().zip(&src).all(|(h, &s)| *h == f16::from_f32(s)));
        let mut b = vec![bf16::ZERO; src.len()];
        convert(&src, &mut b);
        assert!(b.iter().zip(&src).all(|(b, &s)| *b == bf16::from_f32(s)));
    }
}
