//! Images a vision model reads: decoded once per distinct content, bounded before decoding and
//! after.
//!
//! Two bounds keep an image from costing more than it can be worth. Before decoding, its header
//! gives its size, and a picture over [`MAX_SOURCE_PIXELS`] is refused without allocating its
//! pixels. After decoding, it is resized (aspect kept) so that it becomes at most
//! [`ImageBudget::max_tokens`] tokens: a vision model of the Qwen-VL kind turns each
//! `side x side` square of pixels (patch size times merge size) into one token, so the budget
//! bounds the resized area at `max_tokens * side * side` and both edges are made multiples of
//! `side`.

use sha2::{Digest, Sha256};

/// The most pixels an image may have before it is resized: 40 megapixels, 120 MB as RGB. A
/// larger picture is refused from its header, before its pixels are allocated.
pub const MAX_SOURCE_PIXELS: u64 = 40_000_000;

/// Tokens one image may become unless the caller says otherwise: about a megapixel on
/// Qwen2-VL (28 x 28 pixels per token), and the thousand tokens below which Qwen-VL models
/// start to lose detail.
pub const DEFAULT_MAX_IMAGE_TOKENS: u32 = 1024;

/// The widest aspect ratio (long edge over short edge) an image may have after resizing to the
/// token grid: a thinner strip would be one token across.
pub const MAX_ASPECT_RATIO: u32 = 200;

/// How big an image may become for the model reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageBudget {
    /// The edge, in pixels, of the square one token covers (patch size times merge size).
    pub side: u32,
    /// The most tokens one image may become.
    pub max_tokens: u32,
}

impl ImageBudget {
    /// The most pixels a resized image may hold.
    pub fn max_pixels(&self) -> u64 {
        u64::from(self.max_tokens) * u64::from(self.side) * u64::from(self.side)
    }

    /// The size an image of `width x height` is resized to: both edges multiples of `side`,
    /// the area within the budget, the aspect ratio kept as nearly as the grid allows.
    pub fn fit(&self, width: u32, height: u32) -> (u32, u32) {
        let side = f64::from(self.side.max(1));
        let (w, h) = (f64::from(width.max(1)), f64::from(height.max(1)));
        let snap = |x: f64| ((x / side).round().max(1.0) * side) as u32;
        let (mut fw, mut fh) = (snap(w), snap(h));
        if u64::from(fw) * u64::from(fh) > self.max_pixels() {
            let beta = ((w * h) / self.max_pixels() as f64).sqrt();
            let floor = |x: f64| ((x / beta / side).floor().max(1.0) * side) as u32;
            (fw, fh) = (floor(w), floor(h));
        }
        (fw, fh)
    }

    /// The tokens an image of `width x height` becomes once fitted.
    pub fn tokens(&self, width: u32, height: u32) -> u32 {
        let (w, h) = self.fit(width, height);
        (w / self.side.max(1)) * (h / self.side.max(1))
    }
}

/// A decoded image, resized to its budget, in 8-bit RGB rows.
#[derive(Clone, PartialEq, Eq)]
pub struct Picture {
    digest: [u8; 32],
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl std::fmt::Debug for Picture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Picture")
            .field("digest", &self.digest_hex())
            .field("width", &self.width)
            .field("height", &self.height)
            .finish_non_exhaustive()
    }
}

