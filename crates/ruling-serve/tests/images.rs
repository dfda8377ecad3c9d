//! Requests with images, served by the tiny random-weight Qwen2-VL fixture on the llama
//! backend with its vision projector (`cargo xtask fixtures`): inline and multipart images
//! answered, one image under two placeholders read once, and every image the model cannot
//! read refused with a 422 that names its asset.

mod common;

use common::{TestServer, fixture, fixture_spec, json_of, locs, messages, multipart};
use ruling_core::{DecoderBackend, Options};
use ruling_schema::{Capabilities, SystemOneResponse};
use ruling_serve::{Config, Loader};
use serde_json::{Value, json};

const MODEL: &str = "tiny-qwen2vl.gguf";

async fn vision_server() -> TestServer {
    let options = Options {
        backend: DecoderBackend::Llama,
        mmproj: Some(fixture("tiny-qwen2vl-mmproj.gguf")),
        max_image_tokens: 64,
        max_images: 3,
        ..Options::default()
    };
    TestServer::ready(
        Config::default(),
        Loader::from_spec(fixture_spec(MODEL), options),
    )
    .await
}

fn png(width: u32, height: u32, shade: u8) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([shade, (x * 5) as u8, (y * 3) as u8])
    });
    let mut bytes = Vec::new();
    image
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    bytes
}

fn jpeg(width: u32, height: u32) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x * 2) as u8, 90, (y * 2) as u8])
    });
    let mut bytes = Vec::new();
    image
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Jpeg,
        )
        .unwrap();
    bytes
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn inline(format: &str, bytes: &[u8]) -> Value {
    json!({"type": "image", "format": format, "data_base64": b64(bytes)})
}

fn questions() -> Value {
    json!({
        "damaged": {"type": "noul", "instructions": "Is the parcel in <photo> damaged?"},
        "kind": {"type": "choice", "instructions": "What is in <photo>?",
                 "criteria": {"parcel": "a parcel", "letter": "a letter", "other": null}},
        "light": {"type": "score", "instructions": "How bright is <photo>?",
                  "criteria": ["dark", "normal", "bright"]}
    })
}

