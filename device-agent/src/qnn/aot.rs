//! Ahead-of-time graphs: compile MatMul graphs for a target SoC into QNN
//! context binaries on the host, and load them later without building.
//!
//! `compile` writes one context binary per graph (`contextGetBinarySize` /
//! `contextGetBinary`) and a JSON manifest, [`MANIFEST_FILE`], with the
//! shapes, dtypes, SoC, tensor ids and encodings, and file names. `load`
//! reads the manifest, creates each context from its binary
//! (`contextCreateFromBinary`), retrieves the graph (`graphRetrieve`) and
//! returns runnable [`QnnGemm`]s. This is how a plan's NPU graph set ships
//! with the plan: graphs finalised once on a host, loaded on the phone.

use std::borrow::Cow;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use hetero_plan::{DType, Fingerprint, GemmShape, OperandOrder, WeightMode};
use serde::{Deserialize, Serialize};

use super::gemm::QnnGemm;
use super::graph::{self, BuiltGraph, GraphIo};
use super::runtime::{self, Runtime};
use super::{HtpPerf, PROCESSOR_ID, QnnOptions};
use crate::{Error, GemmSpec, OpenOptions, Result};

/// The manifest's file name inside the output folder.
pub const MANIFEST_FILE: &str = "qnn-graphs.json";
/// The manifest's format tag.
const FORMAT: &str = "hetero-qnn-graphs";
/// The manifest's format version.
const FORMAT_VERSION: u32 = 1;
/// The seed of [`synthetic_weights`] used by [`compile`].
pub const DEFAULT_SEED: u64 = 0x5eed;

/// The manifest of a folder of compiled graphs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `hetero-qnn-graphs`.
    pub format: String,
    /// Format version, 1.
    pub version: u32,
    /// The processor the graphs are for, `qnn:htp`.
    pub processor: String,
    /// The SoC model the graphs were compiled for.
    pub soc: u32,
    /// The QNN build that compiled them (`backendGetBuildId`).
    pub qnn_build: String,
    /// Core API version of that build.
    pub core_api: String,
    /// HTP API version of that build.
    pub backend_api: String,
    /// The plan the graphs were compiled for (`hetero compile`); absent for
    /// a list of shapes (`hetero-agent compile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanBinding>,
    /// The graphs.
    pub graphs: Vec<GraphEntry>,
}

/// The plan a folder of graphs was compiled for: what a runtime checks
/// against the plan it opens before it loads any graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanBinding {
    /// The plan's file name when compiled (for messages).
    pub file: String,
    /// The plan's model fingerprint.
    pub model: Fingerprint,
    /// The plan's predictor fingerprint.
    pub predictor: Fingerprint,
    /// Fingerprint of the plan's graph sets (sizes, row graphs, processors).
    pub graph_sets: Fingerprint,
    /// The weights baked in, in words (`synthetic seed 0x5eed`, a checkpoint).
    pub weights: String,
}

/// What one graph is in a plan: the operator share it computes and the
/// weights baked into it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlanGraph {
    /// Canonical operator name.
    pub op: String,
    /// The layer whose weights it holds.
    pub layer: u32,
    /// The instance (expert) whose weights it holds.
    pub instance: u32,
    /// First output column (of N) of the share it computes.
    pub first_col: u32,
    /// SHA-256 of the weights `W[K, cols]` baked in ([`weights_sha256`]).
    pub weights_sha256: String,
}

/// SHA-256 of weights as little-endian f32 bytes, hex: the identity of the
/// weights a static graph was compiled with.
pub fn weights_sha256(w: &[f32]) -> String {
    let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    Fingerprint::of_bytes("weights", &bytes).sha256
}

