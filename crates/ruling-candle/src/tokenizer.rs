//! Text to token ids and back, for the decoders this crate runs.
//!
//! A model arrives either as a GGUF file, whose metadata carries the vocabulary
//! (`tokenizer.ggml.*`) but no `tokenizer.json`, or as a Hugging Face directory with its own
//! `tokenizer.json`. [`TextTokenizer`] wraps a `tokenizers::Tokenizer` built from either.
//!
//! From GGUF, only byte-level BPE vocabularies (`tokenizer.ggml.model = "gpt2"`, which covers
//! SmolLM, Qwen2/2.5/3, Llama 3 and the other GPT-2 descendants) are supported. llama.cpp is
//! the reference for what a GGUF vocabulary means, so the pre-tokenizer is chosen the way
//! `llama-vocab.cpp` chooses it from `tokenizer.ggml.pre`: the same split regexes, applied in
//! the same order, then the byte-level mapping without its own regex. Like llama.cpp (and
//! unlike Qwen's `tokenizer.json`), no Unicode normalisation is applied.
//!
//! [`TextTokenizer::encode`] never adds special tokens of its own: BOS, turn markers and the
//! like are the chat template's business. Special tokens written in the text (`<|im_start|>`)
//! are recognised and encode to their single id, as llama.cpp does with `special = true`.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

/// GGUF metadata keys read here, as llama.cpp's converter writes them.
pub mod keys {
    pub const MODEL: &str = "tokenizer.ggml.model";
    pub const PRE: &str = "tokenizer.ggml.pre";
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    pub const MERGES: &str = "tokenizer.ggml.merges";
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    pub const BOS: &str = "tokenizer.ggml.bos_token_id";
    pub const EOS: &str = "tokenizer.ggml.eos_token_id";
    pub const PAD: &str = "tokenizer.ggml.padding_token_id";
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
    pub const SCORES: &str = "tokenizer.ggml.scores";
    pub const UNKNOWN: &str = "tokenizer.ggml.unknown_token_id";
    pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
}

/// The `tokenizer.ggml.model` values this crate builds tokenizers for.
pub const SUPPORTED_MODELS: &str =
    "\"gpt2\" (byte-level BPE), \"llama\" (SentencePiece BPE with byte fallback)";

/// Why a tokenizer could not be built or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    #[error("the GGUF metadata lacks {key:?}, which a tokenizer needs")]
    MissingKey { key: &'static str },
    #[error("GGUF metadata {key:?} should be {expected}, found {found}")]
    WrongType {
        key: &'static str,
        expected: &'static str,
        found: String,
    },
    #[error(
        "tokenizer model {model:?} is not supported; supported: {SUPPORTED_MODELS} \
         (WordPiece \"bert\", SentencePiece unigram \"t5\" and the others are not)"
    )]
    Unsupported { model: String },
    #[error("pre-tokenizer {pre:?} (tokenizer.ggml.pre) is not supported; supported: {supported}")]
    UnsupportedPre { pre: String, supported: String },
    #[error("GGUF merge {index} ({merge:?}) is not two tokens separated by a space")]
    BadMerge { index: usize, merge: String },
    #[error("{what} id {id} is outside the vocabulary of {vocab_size} tokens")]
    IdOutOfRange {
        what: &'static str,
        id: u32,
        vocab_size: usize,
    },
    #[error("{what} {token:?} is not in the vocabulary")]
    UnknownToken { what: &'static str, token: String },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot load tokenizer {path}: {source}")]
    Load {
        path: PathBuf,
        #[source]
        source: tokenizers::Error,
    },
    #[error("cannot build the tokenizer: {source}")]
    Build {
        #[source]
        source: tokenizers::Error,
    },
    #[error("cannot encode text: {source}")]
    Encode {
        #[source]
        source: tokenizers::Error,
    },
    #[error("cannot decode ids: {source}")]
    Decode {
        #[source]
        source: tokenizers::Error,
    },
}

/// A model's tokenizer and its special token ids.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    vocab_size: usize,
    bos: Option<u32>,
    eos: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    /// How text that continues a prompt is tokenized, where that differs from a whole text's
    /// start (a SentencePiece vocabulary that puts `▁` before a text); `None`: the same.
    continuation: Option<Continuation>,
}

