#!/usr/bin/env python3
"""The peers of `hetero bench offload`: what people run today when a model's
weights do not fit the GPU, measured on the same machine with the same random
weights.

  offload-peers.py fetch-llama OUT_DIR
      Needs the package registry. Downloads llama.cpp's source as the
      llama-cpp-python source distribution on PyPI, checks its SHA-256
      against the registry's, and writes OUT_DIR/llama.cpp-src.tar.xz: the
      part llama-bench needs (about 3 MB), for a GPU host without network.

  offload-peers.py build-llama --llama-src TARBALL [--work DIR]
      Builds llama-bench with CUDA from TARBALL under DIR (run does this
      itself when it finds no build there).

  offload-peers.py run --config CONFIG --budget 4GiB [--budget 8GiB]
                       [--llama-src TARBALL] [--work DIR] [--out JSON]
      On a CUDA host with torch, transformers, accelerate, numpy, cmake and
      nvcc. Makes random f16 weights of the config's shape (seeded), then
      per budget:
      - transformers + accelerate offload: the device map that
        `infer_auto_device_map` makes under `max_memory={0: budget}`,
        dispatched so that CPU-mapped modules stream their weights to the
        GPU on every forward (what `from_pretrained(device_map="auto",
        max_memory=...)` does);
      - llama.cpp built with CUDA from TARBALL, the same weights converted
        to GGUF f16, `llama-bench -ngl N` with N the most layers whose
        weights fit the budget.
      Each reports prefill tokens/s at --prompt tokens and decode tokens/s.
"""

import argparse
import copy
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request

LLAMA_CPP_PYTHON = "0.3.36"
# What llama-bench does not need: docs, vocabularies, tests, other backends.
TRIM = (
    "docs", "models", "media", "tests", "examples", "benches", ".github",
    ".devops", "pocs", "app", "tools/ui", "tools/server", "tools/mtmd",
    "ggml/src/ggml-vulkan", "ggml/src/ggml-sycl", "ggml/src/ggml-metal",
    "ggml/src/ggml-opencl", "ggml/src/ggml-hexagon", "ggml/src/ggml-et",
    "ggml/src/ggml-cann", "ggml/src/ggml-musa", "ggml/src/ggml-webgpu",
    "ggml/src/ggml-zdnn",
)


def parse_bytes(s):
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?i?B?)\s*", s, re.IGNORECASE)
    if not m:
        raise SystemExit(f"--budget: `{s}` is not a size such as 4GiB")
    unit = m.group(2).upper().rstrip("B").rstrip("I")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(unit or " "))


def fetch_llama(out_dir):
    index = "https://pypi.org/pypi/llama-cpp-python/json"
    meta = json.load(urllib.request.urlopen(index))
    files = meta.get("releases", {}).get(LLAMA_CPP_PYTHON) or [
        u for u in meta["urls"] if meta["info"]["version"] == LLAMA_CPP_PYTHON]
    sdist = next((u for u in files if u["packagetype"] == "sdist"), None)
    if sdist is None:
        raise SystemExit(f"llama-cpp-python {LLAMA_CPP_PYTHON}: no source distribution on the registry")
    data = urllib.request.urlopen(urllib.parse.urljoin(index, sdist["url"])).read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sdist["digests"]["sha256"]:
        raise SystemExit(f"{sdist['filename']}: sha256 {digest} is not the registry's")
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "llama.cpp-src.tar.xz")
    tmp = out + ".tmp"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as src, \
            tarfile.open(tmp, "w:xz") as dst:
        for member in src.getmembers():
            if not member.name.startswith(prefix):
                continue
            rel = member.name[len(prefix):]
            if any(rel == t or rel.startswith(t + "/") for t in TRIM):
                continue
            member.name = "llama.cpp/" + rel
            # A long name lives in a pax header, which the writer prefers.
            member.pax_headers.pop("path", None)
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    os.replace(tmp, out)
    print(f"{out}: llama.cpp from llama-cpp-python {LLAMA_CPP_PYTHON} ({os.path.getsize(out) >> 20} MiB)")


