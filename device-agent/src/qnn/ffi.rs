//! Hand-written declarations of the part of the QNN C API this backend uses.
//!
//! Written from the documented API (types, enumerator values, the order of
//! the interface's function table), not copied from Qualcomm's headers, which
//! are proprietary and must never enter this repository. Only what the
//! backend touches is declared; everything else is an opaque pointer slot.
//! The layout test at the bottom pins every size and offset relied on, with
//! the values measured against `libQnnHtp.so` 2.51 (core API 2.40, HTP API
//! 5.51).
#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_void};

/// `Qnn_ErrorHandle_t`: a u64 whose low 16 bits are the error code.
pub type QnnError = u64;
/// Success.
pub const QNN_SUCCESS: QnnError = 0;

/// The error code of an error handle (`QNN_GET_ERROR_CODE`).
pub fn error_code(e: QnnError) -> u32 {
    (e & 0xffff) as u32
}

/// Opaque handles are pointers.
pub type Handle = *mut c_void;

/// `Qnn_Version_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// `Qnn_ApiVersion_t`: the core API version and the backend API version.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiVersion {
    pub core: Version,
    pub backend: Version,
}

/// The HTP backend's id in `QnnInterface_t::backendId`.
pub const BACKEND_ID_HTP: u32 = 6;

// ---------------------------------------------------------------------------
// Data types (Qnn_DataType_t): 0xTTBB, TT the class and BB the bit width.
pub const DT_INT_32: u32 = 0x0032;
pub const DT_UINT_32: u32 = 0x0132;
pub const DT_FLOAT_16: u32 = 0x0216;
pub const DT_FLOAT_32: u32 = 0x0232;
/// Packed signed 4-bit: refused by HTP 2.51 at tensor creation.
pub const DT_SFIXED_POINT_4: u32 = 0x0304;
pub const DT_SFIXED_POINT_8: u32 = 0x0308;
pub const DT_SFIXED_POINT_16: u32 = 0x0316;
pub const DT_UFIXED_POINT_8: u32 = 0x0408;
pub const DT_UFIXED_POINT_16: u32 = 0x0416;
pub const DT_BOOL_8: u32 = 0x0508;
pub const DT_UNDEFINED: u32 = 0x7fff_ffff;

// Tensor types (Qnn_TensorType_t).
pub const TENSOR_APP_WRITE: u32 = 0;
pub const TENSOR_APP_READ: u32 = 1;
pub const TENSOR_NATIVE: u32 = 3;
pub const TENSOR_STATIC: u32 = 4;

/// `Qnn_TensorDataFormat_t` flat buffer.
pub const DATA_FORMAT_FLAT_BUFFER: u32 = 0;
/// `Qnn_TensorMemType_t` raw client buffer.
pub const MEM_RAW: u32 = 0;
/// `Qnn_TensorMemType_t` registered memory handle (`QnnMem_register`).
pub const MEM_MEMHANDLE: u32 = 1;
/// `Qnn_TensorVersion_t` 2.
pub const TENSOR_VERSION_2: u32 = 2;

// Qnn_Definition_t.
pub const DEFINITION_DEFINED: u32 = 1;
pub const DEFINITION_UNDEFINED: u32 = 0x7fff_ffff;

// Qnn_QuantizationEncoding_t.
pub const ENCODING_SCALE_OFFSET: u32 = 0;
pub const ENCODING_BW_SCALE_OFFSET: u32 = 2;
pub const ENCODING_UNDEFINED: u32 = 0x7fff_ffff;

/// `Qnn_SparseLayoutType_t` undefined (dense).
pub const SPARSE_UNDEFINED: u32 = 0x7fff_ffff;

// Qnn_ParamType_t.
pub const PARAM_SCALAR: u32 = 0;
/// `Qnn_OpConfigVersion_t` 1.
pub const OPCONFIG_VERSION_1: u32 = 1;

/// `QNN_*_CONFIG_OPTION_CUSTOM`: the same value for device, context and graph configs.
pub const CONFIG_OPTION_CUSTOM: u32 = 0;

// QnnHtpDevice_ConfigOption_t.
pub const HTP_DEVICE_CONFIG_SOC: u32 = 0;