/// A SentencePiece vocabulary with `add_space_prefix` puts `▁` before a text and after each
/// special token, as llama.cpp does. Text that continues a prompt gets none at its start (a
/// prompt cut anywhere but after a special token would otherwise gain a space at the cut),
/// but does after its own special tokens: it is tokenized without the prefix up to its first
/// special token, and as a whole text from there.
#[derive(Clone)]
struct Continuation {
    /// The vocabulary without the prefix, for the part before the first special token.
    bare: tokenizers::Tokenizer,
    /// The added tokens' text, which split a text before any piece does.
    added: Vec<String>,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("pad", &self.pad)
            .field("add_bos", &self.add_bos)
            .finish_non_exhaustive()
    }
}

// llama.cpp token types (`llama_token_type`), as `tokenizer.ggml.token_type` stores them.
const TOKEN_TYPE_UNKNOWN: i64 = 2;
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// The GPT-2 split regex. llama.cpp drops the trailing `|\s+` of the tokenizer.json form;
/// characters no alternative matches stay pieces of their own either way.
const GPT2_REGEX: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Qwen2's regex, with llama.cpp's case-insensitive contractions spelled out.
const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's regex: Qwen2's with digits in groups of up to three.
const LLAMA3_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The byte-level pre-tokenizer families, named after llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PreTokenizer {
    /// `LLAMA_VOCAB_PRE_TYPE_DEFAULT`: a missing `pre` or `"default"`.
    Default,
    /// `LLAMA_VOCAB_PRE_TYPE_GPT2`.
    Gpt2,
    /// `LLAMA_VOCAB_PRE_TYPE_SMOLLM` and the other "digits singly, then GPT-2" types.
    Smollm,
    /// `LLAMA_VOCAB_PRE_TYPE_QWEN2`.
    Qwen2,
    /// `LLAMA_VOCAB_PRE_TYPE_LLAMA3` (which llama.cpp runs with `ignore_merges`).
    Llama3,
}

/// `tokenizer.ggml.pre` values and the family llama.cpp (`llama_vocab::impl::load`) maps
/// each one to; only families whose regexes are implemented here are listed.
const PRE_NAMES: &[(&str, PreTokenizer)] = &[
    ("default", PreTokenizer::Default),
    ("gpt-2", PreTokenizer::Gpt2),
    ("gpt2", PreTokenizer::Gpt2),
    ("phi-2", PreTokenizer::Gpt2),
    ("mpt", PreTokenizer::Gpt2),
    ("olmo", PreTokenizer::Gpt2),
    ("jais", PreTokenizer::Gpt2),
    ("smollm", PreTokenizer::Smollm),
    ("starcoder", PreTokenizer::Smollm),
    ("refact", PreTokenizer::Smollm),
    ("command-r", PreTokenizer::Smollm),
    ("codeshell", PreTokenizer::Smollm),
    ("exaone", PreTokenizer::Smollm),
    ("minerva-7b", PreTokenizer::Smollm),
    ("qwen2", PreTokenizer::Qwen2),
    ("deepseek-r1-qwen", PreTokenizer::Qwen2),
    ("stablelm2", PreTokenizer::Qwen2),
    ("megrez", PreTokenizer::Qwen2),
    ("llama3", PreTokenizer::Llama3),
    ("llama-v3", PreTokenizer::Llama3),
    ("llama-bpe", PreTokenizer::Llama3),
    ("falcon3", PreTokenizer::Llama3),
    ("dbrx", PreTokenizer::Llama3),
    ("smaug-bpe", PreTokenizer::Llama3),
];