fn answered(body: &Value, request: &Value) -> SystemOneResponse {
    let response: SystemOneResponse = serde_json::from_value(body.clone()).expect("the wire shape");
    let valid = ruling_schema::parse_request(
        &serde_json::to_vec(request).unwrap(),
        &Capabilities::vision(),
    )
    .unwrap();
    response
        .check_against(&valid)
        .expect("well-formed answers to what was asked");
    response
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_is_answered_inline_and_as_a_multipart_part_alike() {
    let server = vision_server().await;
    let photo = png(90, 60, 40);
    let request = json!({
        "model": MODEL,
        "state": "The customer sent <photo> of the parcel.",
        "assets": {"<photo>": inline("png", &photo)},
        "questions": questions(),
    });
    let (status, _, body) = json_of(server.post_json(&request).await).await;
    assert_eq!(status, 200, "{body}");
    let inline_answer = answered(&body, &request);
    assert!(inline_answer.usage.input_tokens > 0);

    let parts = json!({
        "model": MODEL,
        "state": "The customer sent <photo> of the parcel.",
        "assets": {"<photo>": {"type": "image", "part": "asset-0"}},
        "questions": questions(),
    });
    let json_part = serde_json::to_vec(&parts).unwrap();
    let (content_type, form) = multipart(&[
        ("request", "application/json", &json_part),
        ("asset-0", "image/png", &photo),
    ]);
    let (status, _, body) = json_of(
        server
            .post_bytes(form, &[("content-type", &content_type)])
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let multipart_answer = answered(&body, &request);
    assert_eq!(multipart_answer.answers, inline_answer.answers);
    assert_eq!(multipart_answer.usage, inline_answer.usage);

    // A JPEG is read too.
    let request = json!({
        "model": MODEL, "state": "<photo>",
        "assets": {"<photo>": inline("jpeg", &jpeg(64, 64))},
        "questions": questions(),
    });
    let (status, _, body) = json_of(server.post_json(&request).await).await;
    assert_eq!(status, 200, "{body}");
    answered(&body, &request);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_list_says_the_model_reads_images() {
    let server = vision_server().await;
    let (status, _, body) = json_of(server.get("/v1/models").await).await;
    assert_eq!(status, 200);
    let description = body["models"][0]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(
        description.contains("reads images, up to 3 per request"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_image_under_two_placeholders_is_one_image() {
    let server = vision_server().await;
    let photo = png(70, 70, 120);
    let twice = json!({
        "model": MODEL,
        "state": "Front <front>, back <back>.",
        "assets": {"<front>": inline("png", &photo), "<back>": inline("png", &photo)},
        "questions": {"same": {"type": "noul", "instructions": "Are <front> and <back> one parcel?"}},
    });
    let once = json!({
        "model": MODEL,
        "state": "Front <front>, back <front>.",
        "assets": {"<front>": inline("png", &photo)},
        "questions": {"same": {"type": "noul", "instructions": "Are <front> and <front> one parcel?"}},
    });
    let (status, _, a) = json_of(server.post_json(&twice).await).await;
    assert_eq!(status, 200, "{a}");
    let (status, _, b) = json_of(server.post_json(&once).await).await;
    assert_eq!(status, 200, "{b}");
    // Both are `<image 1>` twice over one image: the same prompt, the same answer and usage.
    assert_eq!(a["answers"], b["answers"]);
    assert_eq!(a["usage"], b["usage"]);
    // A second, different image makes a longer prompt.
    let two = json!({
        "model": MODEL,
        "state": "Front <front>, back <back>.",
        "assets": {"<front>": inline("png", &photo), "<back>": inline("png", &png(70, 70, 7))},
        "questions": {"same": {"type": "noul", "instructions": "Are <front> and <back> one parcel?"}},
    });
    let (status, _, c) = json_of(server.post_json(&two).await).await;
    assert_eq!(status, 200, "{c}");
    assert!(
        c["usage"]["input_tokens"].as_u64() > a["usage"]["input_tokens"].as_u64(),
        "{c} vs {a}"
    );
}

/// The one refusal of `body`, with its loc and message.
fn refusal(body: &Value) -> (Value, String) {
    let locs = locs(body);
    assert_eq!(locs.len(), 1, "{body}");
    (locs[0].clone(), messages(body))
}

#[tokio::test(flavor = "multi_thread")]
async fn images_the_model_cannot_read_are_refused_by_name() {
    let server = vision_server().await;
    let ask = |placeholder: &str, asset: Value| {
        json!({
            "model": MODEL,
            "state": format!("Look at <ok> and {placeholder}."),
            "assets": {"<ok>": inline("png", &png(28, 28, 1)), placeholder: asset},
            "questions": {"q": {"type": "noul", "instructions": "Do they match?"}},
        })
    };

    // A PNG cut short.
    let mut cut = png(64, 64, 3);
    cut.truncate(cut.len() / 2);
    let (status, _, body) =
        json_of(server.post_json(&ask("<torn>", inline("png", &cut))).await).await;
    assert_eq!(status, 422, "{body}");
    let (loc, message) = refusal(&body);
    assert_eq!(loc, json!(["body", "assets", "<torn>"]));
    assert!(message.contains("cannot be read"), "{message}");

    // Fifty megapixels: refused from its size, before its pixels are decoded.
    let huge = {
        let image = image::GrayImage::new(10_000, 5_000);
        let mut bytes = Vec::new();
        image
            .write_to(
                &mut std::io::Cursor::new(&mut bytes),
                image::ImageFormat::Png,
            )
            .unwrap();
        bytes
    };
    let (status, _, body) =
        json_of(server.post_json(&ask("<huge>", inline("png", &huge))).await).await;
    assert_eq!(status, 422, "{body}");
    let (loc, message) = refusal(&body);
    assert_eq!(loc, json!(["body", "assets", "<huge>"]));
    assert!(
        message.contains("10000x5000") && message.contains("megapixels"),
        "{message}"
    );

    // Bytes that are no image at all, whatever the format says.
    let (status, _, body) = json_of(
        server
            .post_json(&ask(
                "<text>",
                inline("png", b"just some text, not a picture"),
            ))
            .await,
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let (loc, message) = refusal(&body);
    assert_eq!(loc, json!(["body", "assets", "<text>"]));
    assert!(message.contains("neither PNG nor JPEG"), "{message}");

    // A placeholder that appears nowhere.
    let request = json!({
        "model": MODEL,
        "state": "Look at <ok>.",
        "assets": {"<ok>": inline("png", &png(28, 28, 1)), "<ghost>": inline("png", &png(28, 28, 2))},
        "questions": {"q": {"type": "noul", "instructions": "Is it a parcel?"}},
    });
    let (status, _, body) = json_of(server.post_json(&request).await).await;
    assert_eq!(status, 422, "{body}");
    let (loc, message) = refusal(&body);
    assert_eq!(loc, json!(["body", "assets", "<ghost>"]));
    assert!(message.contains("appears in no string"), "{message}");

    // More images than the server takes in one request (3 here).
    let assets: serde_json::Map<String, Value> = (0..4)
        .map(|i| (format!("<p{i}>"), inline("png", &png(28, 28, i))))
        .collect();
    let request = json!({
        "model": MODEL,
        "state": "<p0> <p1> <p2> <p3>",
        "assets": assets,
        "questions": {"q": {"type": "noul", "instructions": "All parcels?"}},
    });
    let (status, _, body) = json_of(server.post_json(&request).await).await;
    assert_eq!(status, 422, "{body}");
    let (loc, message) = refusal(&body);
    assert_eq!(loc, json!(["body", "assets"]));
    assert!(message.contains("4 images sent, over the 3"), "{message}");

    // A box question: this model has no coordinate readout.
    let request = json!({
        "model": MODEL,
        "state": "<ok>",
        "assets": {"<ok>": inline("png", &png(28, 28, 1))},
        "questions": {"where": {"type": "box", "instructions": "Where is the label?"}},
    });
    let (status, _, body) = json_of(server.post_json(&request).await).await;
    assert_eq!(status, 422, "{body}");
    assert!(messages(&body).contains("coordinate"), "{body}");
}
