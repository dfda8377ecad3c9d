//! Compare the tokenizer built from a SentencePiece GGUF with a `tokenizer.json` of the same
//! model, on text files (`sentencepiece_parity MODEL.gguf tokenizer.json FILE...`), or with
//! llama.cpp's ids (`sentencepiece_parity MODEL.gguf llama-ids.json`, as the
//! `llama_tokens` example of ruling-llama writes them).

#![allow(clippy::print_stdout)] // a tool's report

use std::io::Read as _;

use candle_core::quantized::gguf_file;
use ruling_candle::TextTokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut file = std::fs::File::open(&args[0])?;
    let content = gguf_file::Content::read(&mut file)?;
    let ours = TextTokenizer::from_gguf(&content)?;
    if args.len() == 2 {
        let reference: serde_json::Value = serde_json::from_slice(&std::fs::read(&args[1])?)?;
        let (mut differ, mut chars) = (0, 0);
        let texts = reference["texts"].as_array().ok_or("no texts")?;
        for (text, ids) in texts
            .iter()
            .zip(reference["ids"].as_array().ok_or("no ids")?)
        {
            let text = text.as_str().ok_or("a text")?;
            let want: Vec<u32> = serde_json::from_value(ids.clone())?;
            chars += text.chars().count();
            if ours.encode(text)? != want {
                differ += 1;
                if differ <= 5 {
                    eprintln!("differs: {:?}", text.chars().take(100).collect::<String>());
                }
            }
        }
        println!(
            "{} texts, {chars} characters, {differ} differ from llama.cpp",
            texts.len()
        );
        return Ok(());
    }
    let theirs = tokenizers::Tokenizer::from_file(&args[1]).map_err(|e| e.to_string())?;
    let (mut chars, mut texts, mut differ) = (0usize, 0usize, 0usize);
    for path in &args[2..] {
        let mut text = String::new();
        std::fs::File::open(path)?.read_to_string(&mut text)?;
        for chunk in text.split("\n\n").filter(|c| !c.is_empty()) {
            let a = ours.encode(chunk)?;
            let b = theirs
                .encode_fast(chunk, false)
                .map_err(|e| e.to_string())?
                .get_ids()
                .to_vec();
            chars += chunk.chars().count();
            texts += 1;
            if a != b {
                differ += 1;
                if differ <= 5 {
                    let first = a
                        .iter()
                        .zip(&b)
                        .position(|(x, y)| x != y)
                        .unwrap_or(a.len().min(b.len()));
                    eprintln!(
                        "differs at token {first}: ours {:?} theirs {:?} in {:?}",
                        &a[first..(first + 5).min(a.len())],
                        &b[first..(first + 5).min(b.len())],
                        chunk.chars().take(120).collect::<String>()
                    );
                }
            }
        }
    }
    println!("{texts} texts, {chars} characters, {differ} differ");
    Ok(())
}