impl PreTokenizer {
    fn from_gguf(pre: Option<&str>) -> Result<Self, TokenizerError> {
        let Some(pre) = pre else {
            return Ok(Self::Default);
        };
        PRE_NAMES
            .iter()
            .find(|(name, _)| *name == pre)
            .map(|(_, family)| *family)
            .ok_or_else(|| TokenizerError::UnsupportedPre {
                pre: pre.to_owned(),
                supported: PRE_NAMES
                    .iter()
                    .map(|(name, _)| format!("{name:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The split regexes, each applied to the pieces the previous one left (llama.cpp's
    /// `regex_exprs` for this type, copied from `llm_tokenizer_bpe`'s constructor).
    fn regexes(self) -> &'static [&'static str] {
        match self {
            Self::Default => &[
                r"[\p{P}\$\+<=>\^~\|]+",
                GPT2_REGEX,
                r"\p{N}+",
                "[0-9][0-9][0-9]",
            ],
            Self::Gpt2 => &[GPT2_REGEX],
            Self::Smollm => &[r"\p{N}", GPT2_REGEX],
            Self::Qwen2 => &[QWEN2_REGEX],
            Self::Llama3 => &[LLAMA3_REGEX],
        }
    }

    /// Llama 3 vocabularies contain whole words the merges would not build; llama.cpp looks
    /// a piece up in the vocabulary before merging (`ignore_merges`).
    fn ignore_merges(self) -> bool {
        self == Self::Llama3
    }
}

fn metadata<'a>(content: &'a Content, key: &'static str) -> Result<&'a Value, TokenizerError> {
    content
        .metadata
        .get(key)
        .ok_or(TokenizerError::MissingKey { key })
}

fn wrong_type(key: &'static str, expected: &'static str, found: &Value) -> TokenizerError {
    TokenizerError::WrongType {
        key,
        expected,
        found: format!("{:?}", found.value_type()),
    }
}

fn as_str<'a>(key: &'static str, value: &'a Value) -> Result<&'a str, TokenizerError> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(wrong_type(key, "a string", other)),
    }
}

fn as_int(key: &'static str, value: &Value) -> Result<i64, TokenizerError> {
    match *value {
        Value::U8(v) => Ok(v.into()),
        Value::I8(v) => Ok(v.into()),
        Value::U16(v) => Ok(v.into()),
        Value::I16(v) => Ok(v.into()),
        Value::U32(v) => Ok(v.into()),
        Value::I32(v) => Ok(v.into()),
        Value::I64(v) => Ok(v),
        Value::U64(v) => i64::try_from(v).map_err(|_| wrong_type(key, "an integer", value)),
        ref other => Err(wrong_type(key, "an integer", other)),
    }
}

fn as_array<'a>(key: &'static str, value: &'a Value) -> Result<&'a [Value], TokenizerError> {
    match value {
        Value::Array(values) => Ok(values),
        other => Err(wrong_type(key, "an array", other)),
    }
}

fn string_array<'a>(
    content: &'a Content,
    key: &'static str,
) -> Result<Vec<&'a str>, TokenizerError> {
    as_array(key, metadata(content, key)?)?
        .iter()
        .map(|v| as_str(key, v))
        .collect()
}

/// An optional special-token id, checked against the vocabulary.
fn optional_id(
    content: &Content,
    key: &'static str,
    vocab_size: usize,
) -> Result<Option<u32>, TokenizerError> {
    let Some(value) = content.metadata.get(key) else {
        return Ok(None);
    };
    let id = as_int(key, value)?;
    match u32::try_from(id) {
        Ok(id) if (id as usize) < vocab_size => Ok(Some(id)),
        _ => Err(TokenizerError::IdOutOfRange {
            what: key,
            id: id.clamp(0, u32::MAX.into()) as u32,
            vocab_size,
        }),
    }
}

/// A GGUF merge is `"left right"`; llama.cpp splits at the first space after the first byte.
fn split_merge(index: usize, merge: &str) -> Result<(String, String), TokenizerError> {
    let bad = || TokenizerError::BadMerge {
        index,
        merge: merge.to_owned(),
    };
    let first_len = merge.chars().next().ok_or_else(bad)?.len_utf8();
    let at = merge[first_len..].find(' ').ok_or_else(bad)? + first_len;
    Ok((merge[..at].to_owned(), merge[at + 1..].to_owned()))
}