// QnnHtpGraph_ConfigOption_t.
pub const HTP_GRAPH_CONFIG_PRECISION: u32 = 2;
/// `Qnn_Precision_t` float16.
pub const PRECISION_FLOAT16: u32 = 1;

// HTP performance infrastructure.
pub const HTP_INFRA_TYPE_PERF: u32 = 0;
pub const HTP_POWER_CONFIG_DCVS_V3: u32 = 1;
pub const HTP_POWER_CONFIG_RPC_CONTROL_LATENCY: u32 = 2;
pub const HTP_POWER_CONFIG_RPC_POLLING_TIME: u32 = 3;
pub const HTP_POWERMODE_PERFORMANCE: u32 = 0x10;
pub const DCVS_VCORNER_MAX: u32 = 0xA0;

// ---------------------------------------------------------------------------
// Tensors.

/// `Qnn_ScaleOffset_t`: `real = scale · (q + offset)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ScaleOffset {
    pub scale: f32,
    pub offset: i32,
}

/// `Qnn_BwScaleOffset_t`: scale/offset with an explicit bit width.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct BwScaleOffset {
    pub bitwidth: u32,
    pub scale: f32,
    pub offset: i32,
}

/// The encoding union of `Qnn_QuantizeParams_t` (32 bytes, 8-aligned: its
/// largest member holds pointers).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Encoding {
    pub scale_offset: ScaleOffset,
    pub bw_scale_offset: BwScaleOffset,
    _size: [u64; 4],
}

/// `Qnn_QuantizeParams_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QuantizeParams {
    pub encoding_definition: u32,
    pub quantization_encoding: u32,
    pub encoding: Encoding,
}

impl QuantizeParams {
    /// No quantisation (float tensors).
    pub fn undefined() -> Self {
        QuantizeParams {
            encoding_definition: DEFINITION_UNDEFINED,
            quantization_encoding: ENCODING_UNDEFINED,
            encoding: Encoding { _size: [0; 4] },
        }
    }

    /// Per-tensor scale/offset.
    pub fn scale_offset(scale: f32, offset: i32) -> Self {
        let mut q = Self::undefined();
        q.encoding_definition = DEFINITION_DEFINED;
        q.quantization_encoding = ENCODING_SCALE_OFFSET;
        q.encoding.scale_offset = ScaleOffset { scale, offset };
        q
    }

    /// Per-tensor scale/offset with a bit width below the storage width.
    pub fn bw_scale_offset(bitwidth: u32, scale: f32, offset: i32) -> Self {
        let mut q = Self::undefined();
        q.encoding_definition = DEFINITION_DEFINED;
        q.quantization_encoding = ENCODING_BW_SCALE_OFFSET;
        q.encoding.bw_scale_offset = BwScaleOffset {
            bitwidth,
            scale,
            offset,
        };
        q
    }
}

/// `Qnn_ClientBuffer_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ClientBuffer {
    pub data: *mut c_void,
    pub data_size: u32,
}

/// The union of `Qnn_TensorV2_t` that holds the data: a client buffer
/// (16 bytes) or a registered memory handle.
#[repr(C)]
#[derive(Clone, Copy)]
pub union TensorMemory {
    pub client_buf: ClientBuffer,
    pub mem_handle: Handle,
}

/// `Qnn_SparseParams_t` (only its dense/undefined form is used).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SparseParams {
    pub layout_type: u32,
    pub num_specified_elements: u32,
    pub num_sparse_dimensions: u32,
}

/// `Qnn_TensorV2_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TensorV2 {
    pub id: u32,
    pub name: *const c_char,
    pub tensor_type: u32,
    pub data_format: u32,
    pub data_type: u32,
    pub quantize_params: QuantizeParams,
    pub rank: u32,
    pub dimensions: *mut u32,
    pub mem_type: u32,
    /// A client buffer ([`MEM_RAW`]) or a memory handle ([`MEM_MEMHANDLE`]).
    pub memory: TensorMemory,
    pub is_dynamic_dimensions: *mut u8,
    pub sparse_params: SparseParams,
    pub is_produced: u8,
}

/// `Qnn_Tensor_t`: a version tag and a union of versions; only v2 is used.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Tensor {
    pub version: u32,
    pub v2: TensorV2,
}

/// `Qnn_Scalar_t`: a data type and a value union (8-aligned).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Scalar {
    pub data_type: u32,
    /// The value union; a BOOL_8 lives in the first byte.
    pub value: u64,
}

