//! One MatMul graph per prepared GEMM: tensors, quantisation, execution.

use std::ffi::{CString, c_void};
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use half::f16;
use hetero_plan::{DType, OperandOrder, WeightMode};
use serde::{Deserialize, Serialize};

use super::PROCESSOR_ID;
use super::ffi::{self, Handle};
use super::rpcmem::{RpcMem, SharedBuf};
use super::runtime::{QnnLib, Runtime};
use crate::{Error, GemmSpec, Result};

/// The graph's name inside its context.
pub(crate) const GRAPH_NAME: &str = "matmul";

/// How a tensor's elements are stored.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Element {
    /// IEEE float32.
    F32,
    /// IEEE float16.
    F16,
    /// Unsigned 16-bit fixed point, `real = scale · (q + offset)`.
    U16 {
        /// Step.
        scale: f32,
        /// Zero-point term (negative of the zero point).
        offset: i32,
    },
    /// Signed 8-bit fixed point.
    S8 {
        /// Step.
        scale: f32,
        /// Zero-point term.
        offset: i32,
    },
    /// Signed 4-bit values stored one per byte (`SFIXED_POINT_8` with the
    /// `BW_SCALE_OFFSET` encoding, bit width 4): HTP 2.51 refuses packed
    /// 4-bit tensors but accepts this form.
    S4InS8 {
        /// Step.
        scale: f32,
        /// Zero-point term.
        offset: i32,
    },
}

impl Element {
    fn data_type(self) -> u32 {
        match self {
            Element::F32 => ffi::DT_FLOAT_32,
            Element::F16 => ffi::DT_FLOAT_16,
            Element::U16 { .. } => ffi::DT_UFIXED_POINT_16,
            Element::S8 { .. } | Element::S4InS8 { .. } => ffi::DT_SFIXED_POINT_8,
        }
    }

    fn quantize_params(self) -> ffi::QuantizeParams {
        match self {
            Element::F32 | Element::F16 => ffi::QuantizeParams::undefined(),
            Element::U16 { scale, offset } | Element::S8 { scale, offset } => {
                ffi::QuantizeParams::scale_offset(scale, offset)
            }
            Element::S4InS8 { scale, offset } => {
                ffi::QuantizeParams::bw_scale_offset(4, scale, offset)
            }
        }
    }

    /// Bytes per element as stored.
    pub fn bytes(self) -> usize {
        match self {
            Element::F32 => 4,
            Element::F16 | Element::U16 { .. } => 2,
            Element::S8 { .. } | Element::S4InS8 { .. } => 1,
        }
    }

    /// The smallest and largest stored integer, for fixed-point elements.
    fn q_range(self) -> Option<(i32, i32)> {
        match self {
            Element::F32 | Element::F16 => None,
            Element::U16 { .. } => Some((0, 65535)),
            Element::S8 { .. } => Some((-128, 127)),
            Element::S4InS8 { .. } => Some((-8, 7)),
        }
    }

    fn scale_offset(self) -> (f32, i32) {
        match self {
            Element::U16 { scale, offset }
            | Element::S8 { scale, offset }
            | Element::S4InS8 { scale, offset } => (scale, offset),
            Element::F32 | Element::F16 => (1.0, 0),
        }
    }

    /// Quantises one value (round to nearest, clamped to the stored range).
    pub fn quantize(self, x: f32) -> i32 {
        let (scale, offset) = self.scale_offset();
        let (lo, hi) = self.q_range().unwrap_or((i32::MIN, i32::MAX));
        ((x / scale).round() as i64 - offset as i64).clamp(lo as i64, hi as i64) as i32
    }

    /// The real value of a stored integer.
    pub fn dequantize(self, q: i32) -> f32 {
        let (scale, offset) = self.scale_offset();
        scale * (q + offset) as f32
    }

