//! `multipart/form-data` requests: a JSON part named `request` and one part per image.
//!
//! typesafe-sdk writes each asset as `{"type": "image", "part": "asset-N"}` (no `format`: the
//! format is read from the bytes) and sends the image as the part so named, each part claimed
//! by exactly one asset. This module attaches each part's bytes to the asset that names it
//! (as `data_base64`, with `format` read from the bytes where the asset gives none), so the
//! request then validates exactly as an inline one would: a text-only model refuses its images
//! with the same 422 either way.

use axum::body::Bytes;
use base64::Engine as _;
use indexmap::IndexMap;
use ruling_schema::{Capabilities, ErrorDetail, LocItem, ValidRequest, ValidationErrors};
use serde_json::{Value, json};

use crate::error::ApiError;

/// The name of the part that holds the JSON request.
pub(crate) const REQUEST_PART: &str = "request";

/// A multipart body, its parts by name in the order sent.
#[derive(Debug)]
pub(crate) struct Form {
    request: Option<Bytes>,
    parts: IndexMap<String, Part>,
}

#[derive(Debug)]
struct Part {
    content_type: Option<String>,
    data: Bytes,
}

/// Whether a `content-type` is `multipart/form-data`.
pub(crate) fn is_multipart(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("multipart/form-data"))
}

/// Split a whole multipart body into its parts.
pub(crate) async fn read_form(body: Bytes, content_type: &str) -> Result<Form, ApiError> {
    let boundary = multer::parse_boundary(content_type).map_err(|error| {
        ApiError::BadRequest(format!("the multipart content-type is not usable: {error}"))
    })?;
    let stream = futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut form = Form {
        request: None,
        parts: IndexMap::new(),
    };
    let malformed = |error: multer::Error| {
        ApiError::BadRequest(format!("the multipart body is malformed: {error}"))
    };
    while let Some(field) = multipart.next_field().await.map_err(malformed)? {
        let Some(name) = field.name().map(str::to_owned) else {
            return Err(ApiError::BadRequest(
                "every multipart part needs a name (Content-Disposition: form-data; name=...)"
                    .to_owned(),
            ));
        };
        let content_type = field.content_type().map(ToString::to_string);
        let data = field.bytes().await.map_err(malformed)?;
        let repeated = if name == REQUEST_PART {
            form.request.replace(data).is_some()
        } else {
            form.parts
                .insert(name.clone(), Part { content_type, data })
                .is_some()
        };
        if repeated {
            return Err(ApiError::at(
                vec![LocItem::from("body"), LocItem::from(name.as_str())],
                "value_error",
                format!(
                    "Value error, the multipart part {name:?} is sent twice; part names are unique"
                ),
            ));
        }
    }
    Ok(form)
}

/// Attach the parts to their assets and validate the request.
pub(crate) fn assemble(form: Form, caps: &Capabilities) -> Result<ValidRequest, ValidationErrors> {
    let Some(original) = form.request else {
        return Err(ValidationErrors::new(vec![ErrorDetail::new(
            vec![body(), LocItem::from(REQUEST_PART)],
            "missing",
            "Field required: a multipart request needs a part named `request` holding the JSON request",
        )]));
    };
    let Ok(mut value) = serde_json::from_slice::<Value>(&original) else {
        // Not JSON: the validator says where and why, exactly as for a JSON body.
        return ruling_schema::parse_request(&original, caps);
    };
    let mut errors = Vec::new();
    let claimed = inline_parts(&mut value, &form.parts, &mut errors);
    unclaimed_parts(&form.parts, &claimed, &mut errors);
    if claimed.is_empty() && errors.is_empty() {
        return ruling_schema::parse_request(&original, caps);
    }
    // Re-serialising loses repeated keys, which only the original bytes can show.
    if let Err(found) = ruling_schema::parse_request(&original, caps) {
        errors.extend(
            found
                .into_details()
                .into_iter()
                .filter(|d| d.kind == "value_error" && d.msg.contains("duplicate key")),
        );
    }
    let rewritten = serde_json::to_vec(&value).map_err(|error| {
        ValidationErrors::new(vec![ErrorDetail::new(
            vec![body()],
            "value_error",
            format!("Value error, the request could not be re-encoded: {error}"),
        )])
    })?;
    match ruling_schema::parse_request(&rewritten, caps) {
        Ok(valid) if errors.is_empty() => Ok(valid),
        Ok(_) => Err(ValidationErrors::new(errors)),
        Err(found) => {
            errors.extend(found);
            Err(ValidationErrors::new(errors))
        }
    }
}