/// The value union of `Qnn_Param_t`: a scalar or a tensor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ParamValue {
    pub scalar: Scalar,
    pub tensor: Tensor,
}

/// `Qnn_Param_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Param {
    pub param_type: u32,
    pub name: *const c_char,
    pub value: ParamValue,
}

/// `Qnn_OpConfigV1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OpConfigV1 {
    pub name: *const c_char,
    pub package_name: *const c_char,
    pub type_name: *const c_char,
    pub num_params: u32,
    pub params: *mut Param,
    pub num_inputs: u32,
    pub inputs: *mut Tensor,
    pub num_outputs: u32,
    pub outputs: *mut Tensor,
}

/// `Qnn_OpConfig_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OpConfig {
    pub version: u32,
    pub v1: OpConfigV1,
}

// ---------------------------------------------------------------------------
// Configs.

/// `QnnDevice_Config_t`, `QnnContext_Config_t`, `QnnGraph_Config_t`: an
/// option and an 8-byte union, of which only the custom-config pointer is used.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub option: u32,
    pub custom: *mut c_void,
}

/// `QnnHtpDevice_CustomConfig_t`. In 2.51 its union holds a pointer, so the
/// union (and `socModel`) starts at offset 8; older headers put `socModel`
/// at 4, and 2.51 answers 14001 to that.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy)]
pub struct HtpDeviceCustomConfig {
    pub option: u32,
    _pad: u32,
    pub soc_model: u32,
    _rest: u32,
}

impl HtpDeviceCustomConfig {
    /// The SoC-model option.
    pub fn soc(soc_model: u32) -> Self {
        HtpDeviceCustomConfig {
            option: HTP_DEVICE_CONFIG_SOC,
            _pad: 0,
            soc_model,
            _rest: 0,
        }
    }
}

/// `QnnHtpGraph_CustomConfig_t` for the precision option: option at 0,
/// value union at 8.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy)]
pub struct HtpGraphCustomConfig {
    pub option: u32,
    _pad: u32,
    pub value: u32,
    _rest: [u32; 5],
}

impl HtpGraphCustomConfig {
    /// Run float32 graphs in float16 (`QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION`).
    pub fn precision_fp16() -> Self {
        HtpGraphCustomConfig {
            option: HTP_GRAPH_CONFIG_PRECISION,
            _pad: 0,
            value: PRECISION_FLOAT16,
            _rest: [0; 5],
        }
    }
}

// ---------------------------------------------------------------------------
// HTP performance infrastructure.

/// `QnnHtpPerfInfrastructure_DcvsV3_t`: sixteen u32 fields.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DcvsV3 {
    pub context_id: u32,
    pub set_dcvs_enable: u32,
    pub dcvs_enable: u32,
    pub power_mode: u32,
    pub set_sleep_latency: u32,
    pub sleep_latency: u32,
    pub set_sleep_disable: u32,
    pub sleep_disable: u32,
    pub set_bus_params: u32,
    pub bus_min: u32,
    pub bus_target: u32,
    pub bus_max: u32,
    pub set_core_params: u32,
    pub core_min: u32,
    pub core_target: u32,
    pub core_max: u32,
}

/// `QnnHtpPerfInfrastructure_PowerConfig_t`: an option and a union whose
/// largest member is [`DcvsV3`] (all u32, so the union starts at 4).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PowerConfig {
    pub option: u32,
    /// The union; for the single-u32 options only `dcvs.context_id` (the
    /// first u32) is read.
    pub dcvs: DcvsV3,
}

/// `QnnHtpDevice_PerfInfrastructure_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PerfInfrastructure {
    pub create_power_config_id:
        Option<unsafe extern "C" fn(device_id: u32, core_id: u32, id: *mut u32) -> QnnError>,
    pub destroy_power_config_id: Option<unsafe extern "C" fn(id: u32) -> QnnError>,
    pub set_power_config:
        Option<unsafe extern "C" fn(id: u32, config: *const *const PowerConfig) -> QnnError>,
    pub set_memory_config: *const c_void,
}

/// `QnnHtpDevice_Infrastructure_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HtpInfrastructure {
    pub infra_type: u32,
    pub perf: PerfInfrastructure,
}

