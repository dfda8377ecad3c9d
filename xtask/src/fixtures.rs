//! `cargo xtask fixtures`: tiny random-weight decoders and encoders in the real on-disk formats.
//!
//! Writes, deterministically from a seed, trained byte-level BPE tokenizers and four tiny
//! decoders. `tiny-llama` (SmolLM2-shaped) and `tiny-qwen2` (Qwen2.5-shaped) come as a Hugging
//! Face directory (config.json, f32 model.safetensors, tokenizer.json, tokenizer_config.json,
//! generation_config.json) and as a Q8_0 GGUF file converted the way llama.cpp's
//! `convert_hf_to_gguf.py` converts; tests of the decoder load both forms of one model and must
//! get the same logits, so the fixtures pin down naming, rope layout, tied heads, biases and
//! vocabulary padding without any download. `tiny-qwen3` (Qwen3-shaped) and `tiny-gemma3`
//! (Gemma 3 text-shaped) come as Hugging Face directories only: they carry the family switches
//! (q/k norms, GELU, embedding scale, sandwich norms, sliding-window layers with their own rope
//! base, `query_pre_attn_scalar`) that the decoder is compared on against candle-transformers'
//! `qwen3` and `gemma3`. Two tiny encoders, `tiny-bert` (all-MiniLM-L6-v2-shaped) and
//! `tiny-modernbert` (ModernBERT-base-shaped, with global and sliding-window layers), share a
//! WordPiece tokenizer whose vocabulary is counted out of the same corpus; the decision encoder
//! is compared on them against candle-transformers' `bert` and `modernbert`. `tiny-qwen2vl`
//! is a Qwen2-VL as llama.cpp reads it: tiny-qwen2's decoder as a `qwen2vl` GGUF (M-RoPE
//! sections, Qwen2-VL's vision tokens) and a `clip` vision projector GGUF (`qwen2vl_merger`),
//! for the multimodal path through llama.cpp's mtmd. `tiny-llama-spm.gguf` is tiny-llama with a
//! SentencePiece vocabulary (`tokenizer.ggml.model = "llama"`, scores, byte fallback), as Llama
//! 2, Mistral and Gemma ship theirs, for the SentencePiece path on both backends. `manifest.json`
//! records every file's sha256; a run whose manifest, seed and generator version already match
//! does nothing.

mod corpus;
mod encoder;
mod gguf;
mod qwen2vl;
mod sentencepiece;
mod templates;
#[cfg(test)]
mod tests;
mod tokenizer;
mod weights;
mod wordpiece;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use ruling_models::files::sha256_hex;
use serde::{Deserialize, Serialize};
use serde_json::json;

use tokenizer::{Layout, TrainedTokenizer};
use weights::{Arch, Gemma3Spec, Spec};

/// Bump whenever the bytes written for a given seed change, so stale fixtures are regenerated.
const GENERATOR_VERSION: u32 = 6;
const DEFAULT_SEED: u64 = 20_261_130;
/// Ids in each trained tokenizer, special tokens included.
const TOKENIZER_SIZE: usize = 768;
/// Ids in the encoders' WordPiece tokenizer, special tokens included (not a multiple of 64, so
/// ModernBERT's padded embedding has rows past it).
const WORDPIECE_SIZE: usize = 500;
const MANIFEST: &str = "manifest.json";
/// The SentencePiece-vocabulary decoder's file stem.
const SENTENCEPIECE_NAME: &str = "tiny-llama-spm";

/// Arguments of `cargo xtask fixtures`.
#[derive(Debug, clap::Args)]
pub struct FixturesArgs {
    /// Output directory [default: fixtures/generated in the workspace].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed of every random choice; the same seed gives byte-identical files.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Regenerate even when the manifest says the files are current.
    #[arg(long)]
    pub force: bool,
}

/// `manifest.json`: what a run wrote, enough to tell whether a later run can skip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub(crate) generator_version: u32,
    pub(crate) seed: u64,
    pub(crate) files: Vec<ManifestEntry>,
}

/// One generated file, its path relative to the output directory with `/` separators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ManifestEntry {
    pub(crate) path: String,
    pub(crate) size: u64,
    pub(crate) sha256: String,
}

