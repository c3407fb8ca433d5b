use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The schema version this build reads and writes. Every file carries it.
pub const SCHEMA_VERSION: u32 = 1;

/// The `schema_version` field of every file.
///
/// Parsing refuses any version other than [`SCHEMA_VERSION`], so a file from a
/// newer or older hetero fails with the field path and the line:column of the
/// version, instead of being misread.
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
        if v == SCHEMA_VERSION {
            Ok(SchemaVersion)
        } else {
            Err(serde::de::Error::custom(format!(
                "unsupported schema_version {v}: this build of hetero reads version {SCHEMA_VERSION}"
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
            "description": "Schema version of the file; this build reads and writes only this one.",
            "type": "integer",
            "const": SCHEMA_VERSION,
        })
    }
}
