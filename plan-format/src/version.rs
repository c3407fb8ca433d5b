use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The schema version this build writes. Every file carries it.
///
/// Version 2 names the weight-first operand order `transposed` (version 1:
/// `wt_at`) and the launch overhead after a CPU part
/// `launch_overhead_after_cpu` (version 1: `op_overhead_after`), and no
/// longer writes `op_alone` microbenchmarks.
///
/// Version 3 writes a plan's decision tables as ranges of lengths
/// (`spans`, `ranges`) instead of one decision per length (`decisions`,
/// still read).
pub const SCHEMA_VERSION: u32 = 3;

/// The oldest schema version this build still reads: version 1 files load
/// through the old names' aliases.
pub const OLDEST_SCHEMA_VERSION: u32 = 1;

/// The `schema_version` field of every file.
///
/// Parsing refuses any version outside [`OLDEST_SCHEMA_VERSION`] ..=
/// [`SCHEMA_VERSION`], so a file from a newer or much older hetero fails with
/// the field path and the line:column of the version, instead of being
/// misread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SchemaVersion;

impl Default for SchemaVersion {
    fn default() -> Self {
        SchemaVersion
    }
}

impl Serialize for SchemaVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(SCHEMA_VERSION)
    }
}

impl<'de> Deserialize<'de> for SchemaVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u32::deserialize(d)?;
        if (OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).contains(&v) {
            Ok(SchemaVersion)
        } else {
            Err(serde::de::Error::custom(format!(
                "unsupported schema_version {v}: this build of hetero reads versions {OLDEST_SCHEMA_VERSION} to {SCHEMA_VERSION}"
            )))
        }
    }
}

impl JsonSchema for SchemaVersion {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SchemaVersion".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Schema version of the file; this build writes the highest and reads all of these.",
            "type": "integer",
            "minimum": OLDEST_SCHEMA_VERSION,
            "maximum": SCHEMA_VERSION,
        })
    }
}