// ---------------------------------------------------------------------------
// Memory registration (QnnMem).

/// `Qnn_MemType_t` ION memory: a file descriptor from `rpcmem_to_fd`.
pub const MEM_TYPE_ION: u32 = 1;

/// `Qnn_MemShape_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemShape {
    pub num_dim: u32,
    pub dim_size: *mut u32,
    pub shape_config: *const c_char,
}

/// The memory-information union of `Qnn_MemDescriptor_t`: the ION file
/// descriptor in its first 4 bytes. 16 bytes, room for its largest member
/// in newer headers (a DMA-BUF descriptor and address); descriptors are
/// registered one at a time, so the array stride never matters.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemInfo {
    pub fd: i32,
    _pad: i32,
    _rest: u64,
}

/// `Qnn_MemDescriptor_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemDescriptor {
    pub shape: MemShape,
    pub data_type: u32,
    pub mem_type: u32,
    pub info: MemInfo,
}

impl MemDescriptor {
    /// ION memory of `fd`, shaped as a tensor of `dims` and `data_type`.
    /// `dims` must outlive the registration call.
    pub fn ion(fd: i32, dims: &mut [u32], data_type: u32) -> Self {
        MemDescriptor {
            shape: MemShape {
                num_dim: dims.len() as u32,
                dim_size: dims.as_mut_ptr(),
                shape_config: std::ptr::null(),
            },
            data_type,
            mem_type: MEM_TYPE_ION,
            info: MemInfo {
                fd,
                _pad: 0,
                _rest: 0,
            },
        }
    }
}

// ---------------------------------------------------------------------------
// Profiling (QnnProfile, QnnHtpProfile).

/// `QNN_PROFILE_LEVEL_BASIC`: whole-graph events.
pub const PROFILE_LEVEL_BASIC: u32 = 1;
/// `QNN_PROFILE_EVENTTYPE_EXECUTE`: one per `graphExecute`.
pub const PROFILE_EVENTTYPE_EXECUTE: u32 = 400;
/// `QNN_PROFILE_EVENTTYPE_EXECUTE_DEVICE`: time on the device (generic).
pub const PROFILE_EVENTTYPE_EXECUTE_DEVICE: u32 = 407;
/// HTP: the remote call as the HTP saw it, µs.
pub const HTP_PROFILE_EVENTTYPE_EXECUTE_HTP_RPC_US: u32 = 3002;
/// HTP: the graph on the accelerator, µs.
pub const HTP_PROFILE_EVENTTYPE_EXECUTE_ACCEL_US: u32 = 3004;
/// `QNN_PROFILE_EVENTUNIT_MICROSEC`.
pub const PROFILE_UNIT_MICROSEC: u32 = 1;

/// `QnnProfile_EventId_t`.
pub type ProfileEventId = u64;

/// `QnnProfile_EventData_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProfileEventData {
    pub event_type: u32,
    pub unit: u32,
    pub value: u64,
    pub identifier: *const c_char,
}

impl Default for ProfileEventData {
    fn default() -> Self {
        ProfileEventData {
            event_type: 0,
            unit: 0,
            value: 0,
            identifier: std::ptr::null(),
        }
    }
}

// ---------------------------------------------------------------------------
// Properties and asynchronous execution.

/// `QNN_PROPERTY_SUPPORTED`.
pub const PROPERTY_SUPPORTED: QnnError = QNN_SUCCESS;
/// `QNN_PROPERTY_GRAPH_SUPPORT_ASYNC_EXECUTION` (graph group 301, + 3).
pub const PROPERTY_GRAPH_SUPPORT_ASYNC_EXECUTION: u32 = 304;
/// `QNN_PROPERTY_TENSOR_SUPPORT_MEMHANDLE_TYPE` (tensor group 501, + 1).
pub const PROPERTY_TENSOR_SUPPORT_MEMHANDLE_TYPE: u32 = 502;
/// `QNN_PROPERTY_GROUP_MEMORY`: the QnnMem API.
pub const PROPERTY_GROUP_MEMORY: u32 = 1101;
/// `QNN_PROPERTY_GROUP_PROFILE`: the QnnProfile API.
pub const PROPERTY_GROUP_PROFILE: u32 = 1401;