def build_llama_bench(tarball, work):
    exe = os.path.join(work, "llama.cpp", "build", "bin", "llama-bench")
    if os.path.exists(exe):
        return exe
    with tarfile.open(tarball) as t:
        t.extractall(work, filter="data")
    root = os.path.join(work, "llama.cpp")
    with open(os.path.join(root, "tools", "CMakeLists.txt"), "w") as f:
        f.write("add_subdirectory(llama-bench)\n")
    run(["cmake", "-S", root, "-B", os.path.join(root, "build"), "-DGGML_CUDA=ON",
         "-DCMAKE_CUDA_ARCHITECTURES=native", "-DCMAKE_BUILD_TYPE=Release",
         "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
         "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF"])
    run(["cmake", "--build", os.path.join(root, "build"), "--target", "llama-bench",
         "-j", str(os.cpu_count())])
    return exe


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def random_model(config_path, seed):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    with open(config_path) as f:
        cfg = json.load(f)
    config = AutoConfig.for_model(**cfg)
    torch.manual_seed(seed)
    t = time.time()
    # Drawn on the GPU (minutes faster than on the CPU), then kept on the host.
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    model = model.to("cpu").eval()
    torch.cuda.empty_cache()
    print(f"random f16 weights of {config_path}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters in {time.time() - t:.0f} s", flush=True)
    return model, config


def layer_bytes(model):
    layer = model.model.layers[0]
    return sum(p.numel() * p.element_size() for p in layer.parameters())


def write_gguf(model, config, path):
    """The model's weights as a GGUF f16 llama file, named and laid out as
    llama.cpp's convert_hf_to_gguf.py writes them (q/k rows permuted for
    its RoPE layout). The vocabulary is placeholder tokens: llama-bench
    draws random token ids and never tokenises text."""
    import gguf
    import numpy as np
    c = config
    hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w = gguf.GGUFWriter(None, "llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(float(getattr(c, "rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(c.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens = [f"<0x{i:02X}>".encode() for i in range(256)]
    tokens += [f"t{i}".encode() for i in range(256, c.vocab_size)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * c.vocab_size)
    w.add_token_types([gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (c.vocab_size - 256))
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)

    def permute(t, heads):
        return t.reshape(heads, 2, t.shape[0] // heads // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)

    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
             "post_attention_layernorm": "ffn_norm"}
    for name, p in model.state_dict().items():
        a = p.detach().cpu().numpy()
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        elif name == "lm_head.weight":
            gname = "output.weight"
        else:
            m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name)
            if not m or m.group(2) not in names:
                raise SystemExit(f"{name}: no GGUF name for this tensor")
            gname = f"blk.{m.group(1)}.{names[m.group(2)]}.weight"
            if m.group(2) == "self_attn.q_proj":
                a = permute(a, c.num_attention_heads)
            elif m.group(2) == "self_attn.k_proj":
                a = permute(a, c.num_key_value_heads)
        w.add_tensor(gname, a.astype(np.float32) if a.ndim == 1 else a)
    tmp = path + ".tmp"
    w.write_header_to_file(path=tmp)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def llama_cpp(exe, gguf_path, layers, per_layer, budget, prompt, tokens):
    ngl = min(layers, budget // per_layer)
    out = subprocess.run([exe, "-m", gguf_path, "-ngl", str(ngl), "-p", str(prompt),
                          "-n", str(tokens), "-r", "3", "-o", "json"],
                         check=True, capture_output=True, text=True)
    rows = json.loads(out.stdout)
    res = {"ngl": ngl, "gpu_weight_bytes": ngl * per_layer}
    for r in rows:
        key = "prefill_tok_s" if r["n_prompt"] > 0 else "decode_tok_s"
        res[key] = r["avg_ts"]
        res[key + "_stdev"] = r["stddev_ts"]
    res["llama_cpp_python"] = LLAMA_CPP_PYTHON
    return res


def accelerate_offload(model, budget, prompt, tokens, seed):
    import torch
    from accelerate import dispatch_model, infer_auto_device_map
    dm = infer_auto_device_map(model, max_memory={0: budget, "cpu": 1 << 40},
                               no_split_module_classes=model._no_split_modules)
    on_gpu = sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                 if dm.get(owner(dm, n)) == 0)
    model = dispatch_model(model, device_map=dm, main_device=0)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (1, prompt), generator=g).to(0)

    def timed(n_new):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new,
                           do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    timed(2)  # warm-up
    first = sorted(timed(1) for _ in range(3))[1]
    whole = timed(tokens + 1)
    return {"gpu_weight_bytes": on_gpu, "ttft_s": first,
            "prefill_tok_s": prompt / first, "decode_tok_s": tokens / (whole - first)}


