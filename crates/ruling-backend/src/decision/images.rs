//! A request's images: each distinct one decoded once and resized to the backend's budget, and
//! the request's text rewritten to call each by the name the prompt shows it under.

use ruling_schema::{AssetData, ValidRequest};

use crate::error::BackendError;

use super::plan::image_name;
use super::{DecoderEngine, EngineError};
use crate::backend::Backend;
use crate::picture::Picture;

impl<B: Backend> DecoderEngine<B> {
    /// The request with every placeholder replaced by its image's name (`<image 1>`, ...), and
    /// the distinct images in the order they were first named, each with the first placeholder
    /// that named it; `None` for a request without images. Two placeholders with the same
    /// bytes name one image, decoded once.
    pub(super) fn read_images(
        &self,
        request: &ValidRequest,
    ) -> Result<Option<(ValidRequest, Vec<ShownImage>)>, EngineError> {
        let assets = request.assets();
        if assets.is_empty() {
            return Ok(None);
        }
        let Some(vision) = &self.backend.info().vision else {
            return Err(EngineError::Unsupported(format!(
                "this model reads text only; it cannot read the {} image asset(s) sent",
                assets.len()
            )));
        };
        let mut distinct: Vec<&[u8]> = Vec::new();
        let mut images = Vec::new();
        let mut names = Vec::with_capacity(assets.len());
        for asset in assets {
            let bytes = match asset.data() {
                AssetData::Inline(bytes) => bytes.as_slice(),
                AssetData::Part(part) => {
                    return Err(EngineError::Asset {
                        placeholder: asset.placeholder().to_owned(),
                        message: format!(
                            "asset {:?} names the multipart part {part:?}, whose bytes never \
                             reached the engine",
                            asset.placeholder()
                        ),
                    });
                }
            };
            let number = match distinct.iter().position(|seen| *seen == bytes) {
                Some(index) => index + 1,
                None => {
                    let picture = Picture::decode(bytes, vision.budget).map_err(|error| {
                        EngineError::Asset {
                            placeholder: asset.placeholder().to_owned(),
                            message: format!("asset {:?}: {error}", asset.placeholder()),
                        }
                    })?;
                    distinct.push(bytes);
                    images.push(ShownImage {
                        placeholder: asset.placeholder().to_owned(),
                        picture,
                    });
                    distinct.len()
                }
            };
            names.push((asset.placeholder(), image_name(number)));
        }
        let pairs: Vec<(&str, &str)> = names.iter().map(|(p, n)| (*p, n.as_str())).collect();
        Ok(Some((request.naming_images(&pairs), images)))
    }
}

/// An image as the prompt shows it, with the placeholder the client first named it by.
pub(super) struct ShownImage {
    pub(super) placeholder: String,
    pub(super) picture: Picture,
}

/// A backend's failure over a prefix with `images`, as the engine reports it: an image the
/// model could not read is named by its placeholder, so the client learns which one.
pub(super) fn image_error(error: BackendError, images: &[ShownImage]) -> EngineError {
    match error {
        BackendError::Image { index, reason } => EngineError::Asset {
            placeholder: images
                .get(index)
                .map(|shown| shown.placeholder.clone())
                .unwrap_or_default(),
            message: format!(
                "asset {:?}: the model cannot read it: {reason}",
                images
                    .get(index)
                    .map_or("", |shown| shown.placeholder.as_str())
            ),
        },
        BackendError::TextOnly => EngineError::Unsupported(
            "this model reads text only; it cannot read the request's images".to_owned(),
        ),
        other => other.into(),
    }
}