/// `Qnn_NotifyStatus_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NotifyStatus {
    pub error: QnnError,
}

/// `Qnn_NotifyFn_t`: called by the library when an asynchronous run ends.
pub type NotifyFn = unsafe extern "C" fn(param: *mut c_void, status: NotifyStatus);

// ---------------------------------------------------------------------------
// The interface.

type Slot = *const c_void;

/// The start of the function table of `QnnInterface_t` (`QNN_INTERFACE_VER_TYPE`),
/// in the documented order, up to the error functions. Slots this backend
/// does not call are opaque.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FunctionTable {
    pub property_has_capability: Option<unsafe extern "C" fn(key: u32) -> QnnError>,
    pub backend_create: Option<
        unsafe extern "C" fn(
            log: Handle,
            config: *const *const Config,
            backend: *mut Handle,
        ) -> QnnError,
    >,
    pub backend_set_config: Slot,
    pub backend_get_api_version: Option<unsafe extern "C" fn(v: *mut ApiVersion) -> QnnError>,
    pub backend_get_build_id: Option<unsafe extern "C" fn(id: *mut *const c_char) -> QnnError>,
    pub backend_register_op_package: Slot,
    pub backend_get_supported_operations: Slot,
    pub backend_validate_op_config: Slot,
    pub backend_free: Option<unsafe extern "C" fn(backend: Handle) -> QnnError>,
    pub context_create: Option<
        unsafe extern "C" fn(
            backend: Handle,
            device: Handle,
            config: *const *const Config,
            context: *mut Handle,
        ) -> QnnError,
    >,
    pub context_set_config: Slot,
    pub context_get_binary_size:
        Option<unsafe extern "C" fn(context: Handle, size: *mut u64) -> QnnError>,
    pub context_get_binary: Option<
        unsafe extern "C" fn(
            context: Handle,
            buffer: *mut c_void,
            size: u64,
            written: *mut u64,
        ) -> QnnError,
    >,
    pub context_create_from_binary: Option<
        unsafe extern "C" fn(
            backend: Handle,
            device: Handle,
            config: *const *const Config,
            buffer: *const c_void,
            size: u64,
            context: *mut Handle,
            profile: Handle,
        ) -> QnnError,
    >,
    pub context_free: Option<unsafe extern "C" fn(context: Handle, profile: Handle) -> QnnError>,
    pub graph_create: Option<
        unsafe extern "C" fn(
            context: Handle,
            name: *const c_char,
            config: *const *const Config,
            graph: *mut Handle,
        ) -> QnnError,
    >,
    pub graph_create_subgraph: Slot,
    pub graph_set_config: Slot,
    /// Takes the op config by value.
    pub graph_add_node: Option<unsafe extern "C" fn(graph: Handle, op: OpConfig) -> QnnError>,
    pub graph_finalize:
        Option<unsafe extern "C" fn(graph: Handle, profile: Handle, signal: Handle) -> QnnError>,
    pub graph_retrieve: Option<
        unsafe extern "C" fn(context: Handle, name: *const c_char, graph: *mut Handle) -> QnnError,
    >,
    pub graph_execute: Option<
        unsafe extern "C" fn(
            graph: Handle,
            inputs: *const Tensor,
            num_inputs: u32,
            outputs: *mut Tensor,
            num_outputs: u32,
            profile: Handle,
            signal: Handle,
        ) -> QnnError,
    >,
    pub graph_execute_async: Option<
        unsafe extern "C" fn(
            graph: Handle,
            inputs: *const Tensor,
            num_inputs: u32,
            outputs: *mut Tensor,
            num_outputs: u32,
            profile: Handle,
            signal: Handle,
            notify: Option<NotifyFn>,
            param: *mut c_void,
        ) -> QnnError,
    >,
    pub tensor_create_context_tensor: Slot,
    pub tensor_create_graph_tensor:
        Option<unsafe extern "C" fn(graph: Handle, tensor: *mut Tensor) -> QnnError>,
    pub log_create: Slot,
    pub log_set_log_level: Slot,
    pub log_free: Slot,
    pub profile_create:
        Option<unsafe extern "C" fn(backend: Handle, level: u32, profile: *mut Handle) -> QnnError>,
    pub profile_set_config: Slot,
    pub profile_get_events: Option<
        unsafe extern "C" fn(
            profile: Handle,
            events: *mut *const ProfileEventId,
            count: *mut u32,
        ) -> QnnError,
    >,
    pub profile_get_sub_events: Option<
        unsafe extern "C" fn(
            event: ProfileEventId,
            events: *mut *const ProfileEventId,
            count: *mut u32,
        ) -> QnnError,
    >,
    pub profile_get_event_data: Option<
        unsafe extern "C" fn(event: ProfileEventId, data: *mut ProfileEventData) -> QnnError,
    >,
    pub profile_get_extended_event_data: Slot,
    pub profile_free: Option<unsafe extern "C" fn(profile: Handle) -> QnnError>,
    pub mem_register: Option<
        unsafe extern "C" fn(
            context: Handle,
            descriptors: *const MemDescriptor,
            count: u32,
            handles: *mut Handle,
        ) -> QnnError,
    >,
    pub mem_de_register:
        Option<unsafe extern "C" fn(handles: *const Handle, count: u32) -> QnnError>,
    pub device_get_platform_info: Slot,
    pub device_free_platform_info: Slot,
    pub device_get_infrastructure:
        Option<unsafe extern "C" fn(infra: *mut *const HtpInfrastructure) -> QnnError>,
    pub device_create: Option<
        unsafe extern "C" fn(
            log: Handle,
            config: *const *const Config,
            device: *mut Handle,
        ) -> QnnError,
    >,
    pub device_set_config: Slot,
    pub device_get_info: Slot,
    pub device_free: Option<unsafe extern "C" fn(device: Handle) -> QnnError>,
    pub signal_create: Slot,
    pub signal_set_config: Slot,
    pub signal_trigger: Slot,
    pub signal_free: Slot,
    pub error_get_message:
        Option<unsafe extern "C" fn(error: QnnError, message: *mut *const c_char) -> QnnError>,
}