    /// Encodes `src` into `dst` (`src.len() * bytes()` bytes).
    pub fn encode(self, src: &[f32], dst: &mut [u8]) {
        debug_assert_eq!(dst.len(), src.len() * self.bytes());
        match self {
            Element::F32 => {
                for (d, s) in dst.chunks_exact_mut(4).zip(src) {
                    d.copy_from_slice(&s.to_ne_bytes());
                }
            }
            Element::F16 => {
                for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                    d.copy_from_slice(&f16::from_f32(*s).to_ne_bytes());
                }
            }
            Element::U16 { .. } => {
                for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                    d.copy_from_slice(&(self.quantize(*s) as u16).to_ne_bytes());
                }
            }
            Element::S8 { .. } | Element::S4InS8 { .. } => {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = self.quantize(*s) as i8 as u8;
                }
            }
        }
    }

    /// Decodes `src` into `dst`; returns how many values sat at the ends of
    /// a fixed-point range (possible saturation).
    pub fn decode(self, src: &[u8], dst: &mut [f32]) -> usize {
        let mut at_limit = 0;
        let mut fixed = |q: i32| {
            if let Some((lo, hi)) = self.q_range() {
                if q == lo || q == hi {
                    at_limit += 1;
                }
            }
            self.dequantize(q)
        };
        match self {
            Element::F32 => {
                for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                    *d = f32::from_ne_bytes(s.try_into().expect("4 bytes"));
                }
            }
            Element::F16 => {
                for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *d = f16::from_ne_bytes(s.try_into().expect("2 bytes")).to_f32();
                }
            }
            Element::U16 { .. } => {
                for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *d = fixed(u16::from_ne_bytes(s.try_into().expect("2 bytes")) as i32);
                }
            }
            Element::S8 { .. } | Element::S4InS8 { .. } => {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = fixed(*s as i8 as i32);
                }
            }
        }
        at_limit
    }
}

/// What the backend needs to know about one graph tensor, also written to
/// the ahead-of-time manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorDesc {
    /// Name inside the graph.
    pub name: String,
    /// The id the backend assigned at creation (graphExecute needs it).
    pub id: u32,
    /// Dimensions, row-major.
    pub dims: Vec<u32>,
    /// Element storage and encoding.
    pub element: Element,
}

impl TensorDesc {
    fn len(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }
}

/// The tensors of one MatMul graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphIo {
    /// The activation input.
    pub a: TensorDesc,
    /// The weight, when it is a graph input (`weights: input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w: Option<TensorDesc>,
    /// The output.
    pub c: TensorDesc,
    /// The weight is the first MatMul input (`transposed`): graph inputs are
    /// passed in MatMul order.
    pub weight_first: bool,
    /// The activation range the input encoding covers (quantised dtypes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub act_abs_max: Option<f32>,
}

/// The elements used for a dtype: (activation, weight, output).
pub(crate) struct Elements {
    pub a: Element,
    pub w: Element,
    pub c: Element,
}

/// Chooses storage and encodings for a dtype, from the weights (known at
/// prepare time) and the activation range the input encoding must cover.
///
/// * `f16`: everything float16. `f32`: float32 tensors, computed in float16
///   inside (graph precision option).
/// * `w8a16`: activations and output unsigned 16-bit, symmetric around 0;
///   weights signed 8-bit, symmetric, `scale = max|W| / 127`. (Asymmetric
///   unsigned 8-bit weights also run, but the emulator's error against the
///   dequantised weights was 8× larger: 2.7·10⁻³ against 3.3·10⁻⁴.)
/// * `w4a16`: weights signed 4-bit stored in 8 bits (bit width 4),
///   symmetric, `scale = max|W| / 7`.
///
/// The output range is `±4 · (act_abs_max / √3) · max_n ‖W[:,n]‖₂`: four
/// standard deviations of an output whose inputs are spread evenly over
/// `±act_abs_max`. It should be tight: the HTP's output resolution measured
/// on the emulator is about 1/4000 of the range (12 bits, not 16), so the
/// error grows in proportion to any over-estimate. Values landing on the
/// range ends are reported as saturation by `read_output`, never returned
/// silently.
pub(crate) fn elements_for(
    dtype: DType,
    w: &[f32],
    k: usize,
    n: usize,
    act_abs_max: f32,
) -> Result<Elements> {
    let u16_sym = |abs_max: f32| {
        let abs_max = abs_max.max(f32::MIN_POSITIVE);
        Element::U16 {
            scale: 2.0 * abs_max / 65535.0,
            offset: -32768,
        }
    };
    let out = || {
        let mut col = vec![0f64; n];
        for row in w.chunks_exact(n).take(k) {
            for (c, &x) in col.iter_mut().zip(row) {
                *c += (x as f64) * (x as f64);
            }
        }
        let l2 = col.iter().fold(0f64, |m, &c| m.max(c.sqrt()));
        let act_rms = act_abs_max as f64 / 3f64.sqrt();
        u16_sym((4.0 * act_rms * l2.max(1e-6)) as f32)
    };
    Ok(match dtype {
        DType::F16 => Elements {
            a: Element::F16,
            w: Element::F16,
            c: Element::F16,
        },
        DType::F32 => Elements {
            a: Element::F32,
            w: Element::F32,
            c: Element::F32,
        },
        DType::W8a16 => {
            let m = w.iter().fold(0f32, |m, &x| m.max(x.abs()));
            Elements {
                a: u16_sym(act_abs_max),
                w: Element::S8 {
                    scale: (m / 127.0).max(f32::MIN_POSITIVE),
                    offset: 0,
                },
                c: out(),
            }
        }
        DType::W4a16 => {
            let m = w.iter().fold(0f32, |m, &x| m.max(x.abs()));
            Elements {
                a: u16_sym(act_abs_max),
                w: Element::S4InS8 {
                    scale: (m / 7.0).max(f32::MIN_POSITIVE),
                    offset: 0,
                },
                c: out(),
            }
        }
        other => {
            return Err(Error::unsupported(
                PROCESSOR_ID,
                format!("dtype {other} (supported: f16, f32, w8a16, w4a16)"),
            ));
        }
    })
}

