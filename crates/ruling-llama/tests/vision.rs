//! Images on the llama.cpp backend, with the tiny random-weight Qwen2-VL fixture (`cargo xtask
//! fixtures`: a text GGUF and its vision projector). A prefix holding images, encoded once,
//! and branches scored after it must read what llama.cpp's own multimodal helper reads when
//! it runs the whole prompt in one evaluation; Qwen2-VL's multimodal positions make an image
//! take fewer positions than tokens, so a branch positioned by token count would not.

mod common;

use std::sync::OnceLock;

use ruling_backend::{
    Backend, Branch, ChatMessage, DecoderEngine, Engine, EngineOptions, Picture, Role,
};
use ruling_llama::{LlamaCppBackend, LoadOptions};
use ruling_schema::{Capabilities, parse_request};
use serde_json::json;

const MARKER: &str = "<__media__>";

fn fixture(name: &str) -> std::path::PathBuf {
    let path = common::workspace().join("fixtures/generated").join(name);
    assert!(
        path.exists(),
        "{} is missing; run `cargo xtask fixtures`",
        path.display()
    );
    path
}

fn options(mmproj: bool) -> LoadOptions {
    LoadOptions {
        mmproj: mmproj.then(|| fixture("tiny-qwen2vl-mmproj.gguf")),
        max_image_tokens: 64,
        ..LoadOptions::default()
    }
}

fn vlm() -> &'static LlamaCppBackend {
    static BACKEND: OnceLock<LlamaCppBackend> = OnceLock::new();
    BACKEND.get_or_init(|| {
        LlamaCppBackend::load(&fixture("tiny-qwen2vl.gguf"), &options(true))
            .expect("load the tiny Qwen2-VL with its projector")
    })
}

/// A picture whose pixels follow `seed`, at a size on the 28-pixel grid.
fn picture(width: u32, height: u32, seed: u8) -> Picture {
    let rgb = (0..width * height)
        .flat_map(|i| {
            let (x, y) = (i % width, i / width);
            [
                (x * 3 + u32::from(seed)) as u8,
                (y * 5) as u8,
                (x ^ y ^ u32::from(seed)) as u8,
            ]
        })
        .collect();
    Picture::from_rgb(width, height, rgb).unwrap()
}

/// The user turn's start with `state`, then each image under its name, as the engine writes it.
fn prefix_text(backend: &LlamaCppBackend, state: &str, images: usize) -> String {
    let mut user = format!("{state}\n");
    for n in 1..=images {
        user.push_str(&format!("<image {n}>: {MARKER}\n"));
    }
    let marker = "\u{241E}cut\u{241E}";
    let rendered = backend
        .render_chat(&[ChatMessage::new(Role::User, format!("{user}{marker}"))])
        .unwrap();
    rendered.split(marker).next().unwrap().to_owned()
}

const BRANCHES: [&str; 3] = [
    "Is <image 1> mostly red?\nA. yes\nB. no\nAnswer with the letter.<|im_end|>\n<|im_start|>assistant\n",
    "What does it show?\nA. a cat\nB. a dog\nC. a car\nAnswer with the letter.<|im_end|>\n<|im_start|>assistant\n",
    "How bright?\nA. dark\nB. mid\nC. light\nD. glaring\nAnswer with the letter.<|im_end|>\n<|im_start|>assistant\n",
];

/// Every branch scored after the prefix equals the whole prompt run at once, to 1e-4.
fn assert_parity(state: &str, pictures: &[Picture]) {
    let backend = vlm();
    let shown: Vec<&Picture> = pictures.iter().collect();
    let prefix_text = prefix_text(backend, state, pictures.len());
    let prefix = backend
        .encode_prefix_with_images(&prefix_text, &shown)
        .unwrap();
    let counted = backend
        .count_prefix_with_images(&prefix_text, &shown)
        .unwrap();
    assert_eq!(backend.prefix_len(&prefix), counted);
    let codes: Vec<u32> = ["A", "B", "C", "D"]
        .iter()
        .map(|c| backend.encode(c).unwrap()[0])
        .collect();
    let tokens: Vec<Vec<u32>> = BRANCHES
        .iter()
        .map(|b| backend.encode(b).unwrap())
        .collect();
    let branches: Vec<Branch<'_>> = tokens
        .iter()
        .map(|t| Branch {
            tokens: t,
            codes: &codes,
        })
        .collect();
    let scored = backend.score_branches(&prefix, &branches).unwrap();
    let mut widest = 0f32;
    for (branch, got) in BRANCHES.iter().zip(&scored) {
        let whole = backend
            .reference_with_images(&format!("{prefix_text}{branch}"), &shown, &codes)
            .unwrap();
        for (a, b) in got.logits.iter().zip(&whole.logits) {
            assert!(
                a.is_finite() && (a - b).abs() <= 1e-4,
                "{got:?} vs {whole:?}"
            );
            widest = widest.max((a - b).abs());
        }
        assert!(
            (got.log_normalizer - whole.log_normalizer).abs() <= 1e-4,
            "{got:?} vs {whole:?}"
        );
    }
    eprintln!(
        "{} image(s), prefix of {} tokens: largest logit difference {widest:e}",
        pictures.len(),
        counted
    );
}

#[test]
fn one_image_in_the_prefix_and_branches_after_it_read_as_the_whole_prompt() {
    assert_parity("A photo of the parcel:", &[picture(56, 84, 1)]);
}

