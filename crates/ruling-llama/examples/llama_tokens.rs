//! llama.cpp's own token ids for texts, the reference a tokenizer built elsewhere is held to:
//! `cargo run --release -p ruling-llama --example llama_tokens -- MODEL.gguf TEXTS.json OUT.json`.
//! `TEXTS.json` is a JSON array of strings; `OUT.json` gets `{"texts": [...], "ids": [[...]]}`,
//! each text tokenized as the engine tokenizes (no BOS added, special tokens in the text
//! recognised).

#![allow(clippy::print_stdout)] // a tool's report

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, texts, out] = args.as_slice() else {
        return Err("usage: llama_tokens MODEL.gguf TEXTS.json OUT.json".into());
    };
    let texts: Vec<String> = serde_json::from_slice(&std::fs::read(texts)?)?;
    let runtime = ruling_llama::runtime()?;
    let model = LlamaModel::load_from_file(runtime, model, &LlamaModelParams::default())?;
    let vocab = model.vocab();
    let ids: Vec<Vec<i32>> = texts
        .iter()
        .map(|text| {
            vocab
                .tokenize(text.as_bytes(), false, true)
                .iter()
                .map(|t| t.0)
                .collect()
        })
        .collect();
    let total: usize = ids.iter().map(Vec::len).sum();
    std::fs::write(
        out,
        serde_json::to_vec(&json!({"texts": texts, "ids": ids}))?,
    )?;
    println!("{} texts, {total} tokens", texts.len());
    Ok(())
}