/// Moves each asset's named part into it as `data_base64` (with its `type`, and its `format`
/// from the bytes when the asset gives none); returns which part each asset claimed, part name
/// to placeholder. A part not sent, or claimed twice, is an error in `errors`.
fn inline_parts(
    value: &mut Value,
    parts: &IndexMap<String, Part>,
    errors: &mut Vec<ErrorDetail>,
) -> IndexMap<String, String> {
    let mut claimed: IndexMap<String, String> = IndexMap::new();
    if let Some(Value::Object(assets)) = value.get_mut("assets") {
        for (placeholder, asset) in assets.iter_mut() {
            let Some(asset) = asset.as_object_mut() else {
                continue;
            };
            let Some(Value::String(name)) = asset.get("part").cloned() else {
                continue;
            };
            let loc = vec![
                body(),
                LocItem::from("assets"),
                LocItem::from(placeholder.as_str()),
                LocItem::from("image"),
                LocItem::from("part"),
            ];
            let Some(part) = parts.get(&name) else {
                let sent: Vec<&String> = parts.keys().collect();
                errors.push(
                    ErrorDetail::new(
                        loc,
                        "value_error",
                        format!(
                            "Value error, asset {placeholder:?} names the multipart part {name:?}, \
                             which was not sent; the image parts sent are {sent:?}"
                        ),
                    )
                    .with_ctx(json!({"part": name, "parts": sent})),
                );
                continue;
            };
            if let Some(other) = claimed.get(&name) {
                errors.push(ErrorDetail::new(
                    loc,
                    "value_error",
                    format!(
                        "Value error, the multipart part {name:?} is already claimed by asset \
                         {other:?}; each part carries the image of exactly one asset"
                    ),
                ));
                continue;
            }
            claimed.insert(name.clone(), placeholder.clone());
            // With a part, an inline copy is ignored (as the hosted API documents).
            asset.remove("part");
            asset.insert(
                "data_base64".to_owned(),
                Value::String(base64::engine::general_purpose::STANDARD.encode(&part.data)),
            );
            if !asset.contains_key("type") {
                asset.insert("type".to_owned(), json!("image"));
            }
            if !asset.contains_key("format")
                && let Some(format) = image_format(part)
            {
                asset.insert("format".to_owned(), json!(format));
            }
        }
    }
    claimed
}

/// Every part sent that no asset claimed is an error in `errors`.
fn unclaimed_parts(
    parts: &IndexMap<String, Part>,
    claimed: &IndexMap<String, String>,
    errors: &mut Vec<ErrorDetail>,
) {
    for name in parts.keys().filter(|n| !claimed.contains_key(*n)) {
        errors.push(
            ErrorDetail::new(
                vec![body(), LocItem::from("assets")],
                "value_error",
                format!(
                    "Value error, the multipart part {name:?} is claimed by no asset; name it in \
                     an asset's `part`"
                ),
            )
            .with_ctx(json!({"part": name})),
        );
    }
}

/// Where every multipart error sits: under the body, as the JSON request's errors do.
fn body() -> LocItem {
    LocItem::from("body")
}

/// `png` or `jpeg` from the bytes' signature, else from the part's content type.
fn image_format(part: &Part) -> Option<&'static str> {
    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";
    const JPEG: &[u8] = b"\xff\xd8\xff";
    if part.data.starts_with(PNG) {
        return Some("png");
    }
    if part.data.starts_with(JPEG) {
        return Some("jpeg");
    }
    match part.content_type.as_deref()? {
        "image/png" => Some("png"),
        "image/jpeg" | "image/jpg" => Some("jpeg"),
        _ => None,
    }
}