pub fn run(args: &FixturesArgs) -> Result<()> {
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => workspace_root().join("fixtures").join("generated"),
    };
    if !args.force && is_current(&out, args.seed)? {
        eprintln!(
            "fixtures: {} is current (seed {})",
            out.display(),
            args.seed
        );
        return Ok(());
    }
    let started = Instant::now();
    generate(&out, args.seed, true)?;
    eprintln!(
        "fixtures: wrote {} in {:.2} s (seed {})",
        out.display(),
        started.elapsed().as_secs_f64(),
        args.seed
    );
    Ok(())
}

fn workspace_root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_path_buf()
}

/// Whether `out` holds exactly what `generate(out, seed)` would write: the manifest's seed and
/// version match and every listed file has the recorded size and hash.
pub(crate) fn is_current(out: &Path, seed: u64) -> Result<bool> {
    let Ok(text) = fs::read_to_string(out.join(MANIFEST)) else {
        return Ok(false);
    };
    let Ok(manifest) = serde_json::from_str::<Manifest>(&text) else {
        return Ok(false);
    };
    if manifest.seed != seed || manifest.generator_version != GENERATOR_VERSION {
        return Ok(false);
    }
    for entry in &manifest.files {
        let Ok(bytes) = fs::read(out.join(&entry.path)) else {
            return Ok(false);
        };
        if bytes.len() as u64 != entry.size || sha256_hex(&bytes) != entry.sha256 {
            return Ok(false);
        }
    }
    Ok(!manifest.files.is_empty())
}

/// The four models. The Qwen2.5-shaped one pads its embedding past the tokenizer (as Qwen2.5
/// does: 151936 rows for 151665 tokens), uses 3 layers and a wider MLP, so code that assumes
/// one shape for all is caught. Qwen3 and Gemma 3 have a head_dim that is not hidden / heads
/// (as Qwen3-0.6B's 128 against 1024 / 16), so q and o projections are not square.
fn specs() -> [(Spec, Layout); 4] {
    [
        (
            Spec {
                arch: Arch::Llama,
                name: "tiny-llama",
                hidden_size: 64,
                intermediate_size: 128,
                num_hidden_layers: 2,
                num_attention_heads: 4,
                num_key_value_heads: 2,
                head_dim: 16,
                rms_norm_eps: 1e-5,
                rope_theta: 10_000.0,
                max_position_embeddings: 2048,
                vocab_size: TOKENIZER_SIZE,
                tie_word_embeddings: false,
                qkv_bias: false,
                gemma3: None,
            },
            Layout::SmolLm2,
        ),
        (
            Spec {
                arch: Arch::Qwen2,
                name: "tiny-qwen2",
                hidden_size: 64,
                intermediate_size: 160,
                num_hidden_layers: 3,
                num_attention_heads: 4,
                num_key_value_heads: 2,
                head_dim: 16,
                rms_norm_eps: 1e-6,
                rope_theta: 1_000_000.0,
                max_position_embeddings: 32_768,
                vocab_size: TOKENIZER_SIZE + 64,
                tie_word_embeddings: true,
                qkv_bias: true,
                gemma3: None,
            },
            Layout::Qwen2,
        ),
        (
            Spec {
                arch: Arch::Qwen3,
                name: "tiny-qwen3",
                hidden_size: 64,
                intermediate_size: 192,
                num_hidden_layers: 3,
                num_attention_heads: 4,
                num_key_value_heads: 2,
                head_dim: 32,
                rms_norm_eps: 1e-6,
                rope_theta: 1_000_000.0,
                max_position_embeddings: 40_960,
                vocab_size: TOKENIZER_SIZE,
                tie_word_embeddings: true,
                qkv_bias: false,
                gemma3: None,
            },
            Layout::Qwen2,
        ),
        // Gemma 3 1B's shape scaled down: one key/value head, head_dim twice hidden / heads,
        // query_pre_attn_scalar at hidden / heads (as Gemma 3 27B's 168 against head_dim 128)
        // so an attention scaled by head_dim is caught. A window of 8 is far shorter than the
        // test sequences, and a pattern of 3 (not the default 6) over 5 layers makes layers 0,
        // 1, 3, 4 local and layer 2 global.
        (
            Spec {
                arch: Arch::Gemma3,
                name: "tiny-gemma3",
                hidden_size: 64,
                intermediate_size: 192,
                num_hidden_layers: 5,
                num_attention_heads: 4,
                num_key_value_heads: 1,
                head_dim: 32,
                rms_norm_eps: 1e-6,
                rope_theta: 1_000_000.0,
                max_position_embeddings: 32_768,
                vocab_size: TOKENIZER_SIZE,
                tie_word_embeddings: true,
                qkv_bias: false,
                gemma3: Some(Gemma3Spec {
                    sliding_window: 8,
                    sliding_window_pattern: 3,
                    rope_local_base_freq: 10_000.0,
                    query_pre_attn_scalar: 16,
                }),
            },
            Layout::SmolLm2,
        ),
    ]
}

