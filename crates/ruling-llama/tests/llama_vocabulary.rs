//! A GGUF whose vocabulary ruling's tokenizer cannot build still runs on the llama backend,
//! tokenized by llama.cpp's own vocabulary, with the backend contract proven at load.

mod common;

use candle_core::quantized::gguf_file::{self, Content, Value};
use ruling_backend::{Backend, DEFAULT_CODES, verify_backend};

/// tiny-llama with its pre-tokenizer named `tekken` (Mistral Nemo's), which llama.cpp splits
/// by its own regex and ruling's tokenizer does not implement.
fn tekken_fixture(dir: &std::path::Path) -> std::path::PathBuf {
    let source = common::workspace().join("fixtures/generated/tiny-llama.gguf");
    let mut file = std::fs::File::open(&source)
        .unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask fixtures`", source.display()));
    let content = Content::read(&mut file).unwrap();
    let mut metadata = content.metadata.clone();
    metadata.insert(
        "tokenizer.ggml.pre".into(),
        Value::String("tekken".to_owned()),
    );
    let tensors: Vec<(String, candle_core::quantized::QTensor)> = content
        .tensor_infos
        .keys()
        .map(|name| {
            let tensor = content
                .tensor(&mut file, name, &candle_core::Device::Cpu)
                .unwrap();
            (name.clone(), tensor)
        })
        .collect();
    let path = dir.join("tiny-llama-tekken.gguf");
    let mut out = std::fs::File::create(&path).unwrap();
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &candle_core::quantized::QTensor)> =
        tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut out, &md, &ts).unwrap();
    path
}

#[test]
fn an_unknown_pre_tokenizer_runs_on_llama_cpp_s_vocabulary() {
    let dir = std::env::temp_dir().join(format!("ruling-llama-vocab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = tekken_fixture(&dir);

    // The candle backend refuses it, naming the pre-tokenizer.
    let refused = ruling_candle::CandleBackend::load(&path, &ruling_candle::LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(refused.contains("tekken"), "{refused}");

    let backend = ruling_llama::LlamaCppBackend::load(&path, &ruling_llama::LoadOptions::default())
        .expect("llama.cpp's vocabulary takes over");
    assert!(
        backend.tokenizer().is_none(),
        "llama.cpp tokenizes this one"
    );
    let report = verify_backend(&backend, &DEFAULT_CODES[..4]).expect("the contract holds");
    assert_eq!(report.codes.ids().len(), 4);
    // The ids are llama.cpp's, and decode back to the text.
    let text = "<|im_start|>user\nIs the invoice paid? 12345<|im_end|>";
    let ids = backend.encode(text).unwrap();
    assert_eq!(ids, backend.llama_tokenize(text));
    assert_eq!(
        ruling_backend::Generator::decode(&backend, &ids).unwrap(),
        text
    );
    // A prompt is answered: scores of the codes after a prefix, finite.
    let prefix = backend
        .encode_prefix(&backend.encode("<|im_start|>user\nIs it paid?").unwrap())
        .unwrap();
    let branch = backend
        .encode_continuation("\nA. yes\nB. no<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    let codes = report.codes.ids().to_vec();
    let scored = backend
        .score_branches(
            &prefix,
            &[ruling_backend::Branch {
                tokens: &branch,
                codes: &codes,
            }],
        )
        .unwrap();
    assert!(scored[0].logits.iter().all(|l| l.is_finite()));
    std::fs::remove_dir_all(&dir).ok();
}
