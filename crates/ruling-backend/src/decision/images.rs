//! A request's images: each distinct one decoded once and resized to the backend's budget, and
//! the request's text rewritten to call each by the name the prompt shows it under.

use ruling_schema::{AssetData, ValidRequest};

use super::plan::image_name;
use super::{DecoderEngine, EngineError};
use crate::backend::Backend;
use crate::picture::Picture;

impl<B: Backend> DecoderEngine<B> {
    /// The request with every placeholder replaced by its image's name (`<image 1>`, ...), and
    /// the distinct images in the order they were first named; `None` for a request without
    /// images. Two placeholders with the same bytes name one image, decoded once.
    pub(super) fn read_images(
        &self,
        request: &ValidRequest,
    ) -> Result<Option<(ValidRequest, Vec<Picture>)>, EngineError> {
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
        let mut pictures = Vec::new();
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
                    pictures.push(picture);
                    distinct.len()
                }
            };
            names.push((asset.placeholder(), image_name(number)));
        }
        let pairs: Vec<(&str, &str)> = names.iter().map(|(p, n)| (*p, n.as_str())).collect();
        Ok(Some((request.naming_images(&pairs), pictures)))
    }
}
