//! A safetensors checkpoint: one file, or the shards that
//! `model.safetensors.index.json` lists. Opening reads the headers only;
//! a tensor's bytes are read when it is asked for, so every tensor can be
//! checked (presence, shape, dtype) before anything large is allocated.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::Metadata;
use serde::Deserialize;

use crate::{Error, Result};

/// The largest header read (the safetensors crate's own limit).
const MAX_HEADER: u64 = 100_000_000;

/// Where one tensor lies.
#[derive(Debug, Clone)]
pub(crate) struct TensorLoc {
    /// Index into the checkpoint's files.
    file: usize,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Absolute offset of its first byte in the file.
    start: u64,
    /// Its bytes.
    len: usize,
}

/// The headers of a checkpoint's files.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// What the user named (a file, an index or a folder), for messages.
    path: PathBuf,
    files: Vec<PathBuf>,
    tensors: HashMap<String, TensorLoc>,
}

/// The part of `model.safetensors.index.json` that matters.
#[derive(Deserialize)]
struct Index {
    weight_map: BTreeMap<String, String>,
}

impl Checkpoint {
    /// Opens a `.safetensors` file, a `model.safetensors.index.json`, or a
    /// folder holding one of them (the index first).
    pub fn open(path: &Path) -> Result<Checkpoint> {
        if path.is_dir() {
            let index = path.join("model.safetensors.index.json");
            if index.is_file() {
                return Checkpoint::open_index(&index);
            }
            let single = path.join("model.safetensors");
            if single.is_file() {
                return Checkpoint::open_file(&single);
            }
            return Err(Error::Weights {
                path: path.to_path_buf(),
                message: "no model.safetensors or model.safetensors.index.json in this folder"
                    .into(),
            });
        }
        if path.extension().is_some_and(|e| e == "json") {
            Checkpoint::open_index(path)
        } else {
            Checkpoint::open_file(path)
        }
    }

    fn open_file(path: &Path) -> Result<Checkpoint> {
        let mut c = Checkpoint {
            path: path.to_path_buf(),
            files: vec![path.to_path_buf()],
            tensors: HashMap::new(),
        };
        for (name, loc) in read_header(path, 0)? {
            c.tensors.insert(name, loc);
        }
        Ok(c)
    }

    fn open_index(index: &Path) -> Result<Checkpoint> {
        let text = hetero_plan::read_text(index)?;
        let parsed: Index = serde_json::from_str(&text).map_err(|e| Error::Weights {
            path: index.to_path_buf(),
            message: format!(
                "line {} column {}: not a safetensors index ({e})",
                e.line(),
                e.column()
            ),
        })?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut shards: Vec<&String> = parsed.weight_map.values().collect();
        shards.sort();
        shards.dedup();
        let mut c = Checkpoint {
            path: index.to_path_buf(),
            files: shards.iter().map(|s| dir.join(s)).collect(),
            tensors: HashMap::new(),
        };
        for (i, file) in c.files.clone().iter().enumerate() {
            for (name, loc) in read_header(file, i)? {
                if c.tensors.insert(name.clone(), loc).is_some() {
                    return Err(c.bad(format!("tensor `{name}` is in more than one shard")));
                }
            }
        }
        for (name, shard) in &parsed.weight_map {
            let at = c.tensors.get(name).map(|l| &c.files[l.file]);
            if at != Some(&dir.join(shard)) {
                return Err(c.bad(format!(
                    "weight_map puts `{name}` in `{shard}`, whose header does not list it"
                )));
            }
        }
        Ok(c)
    }

    /// The error `message` about this checkpoint.
    pub(crate) fn bad(&self, message: String) -> Error {
        Error::Weights {
            path: self.path.clone(),
            message,
        }
    }

    /// What the user named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor's name.
    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        self.tensors.keys()
    }

    /// A tensor's place, dtype and shape.
    pub(crate) fn info(&self, name: &str) -> Option<&TensorLoc> {
        self.tensors.get(name)
    }

    /// A tensor the runtime will read: refused unless it is F32, F16 or
    /// BF16. Other tensors of the file (integer buffers, say) are left alone.
    pub(crate) fn float_info(&self, name: &str) -> Result<&TensorLoc> {
        let t = self
            .info(name)
            .ok_or_else(|| self.bad(format!("no tensor `{name}`")))?;
        if !matches!(t.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(self.bad(format!(
                "tensor `{name}` is {:?}; the runtime reads F32, F16 and BF16 weights",
                t.dtype
            )));
        }
        Ok(t)
    }

    /// Bytes of every tensor together.
    pub fn data_bytes(&self) -> u64 {
        self.tensors.values().map(|t| t.len as u64).sum()
    }

    /// A tensor's elements as f32, in its stored (row-major) order.
    pub(crate) fn read_f32(&self, name: &str) -> Result<Vec<f32>> {
        let loc = self.float_info(name)?;
        let path = &self.files[loc.file];
        let io = |source| {
            Error::File(hetero_plan::Error::Io {
                path: path.clone(),
                source,
            })
        };
        let mut f = File::open(path).map_err(io)?;
        f.seek(SeekFrom::Start(loc.start)).map_err(io)?;
        let mut raw = vec![0u8; loc.len];
        f.read_exact(&mut raw).map_err(io)?;
        Ok(to_f32(loc.dtype, &raw))
    }
}