/// One compiled graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphEntry {
    /// The context binary, relative to the manifest's folder.
    pub file: String,
    /// The graph's name inside the context.
    pub graph: String,
    /// M×K×N.
    pub shape: GemmShape,
    /// Element type.
    pub dtype: DType,
    /// Operand order.
    pub order: OperandOrder,
    /// Weights baked in (`static`) or an input.
    pub weights: WeightMode,
    /// Seed of [`synthetic_weights`] when the weights are synthetic; absent
    /// when the caller supplied them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_seed: Option<u64>,
    /// Tensor names, backend-assigned ids, shapes and encodings.
    pub io: GraphIo,
    /// The operator share and weights it serves in a plan (`hetero compile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_graph: Option<PlanGraph>,
    /// SHA-256 of the context binary, checked when it is loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_sha256: Option<String>,
    /// Size of the context binary.
    pub bytes: u64,
    /// Build and finalise time on the compiling host, µs (emulator time on x86).
    pub prepare_us: f64,
}

impl GraphEntry {
    /// The spec this graph runs.
    pub fn spec(&self) -> GemmSpec {
        GemmSpec {
            shape: self.shape,
            dtype: self.dtype,
            order: self.order,
            weights: self.weights,
        }
    }
}

/// Deterministic weights `W[K,N]`, uniform in [-1, 1), from a seed
/// (splitmix64). The same seed and shape always give the same weights, so a
/// loader can rebuild the weights a synthetic graph was compiled with.
pub fn synthetic_weights(shape: GemmShape, seed: u64) -> Vec<f32> {
    let (_, k, n) = shape.mkn();
    let mut state = seed ^ ((k as u64) << 32 | n as u64);
    (0..k as usize * n as usize)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::BadRequest {
        field: path.display().to_string(),
        message: e.to_string(),
    }
}

fn file_name(i: usize, spec: &GemmSpec) -> String {
    let w = match spec.weights {
        WeightMode::Static => "static",
        WeightMode::Input => "input",
    };
    format!(
        "g{i:03}_{}_{}_{}_{w}.bin",
        spec.shape, spec.dtype, spec.order
    )
}

/// Compiles `graphs` for SoC `soc` into `out_dir` with synthetic weights
/// ([`synthetic_weights`] with [`DEFAULT_SEED`]; fine for timing, and the
/// loader rebuilds them for verification). Returns the manifest written.
pub fn compile(
    opts: &OpenOptions,
    soc: u32,
    graphs: &[GemmSpec],
    out_dir: &Path,
) -> Result<Manifest> {
    let items = graphs
        .iter()
        .map(|s| {
            (
                *s,
                Cow::Owned(synthetic_weights(s.shape, DEFAULT_SEED)),
                Some(DEFAULT_SEED),
            )
        })
        .collect();
    compile_items(opts, soc, items, out_dir)
}

/// Compiles graphs with the caller's weights `W[K,N]` (row-major f32).
/// Graphs with `weights: input` record no weights; the caller writes them
/// after loading ([`QnnGemm::write_weights`]).
pub fn compile_with_weights(
    opts: &OpenOptions,
    soc: u32,
    graphs: &[(GemmSpec, &[f32])],
    out_dir: &Path,
) -> Result<Manifest> {
    let items = graphs
        .iter()
        .map(|(s, w)| (*s, Cow::Borrowed(*w), None))
        .collect();
    compile_items(opts, soc, items, out_dir)
}

fn open_runtime(opts: &OpenOptions, soc: u32) -> Result<(Arc<Runtime>, QnnOptions)> {
    let q = QnnOptions::from_open(opts)?;
    if let Some(other) = q.soc.filter(|&s| s != soc) {
        return Err(Error::BadRequest {
            field: "soc".into(),
            message: format!("the graphs are for SoC {soc} but SoC {other} was requested"),
        });
    }
    let lib = runtime::load(q.lib_dir.as_deref())?;
    // Compiling and loading need no performance vote.
    let rt = Runtime::open(lib, Some(soc), HtpPerf::Default)?;
    Ok((Arc::new(rt), q))
}