/// The files of one run, each written atomically and recorded for the manifest.
struct Written<'a> {
    out: &'a Path,
    files: Vec<ManifestEntry>,
}

impl Written<'_> {
    /// Writes `bytes` to `rel` (relative to the output directory, `/`-separated).
    fn write(&mut self, rel: String, bytes: &[u8]) -> Result<()> {
        write_atomic(&self.out.join(&rel), bytes)?;
        self.files.push(ManifestEntry {
            path: rel,
            size: bytes.len() as u64,
            sha256: sha256_hex(bytes),
        });
        Ok(())
    }
}

/// Writes every fixture into `out` and the manifest last. Returns the manifest.
pub(crate) fn generate(out: &Path, seed: u64, verbose: bool) -> Result<Manifest> {
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let lines = corpus::training_lines();
    let mut written = Written {
        out,
        files: Vec::new(),
    };
    write_decoders(&mut written, &lines, seed, verbose)?;
    write_encoders(&mut written, &lines, seed, verbose)?;
    let mut files = written.files;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest {
        generator_version: GENERATOR_VERSION,
        seed,
        files,
    };
    write_atomic(
        &out.join(MANIFEST),
        &pretty(&serde_json::to_value(&manifest)?)?,
    )?;
    Ok(manifest)
}

fn write_decoders(
    written: &mut Written<'_>,
    lines: &[String],
    seed: u64,
    verbose: bool,
) -> Result<()> {
    // One training per layout: the models sharing a layout share its tokenizer.
    let smollm2 = tokenizer::train(Layout::SmolLm2, lines, TOKENIZER_SIZE)?;
    let qwen2 = tokenizer::train(Layout::Qwen2, lines, TOKENIZER_SIZE)?;
    for (spec, layout) in specs() {
        let started = Instant::now();
        let tok = match layout {
            Layout::SmolLm2 => &smollm2,
            Layout::Qwen2 => &qwen2,
        };
        let tensors = weights::hf_tensors(&spec, seed);
        let dir = written.out.join(spec.name);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut write =
            |name: &str, bytes: &[u8]| written.write(format!("{}/{name}", spec.name), bytes);
        write("config.json", &pretty(&config_json(&spec, tok))?)?;
        write(
            "generation_config.json",
            &pretty(&generation_config(&spec, tok))?,
        )?;
        write("tokenizer.json", tok.json.as_bytes())?;
        write(
            "tokenizer_config.json",
            &pretty(&tokenizer_config(&spec, tok))?,
        )?;
        write("model.safetensors", &weights::safetensors_bytes(&tensors)?)?;
        if spec.arch.writes_gguf() {
            written.write(
                format!("{}.gguf", spec.name),
                &gguf::gguf_bytes(&spec, tok, &tensors)?,
            )?;
        }
        if verbose {
            eprintln!(
                "fixtures: {} ({}, {} layers, hidden {}, vocab {} / tokenizer {}) in {} ms",
                spec.name,
                spec.arch.gguf_name(),
                spec.num_hidden_layers,
                spec.hidden_size,
                spec.vocab_size,
                tok.len(),
                started.elapsed().as_millis()
            );
        }
    }
    write_sentencepiece(written, lines, seed, verbose)?;
    write_qwen2vl(written, &qwen2, seed, verbose)
}

/// `tiny-llama-spm.gguf`: tiny-llama's weights under a SentencePiece vocabulary of its size.
fn write_sentencepiece(
    written: &mut Written<'_>,
    lines: &[String],
    seed: u64,
    verbose: bool,
) -> Result<()> {
    let started = Instant::now();
    let spec = specs()
        .into_iter()
        .map(|(spec, _)| spec)
        .find(|spec| spec.arch == Arch::Llama)
        .expect("the llama decoder is among the specs");
    let spm = sentencepiece::train(lines, spec.vocab_size)?;
    let tensors = weights::hf_tensors(&spec, seed);
    written.write(
        format!("{SENTENCEPIECE_NAME}.gguf"),
        &gguf::sentencepiece_gguf_bytes(&spec, &spm, &tensors)?,
    )?;
    if verbose {
        eprintln!(
            "fixtures: {SENTENCEPIECE_NAME} (llama, {}'s weights, {} SentencePiece pieces) in {} ms",
            spec.name,
            spm.tokens.len(),
            started.elapsed().as_millis()
        );
    }
    Ok(())
}

