use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Identifies the exact input a file was made from: a name for people and
/// the SHA-256 of the input's canonical JSON for machines.
///
/// Plans carry the fingerprints of their predictor and model, and predictors
/// that of their dataset, so a mismatched pair is refused instead of silently
/// used.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Fingerprint {
    /// A readable name (model name, dataset folder).
    pub name: String,
    /// Hex SHA-256 of the canonical JSON encoding.
    pub sha256: String,
}

impl Fingerprint {
    /// Fingerprints any serialisable value through its compact JSON encoding
    /// (field order is the declaration order, so it is stable).
    pub fn of<T: Serialize>(name: impl Into<String>, value: &T) -> Fingerprint {
        let bytes = serde_json::to_vec(value).expect("serialising to a Vec cannot fail");
        Fingerprint::of_bytes(name, &bytes)
    }

    /// Fingerprints raw bytes.
    pub fn of_bytes(name: impl Into<String>, bytes: &[u8]) -> Fingerprint {
        let digest = Sha256::digest(bytes);
        let sha256 = digest.iter().map(|b| format!("{b:02x}")).collect();
        Fingerprint {
            name: name.into(),
            sha256,
        }
    }

    /// True when both fingerprints hash the same content (names may differ).
    pub fn matches(&self, other: &Fingerprint) -> bool {
        self.sha256 == other.sha256
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_input() {
        let f = Fingerprint::of_bytes("abc", b"abc");
        assert_eq!(
            f.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(f.matches(&Fingerprint::of_bytes("other name", b"abc")));
        assert!(!f.matches(&Fingerprint::of_bytes("abc", b"abd")));
    }
}