impl TextTokenizer {
    /// Builds the tokenizer a GGUF file describes in its `tokenizer.ggml.*` metadata.
    pub fn from_gguf(content: &Content) -> Result<Self, TokenizerError> {
        let model = as_str(keys::MODEL, metadata(content, keys::MODEL)?)?;
        match model {
            "gpt2" => {}
            "llama" => return Self::from_gguf_sentencepiece(content),
            other => {
                return Err(TokenizerError::Unsupported {
                    model: other.to_owned(),
                });
            }
        }
        let pre = content
            .metadata
            .get(keys::PRE)
            .map(|v| as_str(keys::PRE, v))
            .transpose()?;
        let pre = PreTokenizer::from_gguf(pre)?;

        let tokens = string_array(content, keys::TOKENS)?;
        let vocab_size = tokens.len();
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, token)| ((*token).to_owned(), id as u32))
            .collect();
        let merges = string_array(content, keys::MERGES)?
            .into_iter()
            .enumerate()
            .map(|(index, merge)| split_merge(index, merge))
            .collect::<Result<Vec<_>, _>>()?;

        let added = added_tokens(content, &tokens)?;

        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(pre.ignore_merges())
            .build()
            .map_err(|source| TokenizerError::Build { source })?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner
            .with_pre_tokenizer(Some(pre_tokenizer(&pre)?))
            .with_decoder(Some(ByteLevelDecoder::new(false, false, false)));
        // Every one of these is already in the BPE vocabulary, so each keeps its GGUF id.
        Self::finish_gguf(content, inner, added, vocab_size, None)
    }

    /// The GGUF's control and user-defined tokens added to `inner` (each keeps its id), and
    /// the BOS/EOS/PAD ids and `add_bos_token` read from the metadata.
    fn finish_gguf(
        content: &Content,
        mut inner: tokenizers::Tokenizer,
        added: Vec<AddedToken>,
        vocab_size: usize,
        continuation: Option<Continuation>,
    ) -> Result<Self, TokenizerError> {
        let (specials, plain): (Vec<AddedToken>, Vec<AddedToken>) =
            added.into_iter().partition(|t| t.special);
        inner
            .add_special_tokens(specials)
            .map_err(|source| TokenizerError::Build { source })?;
        inner
            .add_tokens(plain)
            .map_err(|source| TokenizerError::Build { source })?;
        let add_bos = match content.metadata.get(keys::ADD_BOS) {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(wrong_type(keys::ADD_BOS, "a bool", other)),
        };
        Ok(Self {
            bos: optional_id(content, keys::BOS, vocab_size)?,
            eos: optional_id(content, keys::EOS, vocab_size)?,
            pad: optional_id(content, keys::PAD, vocab_size)?,
            add_bos,
            vocab_size,
            inner,
            continuation,
        })
    }

    /// A SentencePiece BPE vocabulary (`tokenizer.ggml.model = "llama"`: Llama 2, Mistral,
    /// Gemma, Phi-3): pieces with scores, spaces as `▁`, bytes no piece covers as `<0xNN>`
    /// pieces. Its merges are what the scores imply, derived as Hugging Face's converter does
    /// (`SentencePieceExtractor`): every split of a piece into two pieces of the vocabulary is
    /// a merge, ranked by the piece's score, ties by the two halves' ids; so this builds the
    /// same tokenizer as the model's own `tokenizer.json`. `tokenizer.ggml.add_space_prefix`
    /// says whether a `▁` goes before the text, as SentencePiece's `add_dummy_prefix` does.
    fn from_gguf_sentencepiece(content: &Content) -> Result<Self, TokenizerError> {
        let tokens = string_array(content, keys::TOKENS)?;
        let vocab_size = tokens.len();
        let scores: Vec<f32> = as_array(keys::SCORES, metadata(content, keys::SCORES)?)?
            .iter()
            .map(|v| match v {
                Value::F32(f) => Ok(*f),
                Value::F64(f) => Ok(*f as f32),
                other => Err(wrong_type(keys::SCORES, "an array of floats", other)),
            })
            .collect::<Result<_, _>>()?;
        if scores.len() != vocab_size {
            return Err(TokenizerError::WrongType {
                key: keys::SCORES,
                expected: "one score per token",
                found: format!("{} scores for {vocab_size} tokens", scores.len()),
            });
        }
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, token)| ((*token).to_owned(), id as u32))
            .collect();
        let merges = sentencepiece_merges(&tokens, &scores, &vocab);
        let unknown = optional_id(content, keys::UNKNOWN, vocab_size)?
            .map(|id| tokens[id as usize].to_owned());
        let mut builder = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .byte_fallback(true)
            .fuse_unk(true);
        if let Some(unknown) = unknown {
            builder = builder.unk_token(unknown);
        }
        let bpe = builder
            .build()
            .map_err(|source| TokenizerError::Build { source })?;
        let add_space_prefix = match content.metadata.get(keys::ADD_SPACE_PREFIX) {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(wrong_type(keys::ADD_SPACE_PREFIX, "a bool", other)),
        };
        let mut normalizers: Vec<tokenizers::NormalizerWrapper> = Vec::new();
        if add_space_prefix {
            normalizers.push(tokenizers::normalizers::Prepend::new("▁".to_owned()).into());
        }
        normalizers.push(
            tokenizers::normalizers::Replace::new(" ", "▁")
                .map_err(|source| TokenizerError::Build { source })?
                .into(),
        );
        let mut decoders: Vec<tokenizers::DecoderWrapper> = vec![
            tokenizers::normalizers::Replace::new("▁", " ")
                .map_err(|source| TokenizerError::Build { source })?
                .into(),
        ];
        decoders.push(tokenizers::decoders::byte_fallback::ByteFallback::default().into());
        decoders.push(tokenizers::decoders::fuse::Fuse::default().into());
        if add_space_prefix {
            decoders.push(tokenizers::decoders::strip::Strip::new(' ', 1, 0).into());
        }
        let added = added_tokens(content, &tokens)?;
        let continuation = if add_space_prefix {
            let mut bare = tokenizers::Tokenizer::new(bpe.clone());
            bare.with_normalizer(Some(
                tokenizers::normalizers::Replace::new(" ", "▁")
                    .map_err(|source| TokenizerError::Build { source })?,
            ))
            .map_err(|source| TokenizerError::Build { source })?;
            Some(Continuation {
                bare,
                added: added.iter().map(|t| t.content.clone()).collect(),
            })
        } else {
            None
        };
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner
            .with_normalizer(Some(tokenizers::normalizers::Sequence::new(normalizers)))
            .map_err(|source| TokenizerError::Build { source })?
            .with_decoder(Some(tokenizers::decoders::sequence::Sequence::new(
                decoders,
            )));
        Self::finish_gguf(content, inner, added, vocab_size, continuation)
    }

    /// Loads a Hugging Face tokenizer directory: its `tokenizer.json`, and from
    /// `tokenizer_config.json` (when present) the BOS/EOS/PAD tokens and `add_bos_token`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let dir = dir.as_ref();
        let path = dir.join("tokenizer.json");
        let mut inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|source| TokenizerError::Load { path, source })?;
        // Encoding here is of one text, exactly; batching and limits are the engine's.
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|source| TokenizerError::Build { source })?;

        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = match std::fs::read(&config_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| TokenizerError::Json {
                path: config_path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Value::Null,
            Err(source) => {
                return Err(TokenizerError::Io {
                    path: config_path,
                    source,
                });
            }
        };
        let special = |what: &'static str| -> Result<Option<u32>, TokenizerError> {
            // Either a plain string or an AddedToken object with a "content" field.
            let token = match config.get(what) {
                Some(serde_json::Value::String(s)) => s.as_str(),
                Some(serde_json::Value::Object(o)) => {
                    match o.get("content").and_then(|c| c.as_str()) {
                        Some(s) => s,
                        None => return Ok(None),
                    }
                }
                _ => return Ok(None),
            };
            inner
                .token_to_id(token)
                .map(Some)
                .ok_or_else(|| TokenizerError::UnknownToken {
                    what,
                    token: token.to_owned(),
                })
        };
        let bos = special("bos_token")?;
        let eos = special("eos_token")?;
        let pad = special("pad_token")?;
        let add_bos = config
            .get("add_bos_token")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        let vocab_size = inner.get_vocab_size(true);
        Ok(Self {
            inner,
            vocab_size,
            bos,
            eos,
            pad,
            add_bos,
            continuation: None,
        })
    }

    /// The ids of `text`, adding no special tokens but recognising those written in it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(|source| TokenizerError::Encode { source })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The ids of `text` where it continues a prompt rather than starts one. The same as
    /// [`Self::encode`] but for a SentencePiece vocabulary that puts `▁` before a text, whose
    /// continuation gets none before its first special token: so a
    /// prompt encoded in parts is the prompt encoded whole when the cut is not after a special
    /// token.
    pub fn encode_continuation(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let Some(continuation) = &self.continuation else {
            return self.encode(text);
        };
        let cut = continuation
            .added
            .iter()
            .filter_map(|token| text.find(token.as_str()))
            .min()
            .unwrap_or(text.len());
        let mut ids = continuation
            .bare
            .encode_fast(&text[..cut], false)
            .map_err(|source| TokenizerError::Encode { source })?
            .get_ids()
            .to_vec();
        ids.extend(self.encode(&text[cut..])?);
        Ok(ids)
    }

    /// The text of `ids`, special tokens included as written.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, false)
            .map_err(|source| TokenizerError::Decode { source })
    }

    /// The id of one vocabulary entry, written as the vocabulary writes it (byte-level
    /// BPE spells a leading space `Ġ`), or a special token.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary entry of `id`, as the vocabulary writes it.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Number of ids in the vocabulary: from GGUF, every listed token (padding entries
    /// included); from a directory, the model vocabulary plus added tokens.
    /// An upper bound on the bytes of text one token stands for: the longest vocabulary entry
    /// as written (a byte-level entry spells each byte as one or two UTF-8 bytes, so its
    /// length is never below the bytes it decodes to).
    pub fn max_token_bytes(&self) -> usize {
        self.inner
            .get_vocab(true)
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(0)
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }

    /// Whether the model expects a BOS token before the text; the template or engine adds it.
    pub fn add_bos_token(&self) -> bool {
        self.add_bos
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// The tokens llama.cpp matches in raw text before pre-tokenizing (its
/// `cache_special_tokens`): control and unknown ones as special, user-defined ones as plain.
fn added_tokens(content: &Content, tokens: &[&str]) -> Result<Vec<AddedToken>, TokenizerError> {
    let Some(types) = content.metadata.get(keys::TOKEN_TYPE) else {
        return Ok(Vec::new());
    };
    let mut added = Vec::new();
    for (token, ty) in tokens.iter().zip(as_array(keys::TOKEN_TYPE, types)?) {
        match as_int(keys::TOKEN_TYPE, ty)? {
            TOKEN_TYPE_CONTROL | TOKEN_TYPE_UNKNOWN => {
                added.push(AddedToken::from(*token, true).normalized(false));
            }
            TOKEN_TYPE_USER_DEFINED => {
                added.push(AddedToken::from(*token, false).normalized(false));
            }
            _ => {}
        }
    }
    Ok(added)
}

/// The merges a SentencePiece BPE vocabulary's scores imply (Hugging Face's
/// `SentencePieceExtractor`): for each piece, in id order, every split into two pieces of the
/// vocabulary, those ordered by the halves' ids; then all of them ordered by the whole piece's
/// score, highest first, a stable sort keeping the id order among equal scores.
fn sentencepiece_merges(
    tokens: &[&str],
    scores: &[f32],
    vocab: &tokenizers::models::bpe::Vocab,
) -> Vec<(String, String)> {
    let mut merges: Vec<(u32, u32, f32)> = Vec::new();
    for (piece, &score) in tokens.iter().zip(scores) {
        let mut local: Vec<(u32, u32)> = piece
            .char_indices()
            .skip(1)
            .filter_map(|(at, _)| {
                let left = vocab.get(&piece[..at])?;
                let right = vocab.get(&piece[at..])?;
                Some((*left, *right))
            })
            .collect();
        local.sort_unstable();
        merges.extend(local.into_iter().map(|(l, r)| (l, r, score)));
    }
    merges.sort_by(|a, b| b.2.total_cmp(&a.2));
    merges
        .into_iter()
        .map(|(l, r, _)| (tokens[l as usize].to_owned(), tokens[r as usize].to_owned()))
        .collect()
}

/// The pre-tokenizer's regex splits, each piece isolated, then GPT-2's byte-level mapping.
fn pre_tokenizer(pre: &PreTokenizer) -> Result<Sequence, TokenizerError> {
    let mut splits: Vec<PreTokenizerWrapper> = Vec::new();
    for regex in pre.regexes() {
        let split = Split::new(
            SplitPattern::Regex((*regex).to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|source| TokenizerError::Build { source })?;
        splits.push(split.into());
    }
    splits.push(ByteLevel::new(false, false, false).into());
    Ok(Sequence::new(splits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_split_at_the_first_space_after_the_first_char() {
        assert_eq!(
            split_merge(0, "Ġ t").unwrap(),
            ("Ġ".to_owned(), "t".to_owned())
        );
        assert_eq!(
            split_merge(0, "a b c").unwrap(),
            ("a".to_owned(), "b c".to_owned())
        );
        assert!(matches!(
            split_merge(3, "ab"),
            Err(TokenizerError::BadMerge { index: 3, .. })
        ));
        assert!(split_merge(0, "").is_err());
    }

    #[test]
    fn pre_names_map_like_llama_cpp() {
        assert_eq!(
            PreTokenizer::from_gguf(Some("smollm")).unwrap(),
            PreTokenizer::Smollm
        );
        assert_eq!(
            PreTokenizer::from_gguf(Some("qwen2")).unwrap(),
            PreTokenizer::Qwen2
        );
        assert_eq!(
            PreTokenizer::from_gguf(None).unwrap(),
            PreTokenizer::Default
        );
        let err = PreTokenizer::from_gguf(Some("tekken")).unwrap_err();
        assert!(err.to_string().contains("\"smollm\""), "{err}");
    }

    #[test]
    fn every_regex_compiles() {
        for (_, family) in PRE_NAMES {
            for regex in family.regexes() {
                Split::new(
                    SplitPattern::Regex((*regex).to_owned()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap_or_else(|e| panic!("{regex}: {e}"));
            }
        }
    }
}