/// The weights as the processor sees them: quantised and dequantised with
/// the prepared encoding (identity for float types except f16 rounding).
pub fn effective_weights(element: Element, w: &[f32]) -> Vec<f32> {
    let mut bytes = vec![0u8; w.len() * element.bytes()];
    element.encode(w, &mut bytes);
    let mut out = vec![0f32; w.len()];
    element.decode(&bytes, &mut out);
    out
}

/// Transposes a row-major `rows × cols` matrix.
pub(crate) fn transpose(src: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; src.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = src[r * cols + c];
        }
    }
    out
}

/// Where a tensor's bytes live: host memory passed as a client buffer
/// (the library copies it), or rpcmem registered as a memory handle (read
/// in place).
pub(crate) enum TensorData {
    Client(Vec<u8>),
    Shared(SharedBuf),
}

impl std::ops::Deref for TensorData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            TensorData::Client(v) => v,
            TensorData::Shared(s) => s.bytes(),
        }
    }
}

impl std::ops::DerefMut for TensorData {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            TensorData::Client(v) => v,
            TensorData::Shared(s) => s.bytes_mut(),
        }
    }
}

/// The owned storage behind one `Qnn_Tensor_t`.
pub(crate) struct OwnedTensor {
    name: CString,
    dims: Vec<u32>,
    pub desc: TensorDesc,
    pub data: TensorData,
}

impl OwnedTensor {
    pub fn new(desc: TensorDesc) -> Result<Self> {
        let name = CString::new(desc.name.clone()).map_err(|_| Error::BadRequest {
            field: "tensor name".into(),
            message: format!("`{}` contains NUL", desc.name),
        })?;
        let bytes = desc.len() * desc.element.bytes();
        u32::try_from(bytes).map_err(|_| {
            Error::unsupported(PROCESSOR_ID, format!("tensor `{}` over 4 GiB", desc.name))
        })?;
        Ok(OwnedTensor {
            name,
            dims: desc.dims.clone(),
            data: TensorData::Client(vec![0u8; bytes]),
            desc,
        })
    }

    /// Moves the tensor's bytes into rpcmem registered with `context`
    /// (see [`SharedBuf::register`]); on `Err` the tensor keeps its client
    /// buffer.
    pub fn share(
        &mut self,
        rpc: &'static RpcMem,
        lib: &'static QnnLib,
        context: Handle,
    ) -> std::result::Result<(), String> {
        let element = self.desc.element;
        let mut shared = SharedBuf::register(
            rpc,
            lib,
            context,
            &self.dims,
            element.data_type(),
            self.data.len(),
        )?;
        shared.bytes_mut().copy_from_slice(&self.data);
        self.data = TensorData::Shared(shared);
        Ok(())
    }