/// The text model of the tiny Qwen2-VL: tiny-qwen2's spec, so its weights (keyed by the spec's
/// name) are tiny-qwen2's too.
fn qwen2vl_text_spec() -> Spec {
    specs()
        .into_iter()
        .map(|(spec, _)| spec)
        .find(|spec| spec.arch == Arch::Qwen2)
        .expect("the qwen2 decoder is among the specs")
}

/// `tiny-qwen2vl.gguf` (tiny-qwen2 as llama.cpp's `qwen2vl`, with the vision tokens) and
/// `tiny-qwen2vl-mmproj.gguf` (the `qwen2vl_merger` vision projector clip.cpp loads).
fn write_qwen2vl(
    written: &mut Written<'_>,
    tok: &TrainedTokenizer,
    seed: u64,
    verbose: bool,
) -> Result<()> {
    let started = Instant::now();
    let spec = qwen2vl_text_spec();
    let text = weights::hf_tensors(&spec, seed);
    written.write(
        format!("{}.gguf", qwen2vl::TEXT_NAME),
        &qwen2vl::text_gguf_bytes(&spec, tok, &text)?,
    )?;
    let vision = qwen2vl::vision_spec(spec.hidden_size);
    written.write(
        format!("{}.gguf", qwen2vl::MMPROJ_NAME),
        &qwen2vl::mmproj_gguf_bytes(&vision, seed)?,
    )?;
    if verbose {
        eprintln!(
            "fixtures: {} ({}, tiny-qwen2's weights) and {} ({}, {} blocks, width {}) in {} ms",
            qwen2vl::TEXT_NAME,
            qwen2vl::TEXT_ARCH,
            qwen2vl::MMPROJ_NAME,
            qwen2vl::PROJECTOR_TYPE,
            vision.depth,
            vision.embed_dim,
            started.elapsed().as_millis()
        );
    }
    Ok(())
}

/// The encoders: `config.json`, `model.safetensors` and the shared WordPiece `tokenizer.json`.
fn write_encoders(
    written: &mut Written<'_>,
    lines: &[String],
    seed: u64,
    verbose: bool,
) -> Result<()> {
    let tok = wordpiece::build(lines, WORDPIECE_SIZE)?;
    for spec in encoder::specs(tok.len()) {
        let started = Instant::now();
        let dir = written.out.join(spec.name);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let tensors = encoder::hf_tensors(&spec, seed);
        let mut write =
            |name: &str, bytes: &[u8]| written.write(format!("{}/{name}", spec.name), bytes);
        write("config.json", &pretty(&encoder::config_json(&spec, &tok))?)?;
        write("tokenizer.json", tok.json.as_bytes())?;
        write("model.safetensors", &weights::safetensors_bytes(&tensors)?)?;
        if verbose {
            eprintln!(
                "fixtures: {} ({} layers, hidden {}, vocab {} / tokenizer {}) in {} ms",
                spec.name,
                spec.num_hidden_layers,
                spec.hidden_size,
                spec.vocab_size,
                tok.len(),
                started.elapsed().as_millis()
            );
        }
    }
    Ok(())
}