impl Picture {
    /// Decode a PNG or JPEG (the format is read from the bytes), refuse it if it is too big to
    /// decode, and resize it to `budget`.
    pub fn decode(bytes: &[u8], budget: ImageBudget) -> Result<Self, PictureError> {
        use image::ImageReader;
        use std::io::Cursor;

        let digest: [u8; 32] = Sha256::digest(bytes).into();
        let reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| PictureError::Unreadable(e.to_string()))?;
        match reader.format() {
            Some(image::ImageFormat::Png | image::ImageFormat::Jpeg) => {}
            Some(other) => {
                return Err(PictureError::Unreadable(format!(
                    "it is {other:?}; only PNG and JPEG are read"
                )));
            }
            None => {
                return Err(PictureError::Unreadable(
                    "its bytes are neither PNG nor JPEG".to_owned(),
                ));
            }
        }
        let (width, height) = reader
            .into_dimensions()
            .map_err(|e| PictureError::Unreadable(e.to_string()))?;
        let pixels = u64::from(width) * u64::from(height);
        if pixels > MAX_SOURCE_PIXELS {
            return Err(PictureError::TooLarge {
                width,
                height,
                limit: MAX_SOURCE_PIXELS,
            });
        }
        let mut reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| PictureError::Unreadable(e.to_string()))?;
        // The header was read above; the limits also stop a file whose header lies.
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(width);
        limits.max_image_height = Some(height);
        // Eight bytes a pixel: a 16-bit RGBA PNG decodes to that before it becomes RGB.
        limits.max_alloc = Some(pixels * 8 + (1 << 20));
        reader.limits(limits);
        let decoded = reader
            .decode()
            .map_err(|e| PictureError::Unreadable(e.to_string()))?
            .into_rgb8();
        let (fw, fh) = budget.fit(decoded.width(), decoded.height());
        let (long, short) = (fw.max(fh), fw.min(fh));
        if long / short.max(1) > MAX_ASPECT_RATIO {
            return Err(PictureError::TooThin {
                width,
                height,
                limit: MAX_ASPECT_RATIO,
            });
        }
        let resized = if (fw, fh) == decoded.dimensions() {
            decoded
        } else {
            image::imageops::resize(&decoded, fw, fh, image::imageops::FilterType::CatmullRom)
        };
        Ok(Self {
            digest,
            width: fw,
            height: fh,
            rgb: resized.into_raw(),
        })
    }

    /// Build a picture from RGB rows already decoded (`width * height * 3` bytes), with the
    /// digest of those bytes.
    pub fn from_rgb(width: u32, height: u32, rgb: Vec<u8>) -> Result<Self, PictureError> {
        let expected = width as usize * height as usize * 3;
        if rgb.len() != expected || width == 0 || height == 0 {
            return Err(PictureError::Unreadable(format!(
                "{} bytes of RGB for a {width}x{height} image, which needs {expected}",
                rgb.len()
            )));
        }
        let digest: [u8; 32] = Sha256::digest(&rgb).into();
        Ok(Self {
            digest,
            width,
            height,
            rgb,
        })
    }

    /// The SHA-256 of the bytes the picture was decoded from: equal bytes, equal picture.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    pub fn digest_hex(&self) -> String {
        self.digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    /// The pixels, row by row, three bytes (R, G, B) each.
    pub fn rgb(&self) -> &[u8] {
        &self.rgb
    }
}