    /// A `Qnn_Tensor_t` pointing at this storage; valid while `self` is
    /// neither moved nor resized.
    pub fn raw(&mut self, tensor_type: u32, with_data: bool) -> ffi::Tensor {
        let (mem_type, memory) = match &mut self.data {
            TensorData::Shared(s) if with_data => (
                ffi::MEM_MEMHANDLE,
                ffi::TensorMemory {
                    mem_handle: s.handle,
                },
            ),
            data => (
                ffi::MEM_RAW,
                ffi::TensorMemory {
                    client_buf: if with_data {
                        ffi::ClientBuffer {
                            data: data.as_mut_ptr().cast::<c_void>(),
                            data_size: data.len() as u32,
                        }
                    } else {
                        ffi::ClientBuffer {
                            data: ptr::null_mut(),
                            data_size: 0,
                        }
                    },
                },
            ),
        };
        ffi::Tensor {
            version: ffi::TENSOR_VERSION_2,
            v2: ffi::TensorV2 {
                id: self.desc.id,
                name: self.name.as_ptr(),
                tensor_type,
                data_format: ffi::DATA_FORMAT_FLAT_BUFFER,
                data_type: self.desc.element.data_type(),
                quantize_params: self.desc.element.quantize_params(),
                rank: self.dims.len() as u32,
                dimensions: self.dims.as_mut_ptr(),
                mem_type,
                memory,
                is_dynamic_dimensions: ptr::null_mut(),
                sparse_params: ffi::SparseParams {
                    layout_type: ffi::SPARSE_UNDEFINED,
                    num_specified_elements: 0,
                    num_sparse_dimensions: 0,
                },
                is_produced: 0,
            },
        }
    }
}

/// A context holding one finalised (or retrieved) MatMul graph.
pub(crate) struct BuiltGraph {
    pub rt: Arc<Runtime>,
    pub context: Handle,
    pub graph: Handle,
    pub io: GraphIo,
    pub prepare_us: f64,
}

impl Drop for BuiltGraph {
    fn drop(&mut self) {
        self.rt.free_context(self.context);
    }
}

/// The three operands of a MatMul graph, in MatMul order, with the
/// weights encoded into `w`. `aw`: `A[M,K]·W[K,N] = C[M,N]`; `transposed`:
/// `Wᵀ[N,K]·(A[M,K])ᵀ` (`transpose_in1`) `= Cᵀ[N,M]`.
struct Operands {
    a: OwnedTensor,
    w: OwnedTensor,
    c: OwnedTensor,
    weight_first: bool,
    /// The weights' tensor type: static, or written by the app per run.
    w_type: u32,
    static_w: bool,
}

impl Operands {
    fn new(spec: &GemmSpec, weights: &[f32], act_abs_max: f32) -> Result<Operands> {
        let (m, k, n) = spec.shape.mkn();
        let (m, k, n) = (m as usize, k as usize, n as usize);
        spec.check_weights_len(PROCESSOR_ID, weights.len())?;
        let el = elements_for(spec.dtype, weights, k, n, act_abs_max)?;
        let weight_first = spec.order == OperandOrder::Transposed;
        let desc = |name: &str, dims: [usize; 2], element| TensorDesc {
            name: name.into(),
            id: 0,
            dims: dims.iter().map(|&d| d as u32).collect(),
            element,
        };
        let (w_dims, c_dims) = if weight_first {
            ([n, k], [n, m])
        } else {
            ([k, n], [m, n])
        };
        let a = OwnedTensor::new(desc("a", [m, k], el.a))?;
        let mut w = OwnedTensor::new(desc("w", w_dims, el.w))?;
        let c = OwnedTensor::new(desc("c", c_dims, el.c))?;
        let w_layout = if weight_first {
            transpose(weights, k, n)
        } else {
            weights.to_vec()
        };
        w.desc.element.encode(&w_layout, &mut w.data);
        let static_w = spec.weights == WeightMode::Static;
        Ok(Operands {
            a,
            w,
            c,
            weight_first,
            w_type: if static_w {
                ffi::TENSOR_STATIC
            } else {
                ffi::TENSOR_APP_WRITE
            },
            static_w,
        })
    }

    /// The MatMul's inputs as raw tensors, in MatMul order.
    fn raw_inputs(&mut self) -> [ffi::Tensor; 2] {
        let w = self.w.raw(self.w_type, self.static_w);
        let a = self.a.raw(ffi::TENSOR_APP_WRITE, false);
        if self.weight_first { [w, a] } else { [a, w] }
    }
}