fn pretty(value: &serde_json::Value) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// [`ruling_models::files::write_atomic`], naming the file when it fails.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    ruling_models::files::write_atomic(path, bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// `config.json` as `save_pretrained` writes it for the architecture.
fn config_json(spec: &Spec, tok: &TrainedTokenizer) -> serde_json::Value {
    match spec.arch {
        Arch::Llama => json!({
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": false,
            "attention_dropout": 0.0,
            "bos_token_id": tok.im_start,
            "eos_token_id": tok.im_end,
            "head_dim": spec.head_dim,
            "hidden_act": "silu",
            "hidden_size": spec.hidden_size,
            "initializer_range": weights::INIT_STD,
            "intermediate_size": spec.intermediate_size,
            "max_position_embeddings": spec.max_position_embeddings,
            "mlp_bias": false,
            "model_type": "llama",
            "num_attention_heads": spec.num_attention_heads,
            "num_hidden_layers": spec.num_hidden_layers,
            "num_key_value_heads": spec.num_key_value_heads,
            "pad_token_id": tok.im_end,
            "pretraining_tp": 1,
            "rms_norm_eps": spec.rms_norm_eps,
            "rope_scaling": null,
            "rope_theta": spec.rope_theta,
            "tie_word_embeddings": spec.tie_word_embeddings,
            "torch_dtype": "float32",
            "transformers_version": "4.46.0",
            "use_cache": true,
            "vocab_size": spec.vocab_size,
        }),
        // Qwen2's config has no head_dim: it is hidden_size / num_attention_heads.
        Arch::Qwen2 => json!({
            "architectures": ["Qwen2ForCausalLM"],
            "attention_dropout": 0.0,
            "bos_token_id": tok.endoftext,
            "eos_token_id": tok.im_end,
            "hidden_act": "silu",
            "hidden_size": spec.hidden_size,
            "initializer_range": weights::INIT_STD,
            "intermediate_size": spec.intermediate_size,
            "max_position_embeddings": spec.max_position_embeddings,
            "max_window_layers": spec.num_hidden_layers,
            "model_type": "qwen2",
            "num_attention_heads": spec.num_attention_heads,
            "num_hidden_layers": spec.num_hidden_layers,
            "num_key_value_heads": spec.num_key_value_heads,
            "rms_norm_eps": spec.rms_norm_eps,
            "rope_scaling": null,
            "rope_theta": spec.rope_theta,
            "sliding_window": spec.max_position_embeddings,
            "tie_word_embeddings": spec.tie_word_embeddings,
            "torch_dtype": "float32",
            "transformers_version": "4.46.0",
            "use_cache": true,
            "use_sliding_window": false,
            "vocab_size": spec.vocab_size,
        }),
        // Qwen3-0.6B's config.json (transformers 4.51): head_dim explicit, no biases.
        Arch::Qwen3 => json!({
            "architectures": ["Qwen3ForCausalLM"],
            "attention_bias": false,
            "attention_dropout": 0.0,
            "bos_token_id": tok.endoftext,
            "eos_token_id": tok.im_end,
            "head_dim": spec.head_dim,
            "hidden_act": "silu",
            "hidden_size": spec.hidden_size,
            "initializer_range": weights::INIT_STD,
            "intermediate_size": spec.intermediate_size,
            "max_position_embeddings": spec.max_position_embeddings,
            "max_window_layers": spec.num_hidden_layers,
            "model_type": "qwen3",
            "num_attention_heads": spec.num_attention_heads,
            "num_hidden_layers": spec.num_hidden_layers,
            "num_key_value_heads": spec.num_key_value_heads,
            "rms_norm_eps": spec.rms_norm_eps,
            "rope_scaling": null,
            "rope_theta": spec.rope_theta,
            "sliding_window": null,
            "tie_word_embeddings": spec.tie_word_embeddings,
            "torch_dtype": "float32",
            "transformers_version": "4.51.0",
            "use_cache": true,
            "use_sliding_window": false,
            "vocab_size": spec.vocab_size,
        }),
        // Gemma 3 1B's text config (transformers 4.50, `Gemma3TextConfig`). It has no
        // `tie_word_embeddings`: the default (tied) is left out by `save_pretrained`.
        Arch::Gemma3 => {
            let g = spec
                .gemma3
                .as_ref()
                .expect("a Gemma 3 spec has its Gemma 3 fields");
            json!({
                "architectures": ["Gemma3ForCausalLM"],
                "attention_bias": false,
                "attention_dropout": 0.0,
                "attn_logit_softcapping": null,
                "bos_token_id": tok.im_start,
                "cache_implementation": "hybrid",
                "eos_token_id": [tok.im_end, tok.endoftext],
                "final_logit_softcapping": null,
                "head_dim": spec.head_dim,
                "hidden_activation": "gelu_pytorch_tanh",
                "hidden_size": spec.hidden_size,
                "initializer_range": weights::INIT_STD,
                "intermediate_size": spec.intermediate_size,
                "max_position_embeddings": spec.max_position_embeddings,
                "model_type": "gemma3_text",
                "num_attention_heads": spec.num_attention_heads,
                "num_hidden_layers": spec.num_hidden_layers,
                "num_key_value_heads": spec.num_key_value_heads,
                "pad_token_id": tok.endoftext,
                "query_pre_attn_scalar": g.query_pre_attn_scalar,
                "rms_norm_eps": spec.rms_norm_eps,
                "rope_local_base_freq": g.rope_local_base_freq,
                "rope_scaling": null,
                "rope_theta": spec.rope_theta,
                "sliding_window": g.sliding_window,
                "sliding_window_pattern": g.sliding_window_pattern,
                "torch_dtype": "float32",
                "transformers_version": "4.50.0",
                "use_cache": true,
                "vocab_size": spec.vocab_size,
            })
        }
    }
}