/// `QnnInterface_t`: backend id, provider name, API version, then the
/// function table at byte 40.
#[repr(C)]
pub struct Interface {
    pub backend_id: u32,
    pub provider_name: *const c_char,
    pub api_version: ApiVersion,
    pub table: FunctionTable,
}

/// `QnnInterface_getProviders`.
pub type GetProvidersFn =
    unsafe extern "C" fn(providers: *mut *const *const Interface, count: *mut u32) -> QnnError;

/// The exported symbol of [`GetProvidersFn`].
pub const GET_PROVIDERS_SYMBOL: &[u8] = b"QnnInterface_getProviders\0";

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The sizes and offsets measured against libQnnHtp.so 2.51 (x86-64 and
    /// aarch64 share them: LP64, natural alignment).
    #[test]
    fn layout_matches_qnn_2_51() {
        assert_eq!(size_of::<Handle>(), 8, "handles are pointers");
        assert_eq!(size_of::<QnnError>(), 8);

        assert_eq!(size_of::<QuantizeParams>(), 40);
        assert_eq!(offset_of!(QuantizeParams, encoding), 8);

        assert_eq!(size_of::<TensorV2>(), 136);
        assert_eq!(offset_of!(TensorV2, id), 0);
        assert_eq!(offset_of!(TensorV2, name), 8);
        assert_eq!(offset_of!(TensorV2, tensor_type), 16);
        assert_eq!(offset_of!(TensorV2, data_format), 20);
        assert_eq!(offset_of!(TensorV2, data_type), 24);
        assert_eq!(offset_of!(TensorV2, quantize_params), 32);
        assert_eq!(offset_of!(TensorV2, rank), 72);
        assert_eq!(offset_of!(TensorV2, dimensions), 80);
        assert_eq!(offset_of!(TensorV2, mem_type), 88);
        assert_eq!(offset_of!(TensorV2, memory), 96);
        assert_eq!(size_of::<TensorMemory>(), 16);
        assert_eq!(offset_of!(TensorV2, is_dynamic_dimensions), 112);
        assert_eq!(offset_of!(TensorV2, sparse_params), 120);
        assert_eq!(offset_of!(TensorV2, is_produced), 132);

        assert_eq!(size_of::<Tensor>(), 144);
        assert_eq!(offset_of!(Tensor, v2), 8);
        // Quantize params inside the tensor: 8 + 32.
        assert_eq!(
            offset_of!(Tensor, v2) + offset_of!(TensorV2, quantize_params),
            40
        );

        assert_eq!(size_of::<Scalar>(), 16);
        assert_eq!(size_of::<Param>(), 160);
        assert_eq!(offset_of!(Param, name), 8);
        assert_eq!(offset_of!(Param, value), 16);

        assert_eq!(size_of::<OpConfigV1>(), 72);
        assert_eq!(size_of::<OpConfig>(), 80);
        assert_eq!(offset_of!(OpConfig, v1), 8);
        assert_eq!(offset_of!(OpConfigV1, params), 32);
        assert_eq!(offset_of!(OpConfigV1, inputs), 48);
        assert_eq!(offset_of!(OpConfigV1, outputs), 64);

        assert_eq!(size_of::<Config>(), 16);
        assert_eq!(offset_of!(Config, custom), 8);
        assert_eq!(offset_of!(HtpDeviceCustomConfig, soc_model), 8);
        assert_eq!(offset_of!(HtpGraphCustomConfig, value), 8);

        assert_eq!(size_of::<DcvsV3>(), 64);
        assert_eq!(offset_of!(PowerConfig, dcvs), 4);
        assert_eq!(offset_of!(HtpInfrastructure, perf), 8);

        assert_eq!(size_of::<ApiVersion>(), 24);
        assert_eq!(offset_of!(Interface, api_version), 16);
        assert_eq!(offset_of!(Interface, table), 40);
        // Table slots used, by index (8 bytes each).
        let slot = |off: usize| off / 8;
        assert_eq!(slot(offset_of!(FunctionTable, backend_create)), 1);
        assert_eq!(slot(offset_of!(FunctionTable, backend_free)), 8);
        assert_eq!(slot(offset_of!(FunctionTable, context_create)), 9);
        assert_eq!(slot(offset_of!(FunctionTable, context_get_binary_size)), 11);
        assert_eq!(
            slot(offset_of!(FunctionTable, context_create_from_binary)),
            13
        );
        assert_eq!(slot(offset_of!(FunctionTable, graph_create)), 15);
        assert_eq!(slot(offset_of!(FunctionTable, graph_add_node)), 18);
        assert_eq!(slot(offset_of!(FunctionTable, graph_execute)), 21);
        assert_eq!(
            slot(offset_of!(FunctionTable, tensor_create_graph_tensor)),
            24
        );
        assert_eq!(
            slot(offset_of!(FunctionTable, device_get_infrastructure)),
            39
        );
        assert_eq!(slot(offset_of!(FunctionTable, device_create)), 40);
        assert_eq!(slot(offset_of!(FunctionTable, device_free)), 43);
        assert_eq!(slot(offset_of!(FunctionTable, error_get_message)), 48);
        assert_eq!(slot(offset_of!(FunctionTable, property_has_capability)), 0);
        assert_eq!(slot(offset_of!(FunctionTable, graph_execute_async)), 22);
        assert_eq!(slot(offset_of!(FunctionTable, profile_create)), 28);
        assert_eq!(slot(offset_of!(FunctionTable, profile_get_events)), 30);
        assert_eq!(slot(offset_of!(FunctionTable, profile_get_event_data)), 32);
        assert_eq!(slot(offset_of!(FunctionTable, profile_free)), 34);
        assert_eq!(slot(offset_of!(FunctionTable, mem_register)), 35);
        assert_eq!(slot(offset_of!(FunctionTable, mem_de_register)), 36);

        // QnnMem and QnnProfile records.
        assert_eq!(size_of::<MemShape>(), 24);
        assert_eq!(offset_of!(MemDescriptor, data_type), 24);
        assert_eq!(offset_of!(MemDescriptor, mem_type), 28);
        assert_eq!(offset_of!(MemDescriptor, info), 32);
        assert_eq!(size_of::<ProfileEventData>(), 24);
        assert_eq!(offset_of!(ProfileEventData, value), 8);
        assert_eq!(offset_of!(ProfileEventData, identifier), 16);
        assert_eq!(size_of::<NotifyStatus>(), 8);
    }

    #[test]
    fn error_code_is_the_low_16_bits() {
        assert_eq!(error_code(0x0001_0000_0000_36b1), 14001);
        assert_eq!(error_code(QNN_SUCCESS), 0);
    }
}