fn compile_items(
    opts: &OpenOptions,
    soc: u32,
    items: Vec<(GemmSpec, Cow<'_, [f32]>, Option<u64>)>,
    out_dir: &Path,
) -> Result<Manifest> {
    let mut c = Compiler::open(opts, soc, out_dir)?;
    for (spec, weights, seed) in items {
        c.add(&spec, &weights, seed, None)?;
    }
    c.finish(None)
}

/// Compiles graphs one at a time into a folder (so that only one graph's
/// weights need be in memory), then writes the manifest.
pub struct Compiler {
    rt: Arc<Runtime>,
    act_abs_max: f32,
    out_dir: PathBuf,
    manifest: Manifest,
}

impl Compiler {
    /// Opens the library for SoC `soc` and creates `out_dir`.
    pub fn open(opts: &OpenOptions, soc: u32, out_dir: &Path) -> Result<Compiler> {
        let (rt, q) = open_runtime(opts, soc)?;
        let api = rt.lib.api();
        if api.context_get_binary_size.is_none() || api.context_get_binary.is_none() {
            return Err(Error::unsupported(
                PROCESSOR_ID,
                "context binaries (no contextGetBinary)",
            ));
        }
        std::fs::create_dir_all(out_dir).map_err(|e| io_error(out_dir, e))?;
        let manifest = Manifest {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            processor: PROCESSOR_ID.into(),
            soc,
            qnn_build: rt.lib.build_id.clone(),
            core_api: rt.lib.api.core.to_string(),
            backend_api: rt.lib.api.backend.to_string(),
            plan: None,
            graphs: Vec::new(),
        };
        Ok(Compiler {
            rt,
            act_abs_max: q.act_abs_max,
            out_dir: out_dir.to_path_buf(),
            manifest,
        })
    }

    /// The QNN build that compiles (`backendGetBuildId`).
    pub fn qnn_build(&self) -> &str {
        &self.manifest.qnn_build
    }

    /// Builds one graph with weights `W[K,N]` (row-major f32) and writes
    /// its context binary (temporary file, then rename). `seed` records
    /// synthetic weights; `plan_graph` what it is in a plan.
    pub fn add(
        &mut self,
        spec: &GemmSpec,
        weights: &[f32],
        seed: Option<u64>,
        plan_graph: Option<PlanGraph>,
    ) -> Result<&GraphEntry> {
        let rt = &self.rt;
        let api = rt.lib.api();
        let (get_size, get_binary) = (
            api.context_get_binary_size.expect("checked at open"),
            api.context_get_binary.expect("checked at open"),
        );
        let built = graph::build(rt, spec, weights, self.act_abs_max)?;
        let mut size = 0u64;
        // SAFETY: a finalised context of this backend; valid out-pointer.
        let err = unsafe { get_size(built.context, &mut size) };
        rt.lib.check("contextGetBinarySize", err)?;
        let mut buf = vec![0u8; size as usize];
        let mut written = 0u64;
        // SAFETY: `buf` has `size` writable bytes.
        let err = unsafe { get_binary(built.context, buf.as_mut_ptr().cast(), size, &mut written) };
        rt.lib.check("contextGetBinary", err)?;
        buf.truncate(written as usize);
        let file = file_name(self.manifest.graphs.len(), spec);
        let path = self.out_dir.join(&file);
        hetero_plan::write_atomic(&path, &buf).map_err(|e| io_error(&path, e))?;
        self.manifest.graphs.push(GraphEntry {
            file,
            graph: graph::GRAPH_NAME.into(),
            shape: spec.shape,
            dtype: spec.dtype,
            order: spec.order,
            weights: spec.weights,
            weights_seed: seed,
            io: built.io.clone(),
            plan_graph,
            binary_sha256: Some(Fingerprint::of_bytes("context binary", &buf).sha256),
            bytes: written,
            prepare_us: built.prepare_us,
        });
        Ok(self.manifest.graphs.last().expect("just pushed"))
    }

    /// Writes the manifest (temporary file, then rename) with the plan it
    /// was compiled for, if any, and returns it.
    pub fn finish(mut self, plan: Option<PlanBinding>) -> Result<Manifest> {
        self.manifest.plan = plan;
        let path = self.out_dir.join(MANIFEST_FILE);
        let text = serde_json::to_string_pretty(&self.manifest).expect("manifest serialises");
        hetero_plan::write_atomic(&path, text.as_bytes()).map_err(|e| io_error(&path, e))?;
        Ok(self.manifest)
    }
}

/// Reads a manifest and checks its format tag and version.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| io_error(&path, e))?;
    let m: Manifest = serde_json::from_str(&text).map_err(|e| io_error(&path, e))?;
    if m.format != FORMAT || m.version != FORMAT_VERSION {
        return Err(Error::BadRequest {
            field: format!("{}: format", path.display()),
            message: format!(
                "expected {FORMAT} version {FORMAT_VERSION}, found {} version {}",
                m.format, m.version
            ),
        });
    }
    Ok(m)
}