/// The tensors a file's header lists, checked against the file's length
/// and the dtypes the runtime reads.
fn read_header(path: &Path, file: usize) -> Result<Vec<(String, TensorLoc)>> {
    let io = |source| {
        Error::File(hetero_plan::Error::Io {
            path: path.to_path_buf(),
            source,
        })
    };
    let bad = |message: String| Error::Weights {
        path: path.to_path_buf(),
        message,
    };
    let mut f = File::open(path).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER || 8 + n > size {
        return Err(bad(format!(
            "not a safetensors file: a header of {n} bytes in a file of {size}"
        )));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(io)?;
    let meta: Metadata =
        serde_json::from_slice(&header).map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    if 8 + n + meta.data_len() as u64 != size {
        return Err(bad(format!(
            "the header describes {} bytes of data, the file holds {}",
            meta.data_len(),
            size - 8 - n
        )));
    }
    let mut out = Vec::new();
    for (name, info) in meta.tensors() {
        let (s, e) = info.data_offsets;
        out.push((
            name,
            TensorLoc {
                file,
                dtype: info.dtype,
                shape: info.shape.clone(),
                start: 8 + n + s as u64,
                len: e - s,
            },
        ));
    }
    Ok(out)
}

/// Little-endian F32, F16 or BF16 bytes as f32.
pub(crate) fn to_f32(dtype: Dtype, raw: &[u8]) -> Vec<f32> {
    match dtype {
        Dtype::F32 => raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => raw
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => raw
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => unreachable!("dtypes are checked before a tensor is read"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a safetensors file of the given `(name, dtype, shape, values)`.
    pub(crate) fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<f32>)]) {
        let data: Vec<Vec<u8>> = tensors
            .iter()
            .map(|(_, d, _, v)| match d {
                Dtype::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                Dtype::F16 => v
                    .iter()
                    .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                    .collect(),
                Dtype::BF16 => v
                    .iter()
                    .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
                    .collect(),
                _ => v.iter().flat_map(|x| (*x as i32).to_le_bytes()).collect(),
            })
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
            .iter()
            .zip(&data)
            .map(|((n, d, s, _), b)| {
                let v = safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap();
                (n.to_string(), v)
            })
            .collect();
        std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
    }

    #[test]
    fn one_file_and_shards_read_the_same_tensors_in_every_dtype() {
        let dir = hetero_test_support::temp_dir("ckpt");
        let a = vec![1.0f32, -2.5, 0.125, 3.0];
        write(
            &dir.path().join("a.safetensors"),
            &[
                ("x", Dtype::F32, vec![2, 2], a.clone()),
                ("y", Dtype::F16, vec![4], a.clone()),
            ],
        );
        write(
            &dir.path().join("b.safetensors"),
            &[
                ("z", Dtype::BF16, vec![1, 4], a.clone()),
                ("ids", Dtype::I32, vec![4], a.clone()),
            ],
        );
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            r#"{"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors", "ids": "b.safetensors"}}"#,
        )
        .unwrap();
        let c = Checkpoint::open(dir.path()).unwrap();
        for n in ["x", "y", "z"] {
            assert_eq!(c.read_f32(n).unwrap(), a, "{n}");
        }
        assert_eq!(c.info("z").unwrap().shape, vec![1, 4]);
        // An integer tensor is listed, and refused only when read.
        let e = c.read_f32("ids").unwrap_err().to_string();
        assert!(e.contains("`ids` is I32"), "{e}");
        let one = Checkpoint::open(&dir.path().join("a.safetensors")).unwrap();
        assert!(one.info("z").is_none());
        // A truncated file is refused by name.
        let bytes = std::fs::read(dir.path().join("b.safetensors")).unwrap();
        let cut = dir.path().join("cut.safetensors");
        std::fs::write(&cut, &bytes[..bytes.len() - 2]).unwrap();
        let e = Checkpoint::open(&cut).unwrap_err().to_string();
        assert!(
            e.contains("cut.safetensors") && e.contains("bytes of data"),
            "{e}"
        );
        // An index naming a shard that lacks the tensor.
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            r#"{"weight_map": {"x": "b.safetensors", "z": "b.safetensors"}}"#,
        )
        .unwrap();
        let e = Checkpoint::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("`x`"), "{e}");
    }
}
