//! Reading and writing hetero files: RON or JSON by extension, errors with
//! file, field path and line:column, atomic writes.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Error, Result, Validate};

/// The two text formats every type reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Rusty Object Notation, the default for files people edit.
    Ron,
    /// JSON, for scripts.
    Json,
}

impl Format {
    /// The format a path's extension names.
    pub fn of_path(path: &Path) -> Result<Format> {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("ron") => Ok(Format::Ron),
            Some(e) if e.eq_ignore_ascii_case("json") => Ok(Format::Json),
            _ => Err(Error::UnknownFormat {
                path: path.to_path_buf(),
            }),
        }
    }
}

/// Reads, parses and validates a file; the format comes from the extension.
pub fn load<T: DeserializeOwned + Validate>(path: &Path) -> Result<T> {
    let format = Format::of_path(path)?;
    let text = read_text(path)?;
    load_str(path, &text, format)
}

/// Reads a text file; bytes that are not UTF-8 are refused with the byte
/// offset, line and column of the first of them ([`Error::NotUtf8`]).
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| not_utf8(path, e.as_bytes(), e.utf8_error()))
}

/// The error for `bytes` (the whole text) that stop being UTF-8 where `e`
/// says.
fn not_utf8(path: &Path, bytes: &[u8], e: std::str::Utf8Error) -> Error {
    let offset = e.valid_up_to();
    let valid = std::str::from_utf8(&bytes[..offset]).expect("valid up to here");
    let line_start = valid.rfind('\n').map_or(0, |i| i + 1);
    Error::NotUtf8 {
        path: path.to_path_buf(),
        offset,
        byte: bytes[offset],
        line: valid.matches('\n').count() + 1,
        column: valid[line_start..].chars().count() + 1,
    }
}

/// Parses and validates text; `path` only names the source in errors.
pub fn load_str<T: DeserializeOwned + Validate>(
    path: &Path,
    text: &str,
    format: Format,
) -> Result<T> {
    let value: T = match format {
        Format::Json => parse_json(path, text)?,
        Format::Ron => parse_ron(path, text)?,
    };
    value
        .validate()
        .map_err(|(field, message)| Error::Invalid {
            path: path.to_path_buf(),
            field,
            message,
        })?;
    Ok(value)
}

fn field_path(p: &serde_path_to_error::Path) -> String {
    let s = p.to_string();
    if s.is_empty() { ".".into() } else { s }
}

/// Parses JSON into `T`, reporting the field path and line:column of the
/// first error.
pub(crate) fn parse_json<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    let mut de = serde_json::Deserializer::from_str(text);
    let err = |field: String, inner: serde_json::Error| Error::Parse {
        path: path.to_path_buf(),
        field,
        line: inner.line(),
        column: inner.column(),
        message: strip_json_position(&inner.to_string()),
    };
    let value = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| err(field_path(e.path()), e.into_inner()))?;
    de.end().map_err(|e| err(".".into(), e))?;
    Ok(value)
}

/// serde_json appends " at line L column C" to its messages; the error
/// already carries both.
fn strip_json_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

fn parse_ron<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    let spanned = |e: ron::error::SpannedError, field: String| Error::Parse {
        path: path.to_path_buf(),
        field,
        line: e.span.start.line,
        column: e.span.start.col,
        message: e.code.to_string(),
    };
    let mut de = ron::Deserializer::from_str(text).map_err(|e| spanned(e, ".".into()))?;
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = field_path(e.path());
        spanned(de.span_error(e.into_inner()), field)
    })?;
    de.end()
        .map_err(|e| spanned(de.span_error(e), ".".into()))?;
    Ok(value)
}

/// Serialises a value in the given format, pretty-printed, with a final newline.
pub fn to_string<T: Serialize>(value: &T, format: Format) -> Result<String> {
    to_string_depth(value, format, None)
}

/// As [`to_string`], but values nested deeper than `depth` levels are
/// written on one line (a plan's ranges: one per line). `None`: no limit.
pub fn to_string_depth<T: Serialize>(
    value: &T,
    format: Format,
    depth: Option<usize>,
) -> Result<String> {
    let mut s = match format {
        Format::Json => {
            let mut out = Vec::new();
            let fmt = DepthFormatter {
                depth: 0,
                limit: depth.unwrap_or(usize::MAX),
                has_value: false,
            };
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            value.serialize(&mut ser).map_err(|e| Error::Serialize {
                what: "JSON",
                message: e.to_string(),
            })?;
            String::from_utf8(out).expect("serde_json writes UTF-8")
        }
        Format::Ron => {
            let mut cfg = ron::ser::PrettyConfig::new()
                .indentor("  ".to_string())
                .struct_names(false)
                .compact_arrays(true);
            if let Some(d) = depth {
                // Each element of the shallow arrays on its own line, the
                // deep values compact.
                cfg = cfg.depth_limit(d).compact_arrays(false);
            }
            ron::ser::to_string_pretty(value, cfg).map_err(|e| Error::Serialize {
                what: "RON",
                message: e.to_string(),
            })?
        }
    };
    s.push('\n');
    Ok(s)
}

/// serde_json's pretty layout (two-space indent) down to `limit` levels,
/// compact below: `{"a": 1, "b": [2, 3]}` on one line.
struct DepthFormatter {
    depth: usize,
    limit: usize,
    has_value: bool,
}

impl DepthFormatter {
    fn pretty(&self) -> bool {
        self.depth <= self.limit
    }

    fn indent<W: ?Sized + Write>(&self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..self.depth {
            w.write_all(b"  ")?;
        }
        Ok(())
    }

    fn begin<W: ?Sized + Write>(&mut self, w: &mut W, open: &[u8]) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(open)
    }

    fn end<W: ?Sized + Write>(&mut self, w: &mut W, close: &[u8]) -> std::io::Result<()> {
        let pretty = self.pretty();
        self.depth -= 1;
        if self.has_value && pretty {
            self.indent(w)?;
        }
        self.has_value = true;
        w.write_all(close)
    }

    fn item<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(if self.pretty() { b"," } else { b", " })?;
        }
        if self.pretty() {
            self.indent(w)?;
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for DepthFormatter {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.begin(w, b"[")
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.end(w, b"]")
    }
    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.begin(w, b"{")
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.end(w, b"}")
    }
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Writes a value to `path` atomically, in the format its extension names.
pub fn save<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = to_string(value, Format::of_path(path)?)?;
    write_atomic(path, text.as_bytes())
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, then renames
/// it over `path`: readers see the old file or the new one, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path.file_name().ok_or_else(|| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file path",
        ))
    })?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp: PathBuf = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}
