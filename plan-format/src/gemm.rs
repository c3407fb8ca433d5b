use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Element type of a GEMM: plain floats, integers, or weight-quantised mixes.
///
/// `w8a16` means 8-bit weights with 16-bit activations (the NPU's A16W8).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    Bf16,
    /// Unsigned 8-bit fixed point (activations and weights).
    U8,
    /// Unsigned 16-bit fixed point (activations and weights).
    U16,
    /// 8-bit weights, 16-bit activations.
    W8a16,
    /// 8-bit weights, 8-bit activations.
    W8a8,
    /// 4-bit weights, 16-bit activations.
    W4a16,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::U8,
        DType::U16,
        DType::W8a16,
        DType::W8a8,
        DType::W4a16,
    ];

    /// The lowercase name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::W8a16 => "w8a16",
            DType::W8a8 => "w8a8",
            DType::W4a16 => "w4a16",
        }
    }

    /// Bits per weight element as stored.
    pub fn weight_bits(self) -> u32 {
        match self {
            DType::F32 => 32,
            DType::F16 | DType::Bf16 | DType::U16 => 16,
            DType::U8 | DType::W8a16 | DType::W8a8 => 8,
            DType::W4a16 => 4,
        }
    }

    /// Bits per activation element.
    pub fn activation_bits(self) -> u32 {
        match self {
            DType::F32 => 32,
            DType::F16 | DType::Bf16 | DType::U16 | DType::W8a16 | DType::W4a16 => 16,
            DType::U8 | DType::W8a8 => 8,
        }
    }

    /// The names of `dtypes`, comma-separated (`f32, f16`), for messages.
    pub fn list(dtypes: &[DType]) -> String {
        let names: Vec<&str> = dtypes.iter().map(|d| d.as_str()).collect();
        names.join(", ")
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        DType::ALL
            .into_iter()
            .find(|d| d.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown dtype `{s}`; expected one of {}",
                    DType::list(&DType::ALL)
                )
            })
    }
}

/// Which operand the processor holds stationary.
///
/// `aw` computes `C[M,N] = A[M,K] · W[K,N]` (activations first). `transposed`
/// computes the same product transposed, `Cᵀ[N,M] = Wᵀ[N,K] · Aᵀ[K,M]`, which
/// is the order a weight-stationary NPU prefers when the weight is the larger
/// tensor (HeteroLLM §3.2, order-sensitive performance).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OperandOrder {
    /// `A[M,K] · W[K,N]`.
    #[default]
    Aw,
    /// `Wᵀ[N,K] · Aᵀ[K,M]`: the weight is the left operand. Files written
    /// before this name call it `wt_at`, which still loads.
    #[serde(alias = "wt_at")]
    Transposed,
}

impl OperandOrder {
    /// The name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            OperandOrder::Aw => "aw",
            OperandOrder::Transposed => "transposed",
        }
    }
}

impl fmt::Display for OperandOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OperandOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "aw" => Ok(OperandOrder::Aw),
            "transposed" | "wt_at" | "wtat" => Ok(OperandOrder::Transposed),
            _ => Err(format!(
                "unknown operand order `{s}`; expected aw or transposed"
            )),
        }
    }
}

/// Whether a static-graph processor bakes the weights into the graph or takes
/// them as an input at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WeightMode {
    /// Weights are graph constants (QNN `STATIC` tensors).
    #[default]
    Static,
    /// Weights are written by the application at run time (QNN `APP_WRITE`).
    Input,
}

/// A GEMM `C[M,N] = A[M,K] · W[K,N]`: M is the number of tokens, K the input
/// features, N the output features. Every dimension is at least 1.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub struct GemmShape {
    /// Rows of the activation (tokens).
    pub m: NonZeroU32,
    /// Inner dimension (input features).
    pub k: NonZeroU32,
    /// Output features.
    pub n: NonZeroU32,
}

impl GemmShape {
    /// Builds a shape; `None` when a dimension is zero.
    pub fn new(m: u32, k: u32, n: u32) -> Option<Self> {
        Some(GemmShape {
            m: NonZeroU32::new(m)?,
            k: NonZeroU32::new(k)?,
            n: NonZeroU32::new(n)?,
        })
    }

    /// `(m, k, n)` as plain integers.
    pub fn mkn(&self) -> (u32, u32, u32) {
        (self.m.get(), self.k.get(), self.n.get())
    }

    /// Floating-point operations: `2·M·K·N`.
    pub fn flops(&self) -> f64 {
        let (m, k, n) = self.mkn();
        2.0 * m as f64 * k as f64 * n as f64
    }
}

impl fmt::Display for GemmShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.m, self.k, self.n)
    }
}

impl FromStr for GemmShape {
    type Err = String;
    /// Parses `MxKxN`, for example `64x256x256`.
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.trim().split(['x', 'X']).collect();
        let bad =
            || format!("bad shape `{s}`: expected MxKxN with positive integers, e.g. 64x256x256");
        if parts.len() != 3 {
            return Err(bad());
        }
        let d: Vec<u32> = parts
            .iter()
            .map(|p| p.trim().parse::<u32>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        GemmShape::new(d[0], d[1], d[2]).ok_or_else(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transposed_order_is_written_by_its_name_and_loads_by_its_old_one() {
        let t = OperandOrder::Transposed;
        assert_eq!(serde_json::to_string(&t).unwrap(), r#""transposed""#);
        assert_eq!(
            serde_json::from_str::<OperandOrder>(r#""wt_at""#).unwrap(),
            t
        );
        assert_eq!(ron::from_str::<OperandOrder>("wt_at").unwrap(), t);
        assert_eq!("wt_at".parse::<OperandOrder>().unwrap(), t);
        assert_eq!("transposed".parse::<OperandOrder>().unwrap(), t);
    }

    #[test]
    fn shape_parses_and_prints() {
        let s: GemmShape = "64x256x128".parse().unwrap();
        assert_eq!(s.mkn(), (64, 256, 128));
        assert_eq!(s.to_string(), "64x256x128");
        assert_eq!(s.flops(), 2.0 * 64.0 * 256.0 * 128.0);
    }

    #[test]
    fn shape_refuses_zero_and_garbage() {
        assert!("0x1x1".parse::<GemmShape>().is_err());
        assert!("1x1".parse::<GemmShape>().is_err());
        assert!("axbxc".parse::<GemmShape>().is_err());
    }

    #[test]
    fn dtype_round_trips_names() {
        for d in DType::ALL {
            assert_eq!(d.as_str().parse::<DType>().unwrap(), d);
        }
        assert!("f8".parse::<DType>().unwrap_err().contains("f32"));
    }
}