/// Loads every graph of a folder written by [`compile`]: context from
/// binary, graph retrieved, ready to run. The SoC comes from the manifest
/// (a different `qnn_soc` in `opts` is an error). Each gemm's
/// [`prepare_us`](crate::Gemm::prepare_us) is its load time
/// (`contextCreateFromBinary` + `graphRetrieve`). Graphs with
/// `weights: input` compiled from synthetic weights get them back; others
/// need [`QnnGemm::write_weights`] before running.
pub fn load(opts: &OpenOptions, dir: &Path) -> Result<Vec<(GraphEntry, QnnGemm)>> {
    let loader = ContextLoader::open(opts, dir)?;
    loader
        .manifest()
        .graphs
        .iter()
        .map(|entry| Ok((entry.clone(), loader.load(entry)?)))
        .collect()
}

/// A folder of compiled graphs, opened for loading graphs one at a time.
pub struct ContextLoader {
    rt: Arc<Runtime>,
    dir: PathBuf,
    manifest: Manifest,
}

impl ContextLoader {
    /// Reads the folder's manifest and opens the library for its SoC (a
    /// different `qnn_soc` in `opts` is an error).
    pub fn open(opts: &OpenOptions, dir: &Path) -> Result<ContextLoader> {
        let manifest = read_manifest(dir)?;
        let (rt, _) = open_runtime(opts, manifest.soc)?;
        let api = rt.lib.api();
        if api.context_create_from_binary.is_none() || api.graph_retrieve.is_none() {
            return Err(Error::unsupported(
                PROCESSOR_ID,
                "context binaries (no contextCreateFromBinary)",
            ));
        }
        Ok(ContextLoader {
            rt,
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// The folder's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The build of the library loaded here (`backendGetBuildId`).
    pub fn qnn_build(&self) -> &str {
        &self.rt.lib.build_id
    }

    /// Creates the context of one graph of the manifest from its binary
    /// and retrieves the graph; its `prepare_us` is this load time.
    pub fn load(&self, entry: &GraphEntry) -> Result<QnnGemm> {
        let rt = &self.rt;
        let api = rt.lib.api();
        let (from_binary, retrieve) = (
            api.context_create_from_binary.expect("checked at open"),
            api.graph_retrieve.expect("checked at open"),
        );
        let path = self.dir.join(&entry.file);
        let bin = std::fs::read(&path).map_err(|e| io_error(&path, e))?;
        if let Some(want) = &entry.binary_sha256 {
            let got = Fingerprint::of_bytes(&entry.file, &bin).sha256;
            if &got != want {
                return Err(Error::BadRequest {
                    field: format!("{}: binary_sha256", path.display()),
                    message: format!(
                        "the context binary has sha256 {}, the manifest says {}: \
                         the file was replaced or damaged; compile again",
                        &got[..12],
                        &want[..want.len().min(12)]
                    ),
                });
            }
        }
        let start = Instant::now();
        let mut context = ptr::null_mut();
        // SAFETY: `bin` is alive for the call; the backend copies what it keeps.
        let err = unsafe {
            from_binary(
                rt.backend,
                rt.device,
                ptr::null(),
                bin.as_ptr().cast(),
                bin.len() as u64,
                &mut context,
                ptr::null_mut(),
            )
        };
        rt.lib
            .check(&format!("contextCreateFromBinary({})", path.display()), err)?;
        let mut built = BuiltGraph {
            rt: Arc::clone(rt),
            context,
            graph: ptr::null_mut(),
            io: entry.io.clone(),
            prepare_us: 0.0,
        };
        let name = CString::new(entry.graph.clone()).map_err(|_| Error::BadRequest {
            field: "graph".into(),
            message: "graph name contains NUL".into(),
        })?;
        // SAFETY: a context created just above; NUL-terminated name.
        let err = unsafe { retrieve(context, name.as_ptr(), &mut built.graph) };
        rt.lib
            .check(&format!("graphRetrieve({})", entry.graph), err)?;
        built.prepare_us = start.elapsed().as_secs_f64() * 1e6;
        let weights = match (entry.weights, entry.weights_seed) {
            (WeightMode::Input, Some(seed)) => Some(synthetic_weights(entry.shape, seed)),
            _ => None,
        };
        QnnGemm::new(entry.spec(), built, weights.as_deref())
    }
}

/// Parses a graph list: items separated by commas or white space, each
/// `MxKxN[:dtype[:order[:weights]]]` (defaults f16, aw, static), e.g.
/// `128x4096x4096,1x4096x4096:w8a16:transposed:input`. `@FILE` reads the list
/// from a file.
pub fn parse_graph_specs(s: &str) -> Result<Vec<GemmSpec>> {
    let text: Cow<'_, str> = match s.strip_prefix('@') {
        Some(file) => {
            Cow::Owned(std::fs::read_to_string(file).map_err(|e| io_error(Path::new(file), e))?)
        }
        None => Cow::Borrowed(s),
    };
    let bad = |item: &str, message: String| Error::BadRequest {
        field: "graphs".into(),
        message: format!("item `{item}`: {message}"),
    };
    let mut out = Vec::new();
    for item in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .map(str::trim)
        .filter(|i| !i.is_empty() && !i.starts_with('#'))
    {
        let mut parts = item.split(':');
        let shape: GemmShape = parts
            .next()
            .unwrap_or_default()
            .parse()
            .map_err(|e| bad(item, e))?;
        let dtype: DType = match parts.next() {
            Some(d) => d.parse().map_err(|e| bad(item, e))?,
            None => DType::F16,
        };
        let order: OperandOrder = match parts.next() {
            Some(o) => o.parse().map_err(|e| bad(item, e))?,
            None => OperandOrder::Aw,
        };
        let weights = match parts.next() {
            None | Some("static") => WeightMode::Static,
            Some("input") => WeightMode::Input,
            Some(w) => {
                return Err(bad(
                    item,
                    format!("unknown weights `{w}`; expected static or input"),
                ));
            }
        };
        if let Some(extra) = parts.next() {
            return Err(bad(
                item,
                format!("unexpected `{extra}` after the weights field"),
            ));
        }
        out.push(GemmSpec {
            shape,
            dtype,
            order,
            weights,
        });
    }
    if out.is_empty() {
        return Err(Error::BadRequest {
            field: "graphs".into(),
            message: "no graphs given".into(),
        });
    }
    Ok(out)
}

/// Arguments of `hetero-agent compile`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    about = "Compile MatMul graphs ahead of time into QNN context binaries for a SoC",
    after_help = "Example:\n  hetero-agent compile --soc 57 --graphs 128x4096x4096,1x4096x4096:w8a16 --out graphs/\n\n\
                  Graph items are MxKxN[:dtype[:order[:weights]]] (defaults f16, aw, static), \
                  separated by commas; @FILE reads them from a file.\n\
                  SoC models: 57 = SM8650, 69 = SM8750, 87 = SM8850."
)]
pub struct CompileArgs {
    /// Target SoC model number (QNN's socModel).
    #[arg(long)]
    pub soc: u32,
    /// Graphs to compile: `MxKxN[:dtype[:order[:weights]]],...` or `@FILE`.
    #[arg(long)]
    pub graphs: String,
    /// Output folder (created); gets one .bin per graph and qnn-graphs.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Print the manifest as JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// Runs `hetero-agent compile`: parses the graph list, compiles, prints a
/// summary (or the manifest with `--json`). The library folder comes from
/// `opts` (the agent's global `--qnn-lib-dir`), then the usual search;
/// `--soc` overrides `opts.qnn_soc`. Bad input is [`Error::BadRequest`]
/// (exit code 2 in the agent binary).
pub fn compile_cli(args: &CompileArgs, opts: &OpenOptions) -> Result<Manifest> {
    let specs = parse_graph_specs(&args.graphs)?;
    let opts = OpenOptions {
        qnn_soc: Some(args.soc),
        ..opts.clone()
    };
    let manifest = compile(&opts, args.soc, &specs, &args.out)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&manifest).expect("serialises")
        );
    } else {
        for g in &manifest.graphs {
            println!(
                "{}  {} {} {} {:?}  {} bytes  finalize {:.1} ms{}",
                g.file,
                g.shape,
                g.dtype,
                g.order,
                g.weights,
                g.bytes,
                g.prepare_us / 1e3,
                if super::EMULATED { " (emulator)" } else { "" }
            );
        }
        println!(
            "wrote {} graphs for SoC {} to {}",
            manifest.graphs.len(),
            manifest.soc,
            args.out.join(MANIFEST_FILE).display()
        );
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_specs_parse_with_defaults() {
        let v =
            parse_graph_specs("128x4096x4096, 1x64x32:w8a16:transposed:input\n2x2x2:f32").unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].dtype, DType::F16);
        assert_eq!(v[0].order, OperandOrder::Aw);
        assert_eq!(v[0].weights, WeightMode::Static);
        assert_eq!(v[1].shape.mkn(), (1, 64, 32));
        assert_eq!(v[1].dtype, DType::W8a16);
        assert_eq!(v[1].order, OperandOrder::Transposed);
        assert_eq!(v[1].weights, WeightMode::Input);
        assert_eq!(v[2].dtype, DType::F32);
    }

    #[test]
    fn graph_specs_name_the_bad_item() {
        for bad in [
            "",
            "12x4",
            "1x2x3:f8",
            "1x2x3:f16:up",
            "1x2x3:f16:aw:both",
            "1x2x3:f16:aw:static:x",
        ] {
            let err = parse_graph_specs(bad).unwrap_err();
            assert!(matches!(err, Error::BadRequest { .. }), "{bad}: {err}");
        }
        let err = parse_graph_specs("1x2x3,1x2x3:f8").unwrap_err().to_string();
        assert!(err.contains("1x2x3:f8"), "{err}");
    }

    #[test]
    fn synthetic_weights_are_deterministic_and_in_range() {
        let s = GemmShape::new(1, 16, 8).unwrap();
        let a = synthetic_weights(s, 1);
        assert_eq!(a, synthetic_weights(s, 1));
        assert_ne!(a, synthetic_weights(s, 2));
        assert_eq!(a.len(), 128);
        assert!(a.iter().all(|x| (-1.0..1.0).contains(x)));
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        assert!(mean.abs() < 0.2, "{mean}");
    }
}