/// Creates the graph in `context`; a float32 graph runs in float16 inside
/// (the HTP has no fp32 MatMul).
fn create_graph(rt: &Runtime, context: Handle, dtype: DType) -> Result<Handle> {
    let mut precision = ffi::HtpGraphCustomConfig::precision_fp16();
    let precision_cfg = ffi::Config {
        option: ffi::CONFIG_OPTION_CUSTOM,
        custom: (&mut precision as *mut ffi::HtpGraphCustomConfig).cast(),
    };
    let graph_cfgs: Vec<*const ffi::Config> = if dtype == DType::F32 {
        vec![&precision_cfg, ptr::null()]
    } else {
        vec![ptr::null()]
    };
    let name = CString::new(GRAPH_NAME).expect("no NUL");
    let mut graph: Handle = ptr::null_mut();
    // SAFETY: valid context, NUL-terminated name, NULL-terminated config list
    // whose entries outlive the call.
    let err = unsafe {
        rt.lib.api().graph_create.expect("checked at load")(
            context,
            name.as_ptr(),
            graph_cfgs.as_ptr(),
            &mut graph,
        )
    };
    rt.lib.check("graphCreate", err)?;
    Ok(graph)
}

/// Creates the operands' tensors in `graph` (inputs in MatMul order, then
/// the output); each gets the id the backend assigns.
fn add_tensors(rt: &Runtime, graph: Handle, ops: &mut Operands) -> Result<()> {
    let create = |t: &mut OwnedTensor, tensor_type: u32, with_data: bool| -> Result<()> {
        let mut raw = t.raw(tensor_type, with_data);
        // SAFETY: `raw` points at `t`'s live storage; the backend writes the id back.
        let err = unsafe {
            rt.lib
                .api()
                .tensor_create_graph_tensor
                .expect("checked at load")(graph, &mut raw)
        };
        rt.lib
            .check(&format!("tensorCreateGraphTensor({})", t.desc.name), err)?;
        // SAFETY: v2 is the variant we wrote.
        t.desc.id = raw.v2.id;
        Ok(())
    };
    let (w_type, static_w) = (ops.w_type, ops.static_w);
    if ops.weight_first {
        create(&mut ops.w, w_type, static_w)?;
        create(&mut ops.a, ffi::TENSOR_APP_WRITE, false)?;
    } else {
        create(&mut ops.a, ffi::TENSOR_APP_WRITE, false)?;
        create(&mut ops.w, w_type, static_w)?;
    }
    create(&mut ops.c, ffi::TENSOR_APP_READ, false)
}

/// Adds the one MatMul node over the operands' tensors.
fn add_matmul(rt: &Runtime, graph: Handle, ops: &mut Operands) -> Result<()> {
    let bool_param = |name: &CString, value: bool| ffi::Param {
        param_type: ffi::PARAM_SCALAR,
        name: name.as_ptr(),
        value: ffi::ParamValue {
            scalar: ffi::Scalar {
                data_type: ffi::DT_BOOL_8,
                value: value as u64,
            },
        },
    };
    let (t0, t1) = (
        CString::new("transpose_in0").expect("no NUL"),
        CString::new("transpose_in1").expect("no NUL"),
    );
    let mut params = [bool_param(&t0, false), bool_param(&t1, ops.weight_first)];
    let mut inputs = ops.raw_inputs();
    let mut outputs = [ops.c.raw(ffi::TENSOR_APP_READ, false)];
    let (node, package, op) = (
        CString::new("matmul_0").expect("no NUL"),
        CString::new("qti.aisw").expect("no NUL"),
        CString::new("MatMul").expect("no NUL"),
    );
    let config = ffi::OpConfig {
        version: ffi::OPCONFIG_VERSION_1,
        v1: ffi::OpConfigV1 {
            name: node.as_ptr(),
            package_name: package.as_ptr(),
            type_name: op.as_ptr(),
            num_params: params.len() as u32,
            params: params.as_mut_ptr(),
            num_inputs: inputs.len() as u32,
            inputs: inputs.as_mut_ptr(),
            num_outputs: 1,
            outputs: outputs.as_mut_ptr(),
        },
    };
    // SAFETY: every pointer in `config` refers to locals alive for the call;
    // the op config is passed by value as the API declares.
    let err = unsafe { rt.lib.api().graph_add_node.expect("checked at load")(graph, config) };
    rt.lib.check("graphAddNode(MatMul)", err)
}