fn generation_config(spec: &Spec, tok: &TrainedTokenizer) -> serde_json::Value {
    match spec.arch {
        Arch::Llama => json!({
            "bos_token_id": tok.im_start,
            "eos_token_id": tok.im_end,
            "pad_token_id": tok.im_end,
            "transformers_version": "4.46.0",
        }),
        // Qwen lists two end tokens, a shape the engine has to accept.
        Arch::Qwen2 => json!({
            "bos_token_id": tok.endoftext,
            "do_sample": true,
            "eos_token_id": [tok.im_end, tok.endoftext],
            "pad_token_id": tok.endoftext,
            "repetition_penalty": 1.1,
            "temperature": 0.7,
            "top_k": 20,
            "top_p": 0.8,
            "transformers_version": "4.46.0",
        }),
        Arch::Qwen3 => json!({
            "bos_token_id": tok.endoftext,
            "do_sample": true,
            "eos_token_id": [tok.im_end, tok.endoftext],
            "pad_token_id": tok.endoftext,
            "temperature": 0.6,
            "top_k": 20,
            "top_p": 0.95,
            "transformers_version": "4.51.0",
        }),
        Arch::Gemma3 => json!({
            "bos_token_id": tok.im_start,
            "cache_implementation": "hybrid",
            "do_sample": true,
            "eos_token_id": [tok.im_end, tok.endoftext],
            "pad_token_id": tok.endoftext,
            "top_k": 64,
            "top_p": 0.95,
            "transformers_version": "4.50.0",
        }),
    }
}

fn tokenizer_config(spec: &Spec, tok: &TrainedTokenizer) -> serde_json::Value {
    let mut added = serde_json::Map::new();
    for (id, content) in [
        (tok.endoftext, tokenizer::ENDOFTEXT),
        (tok.im_start, tokenizer::IM_START),
        (tok.im_end, tokenizer::IM_END),
    ] {
        added.insert(
            id.to_string(),
            json!({
                "content": content,
                "lstrip": false,
                "normalized": false,
                "rstrip": false,
                "single_word": false,
                "special": true,
            }),
        );
    }
    // Qwen3 shares Qwen2.5's tokenizer; the Gemma 3 fixture reuses the SmolLM2-layout one
    // (its own 262k-entry vocabulary is beside the point of a random-weight model).
    match spec.arch {
        Arch::Llama | Arch::Gemma3 => json!({
            "add_bos_token": false,
            "add_prefix_space": false,
            "added_tokens_decoder": added,
            "additional_special_tokens": [tokenizer::IM_START, tokenizer::IM_END],
            "bos_token": tokenizer::IM_START,
            "chat_template": templates::SMOLLM2,
            "clean_up_tokenization_spaces": false,
            "eos_token": tokenizer::IM_END,
            "model_max_length": spec.max_position_embeddings,
            "pad_token": tokenizer::IM_END,
            "tokenizer_class": "GPT2Tokenizer",
            "unk_token": tokenizer::ENDOFTEXT,
            "vocab_size": tok.len(),
        }),
        // Qwen has no BOS token at all (null), and <|endoftext|> pads.
        Arch::Qwen2 | Arch::Qwen3 => json!({
            "add_bos_token": false,
            "add_prefix_space": false,
            "added_tokens_decoder": added,
            "additional_special_tokens": [tokenizer::IM_START, tokenizer::IM_END],
            "bos_token": null,
            "chat_template": templates::QWEN2,
            "clean_up_tokenization_spaces": false,
            "eos_token": tokenizer::IM_END,
            "errors": "replace",
            "model_max_length": spec.max_position_embeddings,
            "pad_token": tokenizer::ENDOFTEXT,
            "split_special_tokens": false,
            "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": null,
        }),
    }
}