def owner(dm, name):
    parts = name.split(".")
    for i in range(len(parts), -1, -1):
        key = ".".join(parts[:i])
        if key in dm:
            return key
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch-llama")
    f.add_argument("out_dir")
    bl = sub.add_parser("build-llama")
    bl.add_argument("--llama-src", required=True)
    bl.add_argument("--work", default=tempfile.gettempdir())
    r = sub.add_parser("run")
    r.add_argument("--config", required=True)
    r.add_argument("--budget", action="append", required=True)
    r.add_argument("--llama-src")
    r.add_argument("--work", default=tempfile.gettempdir())
    r.add_argument("--prompt", type=int, default=512)
    r.add_argument("--tokens", type=int, default=32)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out")
    a = ap.parse_args()
    if a.cmd == "fetch-llama":
        return fetch_llama(a.out_dir)
    if a.cmd == "build-llama":
        return print(build_llama_bench(a.llama_src, a.work))
    budgets = [parse_bytes(b) for b in a.budget]
    results = {"config": a.config, "prompt": a.prompt, "tokens": a.tokens, "runs": []}
    exe = None
    if a.llama_src:
        try:
            exe = build_llama_bench(a.llama_src, a.work)
        except (subprocess.CalledProcessError, OSError) as e:
            results["llama_cpp_error"] = str(e)
            print(f"llama.cpp did not build: {e}", file=sys.stderr)
    model, config = random_model(a.config, a.seed)
    per_layer = layer_bytes(model)
    if exe:
        sys.path.insert(0, os.path.join(a.work, "llama.cpp", "gguf-py"))
        path = os.path.join(a.work, "model-f16.gguf")
        if not os.path.exists(path):
            t = time.time()
            write_gguf(model, config, path)
            print(f"{path}: {os.path.getsize(path) >> 20} MiB in {time.time() - t:.0f} s", flush=True)
        for b in budgets:
            res = llama_cpp(exe, path, config.num_hidden_layers, per_layer, b, a.prompt, a.tokens)
            results["runs"].append({"peer": "llama.cpp -ngl", "budget": b, **res})
            print(json.dumps(results["runs"][-1]), flush=True)
    for b in budgets:
        # Each budget dispatches its own copy: dispatching moves weights.
        m = copy.deepcopy(model)
        res = accelerate_offload(m, b, a.prompt, a.tokens, a.seed)
        results["runs"].append({"peer": "transformers + accelerate offload", "budget": b, **res})
        print(json.dumps(results["runs"][-1]), flush=True)
        del m
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as fo:
            json.dump(results, fo, indent=1)
        os.replace(tmp, a.out)
    print(f"{'peer':36} {'budget':>8} {'GPU weights':>12} {'prefill tok/s':>14} {'decode tok/s':>13}")
    for r in results["runs"]:
        print(f"{r['peer']:36} {r['budget'] / 2**30:7.1f}G {r['gpu_weight_bytes'] / 2**30:11.2f}G "
              f"{r.get('prefill_tok_s', float('nan')):14.1f} {r.get('decode_tok_s', float('nan')):13.2f}")


if __name__ == "__main__":
    main()