/// Why an image could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PictureError {
    #[error("the image cannot be read: {0}")]
    Unreadable(String),
    #[error(
        "the image is {width}x{height}, {:.1} megapixels, over the {:.0} megapixels an image may have; \
         resize it before sending",
        (u64::from(*width) * u64::from(*height)) as f64 / 1e6,
        *limit as f64 / 1e6
    )]
    TooLarge { width: u32, height: u32, limit: u64 },
    #[error(
        "the image is {width}x{height}, thinner than the widest aspect ratio a model reads \
         ({limit}:1)"
    )]
    TooThin { width: u32, height: u32, limit: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN: ImageBudget = ImageBudget {
        side: 28,
        max_tokens: 1024,
    };

    fn png(width: u32, height: u32) -> Vec<u8> {
        let image = image::RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8])
        });
        let mut bytes = Vec::new();
        image::DynamicImage::ImageRgb8(image)
            .write_to(
                &mut std::io::Cursor::new(&mut bytes),
                image::ImageFormat::Png,
            )
            .unwrap();
        bytes
    }

    #[test]
    fn a_fitted_image_is_on_the_grid_and_within_the_budget() {
        for (w, h) in [
            (1, 1),
            (27, 29),
            (640, 480),
            (4000, 3000),
            (10_000, 60),
            (60, 9000),
        ] {
            let (fw, fh) = QWEN.fit(w, h);
            assert_eq!(fw % 28, 0, "{w}x{h} -> {fw}x{fh}");
            assert_eq!(fh % 28, 0, "{w}x{h} -> {fw}x{fh}");
            assert!(
                u64::from(fw) * u64::from(fh) <= QWEN.max_pixels(),
                "{w}x{h}"
            );
            assert!(QWEN.tokens(w, h) <= 1024);
        }
        // A small image keeps its size, snapped to the grid.
        assert_eq!(QWEN.fit(56, 84), (56, 84));
        // A photo keeps its aspect ratio as nearly as the grid allows.
        let (fw, fh) = QWEN.fit(4000, 3000);
        assert!((f64::from(fw) / f64::from(fh) - 4.0 / 3.0).abs() < 0.05);
    }

    #[test]
    fn decoding_resizes_to_the_budget_and_names_the_content() {
        let bytes = png(300, 200);
        let small = ImageBudget {
            side: 28,
            max_tokens: 16,
        };
        let picture = Picture::decode(&bytes, small).unwrap();
        assert!(u64::from(picture.width()) * u64::from(picture.height()) <= small.max_pixels());
        assert_eq!(
            picture.rgb().len(),
            picture.width() as usize * picture.height() as usize * 3
        );
        let again = Picture::decode(&bytes, small).unwrap();
        assert_eq!(picture.digest(), again.digest());
        assert_ne!(
            picture.digest(),
            Picture::decode(&png(300, 201), small).unwrap().digest()
        );
    }

    #[test]
    fn sixteen_bit_and_grey_images_are_read_as_rgb() {
        for image in [
            // Large enough that four bytes a pixel would not hold it while decoding.
            image::DynamicImage::ImageRgba16(image::ImageBuffer::from_pixel(
                600,
                500,
                image::Rgba([65535, 0, 30000, 65535]),
            )),
            image::DynamicImage::ImageLuma8(image::ImageBuffer::from_pixel(
                40,
                30,
                image::Luma([90]),
            )),
        ] {
            let mut bytes = Vec::new();
            image
                .write_to(
                    &mut std::io::Cursor::new(&mut bytes),
                    image::ImageFormat::Png,
                )
                .unwrap();
            let picture = Picture::decode(&bytes, QWEN).unwrap();
            assert_eq!(
                picture.rgb().len(),
                picture.width() as usize * picture.height() as usize * 3
            );
        }
    }

    #[test]
    fn unreadable_bytes_and_other_formats_are_refused() {
        let err = Picture::decode(b"not an image at all", QWEN).unwrap_err();
        assert!(err.to_string().contains("neither PNG nor JPEG"), "{err}");
        let mut cut = png(64, 64);
        cut.truncate(cut.len() / 2);
        assert!(matches!(
            Picture::decode(&cut, QWEN),
            Err(PictureError::Unreadable(_))
        ));
        let gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;";
        let err = Picture::decode(gif, QWEN).unwrap_err();
        assert!(err.to_string().contains("only PNG and JPEG"), "{err}");
    }

    #[test]
    fn a_huge_image_is_refused_from_its_header() {
        // A PNG header claiming 10000 x 5000 (50 megapixels) with no pixel data behind it: the
        // refusal comes from the header, before any allocation.
        let mut bytes = png(1, 1);
        bytes[16..20].copy_from_slice(&10_000u32.to_be_bytes());
        bytes[20..24].copy_from_slice(&5_000u32.to_be_bytes());
        let crc = crc32(&bytes[12..29]);
        bytes[29..33].copy_from_slice(&crc.to_be_bytes());
        let err = Picture::decode(&bytes, QWEN).unwrap_err();
        assert!(
            matches!(
                err,
                PictureError::TooLarge {
                    width: 10_000,
                    height: 5_000,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("50.0 megapixels"), "{err}");
    }

    /// CRC-32 as PNG chunks carry it, so an edited header still reads as well-formed.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