/// Builds and finalises the MatMul graph for `spec` with weights
/// `W[K,N]` (row-major f32). The prepare time covers `contextCreate`
/// through `graphFinalize` (weight conversion excluded).
pub(crate) fn build(
    rt: &Arc<Runtime>,
    spec: &GemmSpec,
    weights: &[f32],
    act_abs_max: f32,
) -> Result<BuiltGraph> {
    let mut ops = Operands::new(spec, weights, act_abs_max)?;
    let quantised = matches!(spec.dtype, DType::W8a16 | DType::W4a16);
    let start = Instant::now();
    let context = rt.create_context()?;
    // From here on `built` frees the context on every exit path.
    let mut built = BuiltGraph {
        rt: Arc::clone(rt),
        context,
        graph: ptr::null_mut(),
        io: GraphIo {
            a: ops.a.desc.clone(),
            w: None,
            c: ops.c.desc.clone(),
            weight_first: ops.weight_first,
            act_abs_max: quantised.then_some(act_abs_max),
        },
        prepare_us: 0.0,
    };
    let graph = create_graph(rt, context, spec.dtype)?;
    built.graph = graph;
    add_tensors(rt, graph, &mut ops)?;
    add_matmul(rt, graph, &mut ops)?;
    // SAFETY: a graph of this context; no profile, no signal.
    let err = unsafe {
        rt.lib.api().graph_finalize.expect("checked at load")(
            graph,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    rt.lib.check("graphFinalize", err)?;
    built.prepare_us = start.elapsed().as_secs_f64() * 1e6;

    built.io.a = ops.a.desc.clone();
    built.io.c = ops.c.desc.clone();
    if !ops.static_w {
        built.io.w = Some(ops.w.desc.clone());
    }
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantisation_round_trips_within_half_a_step() {
        let w: Vec<f32> = (0..200).map(|i| (i as f32 - 90.0) / 37.0).collect();
        let el = elements_for(DType::W8a16, &w, 10, 20, 8.0).unwrap();
        let (scale, _) = el.w.scale_offset();
        for (x, y) in w.iter().zip(effective_weights(el.w, &w)) {
            assert!((x - y).abs() <= 0.5 * scale + 1e-6, "{x} vs {y}");
        }
        let el4 = elements_for(DType::W4a16, &w, 10, 20, 8.0).unwrap();
        let (s4, _) = el4.w.scale_offset();
        let q = effective_weights(el4.w, &w);
        for (x, y) in w.iter().zip(&q) {
            assert!((x - y).abs() <= 0.5 * s4 + 1e-6, "{x} vs {y}");
        }
        let distinct: std::collections::BTreeSet<i32> =
            w.iter().map(|&x| el4.w.quantize(x)).collect();
        assert!(
            distinct.len() <= 16
                && *distinct.first().unwrap() >= -8
                && *distinct.last().unwrap() <= 7
        );
    }

    #[test]
    fn u16_activation_encoding_is_symmetric() {
        let el = elements_for(DType::W8a16, &[1.0; 4], 2, 2, 4.0).unwrap();
        assert_eq!(el.a.quantize(0.0), 32768);
        assert!((el.a.dequantize(el.a.quantize(3.99)) - 3.99).abs() < 1e-3);
        assert!((el.a.dequantize(el.a.quantize(-3.99)) + 3.99).abs() < 1e-3);
        let mut bytes = [0u8; 4];
        el.a.encode(&[100.0, -100.0], &mut bytes);
        let mut back = [0f32; 2];
        assert_eq!(
            el.a.decode(&bytes, &mut back),
            2,
            "clamped values are reported"
        );
    }

    #[test]
    fn transpose_is_its_own_inverse() {
        let x: Vec<f32> = (0..6).map(|i| i as f32).collect();
        let t = transpose(&x, 2, 3);
        assert_eq!(t, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(transpose(&t, 3, 2), x);
    }

    #[test]
    fn unsupported_dtypes_are_refused_by_name() {
        let err = elements_for(DType::Bf16, &[0.0], 1, 1, 1.0).err().unwrap();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
        assert!(err.to_string().contains("bf16"));
    }
}