#[test]
fn two_images_read_as_the_whole_prompt() {
    assert_parity(
        "Before <image 1> and after <image 2>.",
        &[picture(84, 56, 2), picture(112, 112, 3)],
    );
}

#[test]
fn an_image_after_a_long_state_reads_as_the_whole_prompt() {
    let state = "The customer writes that the parcel arrived with a torn corner, the receipt \
                 was missing, and the tracking page still says it is in transit. "
        .repeat(12);
    assert_parity(&state, &[picture(56, 56, 4)]);
}

#[test]
fn an_image_takes_fewer_positions_than_tokens() {
    // What makes the parity above mean something: on Qwen2-VL a branch positioned by the
    // prefix's token count would sit past where the model expects it.
    let backend = vlm();
    let picture = picture(112, 112, 5);
    let text = prefix_text(backend, "Look:", 1);
    let prefix = backend
        .encode_prefix_with_images(&text, &[&picture])
        .unwrap();
    let (tokens, positions) = prefix.extent();
    assert!(positions < tokens, "{positions} positions, {tokens} tokens");
}

#[test]
fn text_requests_answer_exactly_as_on_the_text_model() {
    let body = json!({
        "model": "m",
        "state": "My card was charged twice for one order.",
        "questions": {
            "billing": {"type": "noul", "instructions": "Is this about billing?"},
            "team": {"type": "choice", "instructions": "Which team?",
                     "criteria": {"billing": "payments", "shipping": "parcels", "tech": "the app"}},
        }
    });
    let text_model = LlamaCppBackend::load(&fixture("tiny-qwen2vl.gguf"), &options(false)).unwrap();
    assert!(text_model.info().vision.is_none());
    let text = DecoderEngine::new(text_model, EngineOptions::default(), None).unwrap();
    let vision = DecoderEngine::new(
        LlamaCppBackend::load(&fixture("tiny-qwen2vl.gguf"), &options(true)).unwrap(),
        EngineOptions::default(),
        None,
    )
    .unwrap();
    assert!(vision.info().capabilities.vision);
    let request = parse_request(body.to_string().as_bytes(), &Capabilities::vision()).unwrap();
    let a = text.evaluate(&request).unwrap();
    let b = vision.evaluate(&request).unwrap();
    assert_eq!(a.answers, b.answers);
    assert_eq!(a.usage, b.usage);
}

#[test]
fn a_projector_that_is_missing_or_not_one_is_refused_at_load() {
    let missing = LoadOptions {
        mmproj: Some(common::workspace().join("fixtures/generated/no-such-mmproj.gguf")),
        ..LoadOptions::default()
    };
    let err = LlamaCppBackend::load(&fixture("tiny-qwen2vl.gguf"), &missing).unwrap_err();
    assert!(err.to_string().contains("no such file"), "{err}");
    // The text model's own GGUF is not a projector.
    let wrong = LoadOptions {
        mmproj: Some(fixture("tiny-qwen2vl.gguf")),
        ..LoadOptions::default()
    };
    let err = LlamaCppBackend::load(&fixture("tiny-qwen2vl.gguf"), &wrong).unwrap_err();
    assert!(err.to_string().contains("vision projector"), "{err}");
}

#[test]
fn a_question_stem_encoded_over_an_image_prefix_answers_as_whole_branches() {
    // With two rotations a question's stem is encoded once over the prefix and extended by
    // each rotation: the extension continues the image prefix's positions too.
    use base64::Engine as _;
    let mut png = Vec::new();
    image::RgbImage::from_fn(60, 40, |x, y| {
        image::Rgb([(x * 4) as u8, (y * 6) as u8, 77])
    })
    .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
    .unwrap();
    let body = json!({
        "model": "m",
        "state": "The parcel as delivered: <photo>",
        "assets": {"<photo>": {"type": "image", "format": "png",
                    "data_base64": base64::engine::general_purpose::STANDARD.encode(&png)}},
        "questions": {
            "damaged": {"type": "noul", "instructions": "Is the parcel in <photo> damaged?"},
            "light": {"type": "score", "instructions": "How bright is <photo>?",
                      "criteria": ["dark", "normal", "bright"]},
        }
    });
    let request = parse_request(body.to_string().as_bytes(), &Capabilities::vision()).unwrap();
    let engine = |shared_stems| {
        DecoderEngine::new(
            LlamaCppBackend::load(&fixture("tiny-qwen2vl.gguf"), &options(true)).unwrap(),
            EngineOptions {
                rotations: 2,
                shared_stems,
                ..EngineOptions::default()
            },
            None,
        )
        .unwrap()
    };
    let stems = engine(true).evaluate(&request).unwrap();
    let whole = engine(false).evaluate(&request).unwrap();
    // The stem is decoded in a call of its own rather than inside each branch, which moves a
    // logit in its last bits (1e-9 here); a branch at the wrong position would move it by
    // about 0.1 on this fixture.
    let numbers = |answers: &serde_json::Value| {
        let mut out = Vec::new();
        collect_numbers(answers, &mut out);
        out
    };
    let (a, b) = (
        numbers(&serde_json::to_value(&stems.answers).unwrap()),
        numbers(&serde_json::to_value(&whole.answers).unwrap()),
    );
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-6, "{stems:?} vs {whole:?}");
    }
}

fn collect_numbers(value: &serde_json::Value, out: &mut Vec<f64>) {
    match value {
        serde_json::Value::Number(n) => out.extend(n.as_f64()),
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_numbers(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| collect_numbers(v, out)),
        _ => {}
    }
}
