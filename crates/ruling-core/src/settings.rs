//! The rotations, prior and calibration a decoder answers with: what the caller gave, the rest
//! from the model's serving profile (`ruling_models::profile`), the rest from the engine's
//! defaults. A calibration is only ever applied to the settings it was fitted for: a given
//! setting that differs from the profile's drops the profile's calibration, and [`Settings`]
//! says so in its `note`, for the server to log.

use std::path::PathBuf;

use ruling_calibration::Calibration;
use ruling_models::{ModelSpec, ServingProfile};

use crate::{CoreError, Options};

/// What a decoder runs with, and where each part came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Orders each question is asked in.
    pub rotations: u32,
    /// Whether the content-free prior is subtracted.
    pub prior: bool,
    /// The calibration applied.
    pub calibration: CalibrationSource,
    /// The serving profile the open settings came from, if the model has one and it was used.
    pub profile: Option<&'static ServingProfile>,
    /// Why the profile's calibration was not applied, when it was not.
    pub note: Option<String>,
}

/// Where a decoder's calibration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CalibrationSource {
    /// None: the model's own scores, temperature 1.
    None,
    /// A file the caller named.
    File(PathBuf),
    /// The serving profile of this catalog model.
    Profile(&'static str),
}

impl Settings {
    /// One line for logs and `/v1/models`: the settings and their origin.
    pub fn describe(&self) -> String {
        let calibration = match &self.calibration {
            CalibrationSource::None => "uncalibrated".to_owned(),
            CalibrationSource::File(path) => format!("calibration {}", path.display()),
            CalibrationSource::Profile(model) => format!("the {model} profile's calibration"),
        };
        let origin = match self.profile {
            Some(profile) => format!("; serving profile measured in {}", profile.measured),
            None => String::new(),
        };
        format!(
            "rotations {}, prior {}, {calibration}{origin}",
            self.rotations,
            if self.prior { "on" } else { "off" },
        )
    }
}

/// The settings `options` asks of the decoder named by `spec`, with the calibration they
/// carry (loaded and parsed; its provenance is checked when the engine is built).
pub(crate) fn resolve(
    spec: &str,
    options: &Options,
) -> Result<(Settings, Option<Calibration>), CoreError> {
    let profile = if options.profile {
        match ModelSpec::parse(spec) {
            Ok(ModelSpec::Catalog(entry)) => ruling_models::profile(entry.name),
            _ => None,
        }
    } else {
        None
    };
    let rotations = options
        .rotations
        .or(profile.map(|p| p.rotations))
        .unwrap_or(1);
    let prior = options.prior.or(profile.map(|p| p.prior)).unwrap_or(false);
    let mut settings = Settings {
        rotations,
        prior,
        calibration: CalibrationSource::None,
        profile,
        note: None,
    };
    if let Some(path) = &options.calibration {
        settings.calibration = CalibrationSource::File(path.clone());
        return Ok((settings, Some(Calibration::load(path)?)));
    }
    let Some((profile, json)) = profile.and_then(|p| p.calibration.map(|c| (p, c))) else {
        return Ok((settings, None));
    };
    if (rotations, prior) != (profile.rotations, profile.prior) {
        settings.note = Some(format!(
            "the {} serving profile's calibration was fitted for rotations {}, prior {}; \
             with rotations {rotations}, prior {} it does not apply, so answers are uncalibrated",
            profile.model,
            profile.rotations,
            on_off(profile.prior),
            on_off(prior),
        ));
        return Ok((settings, None));
    }
    settings.calibration = CalibrationSource::Profile(profile.model);
    Ok((settings, Some(Calibration::from_json(json)?)))
}

/// The settings `options` gives, with no profile: what adapters run with (their calibration
/// is their own, fitted for what they were trained at).
pub(crate) fn explicit(options: &Options) -> Settings {
    Settings {
        rotations: options.rotations.unwrap_or(1),
        prior: options.prior.unwrap_or(false),
        calibration: CalibrationSource::None,
        profile: None,
        note: None,
    }
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(rotations: Option<u32>, prior: Option<bool>) -> Options {
        Options {
            rotations,
            prior,
            ..Options::default()
        }
    }

    #[test]
    fn open_settings_come_from_the_profile_with_its_calibration() {
        let (settings, calibration) = resolve("qwen2.5-coder-1.5b", &options(None, None)).unwrap();
        let profile = ruling_models::profile("qwen2.5-coder-1.5b").unwrap();
        assert_eq!(
            (settings.rotations, settings.prior),
            (profile.rotations, profile.prior)
        );
        assert_eq!(
            settings.calibration,
            CalibrationSource::Profile("qwen2.5-coder-1.5b")
        );
        let calibration = calibration.expect("the profile's calibration");
        assert_eq!(calibration.provenance.rotations, profile.rotations);
        assert_eq!(calibration.provenance.prior, profile.prior);
        assert!(settings.note.is_none());
    }

    #[test]
    fn a_setting_given_that_differs_drops_the_profile_calibration_and_says_why() {
        let (settings, calibration) =
            resolve("qwen2.5-coder-1.5b", &options(Some(3), None)).unwrap();
        assert_eq!(settings.rotations, 3);
        assert!(calibration.is_none());
        assert_eq!(settings.calibration, CalibrationSource::None);
        let note = settings.note.expect("a note");
        assert!(
            note.contains("rotations 1") && note.contains("rotations 3"),
            "{note}"
        );
        // Giving the profile's own value changes nothing.
        let (same, calibration) =
            resolve("qwen2.5-coder-1.5b", &options(Some(1), Some(false))).unwrap();
        assert!(calibration.is_some() && same.note.is_none());
    }

    #[test]
    fn without_a_profile_the_engine_defaults_hold() {
        for (spec, profile) in [("qwen2.5-coder-1.5b", false), ("gemma3-270m", true)] {
            let given = Options {
                profile,
                ..Options::default()
            };
            let (settings, calibration) = resolve(spec, &given).unwrap();
            assert_eq!((settings.rotations, settings.prior), (1, false), "{spec}");
            assert!(calibration.is_none() && settings.profile.is_none());
        }
    }

    #[test]
    fn every_profile_calibration_fits_its_own_settings() {
        for profile in ruling_models::PROFILES {
            assert!(
                ruling_models::catalog::get(profile.model).is_some(),
                "{} is a catalog name",
                profile.model
            );
            if let Some(json) = profile.calibration {
                let calibration = Calibration::from_json(json).unwrap();
                assert_eq!(calibration.provenance.model_id, profile.model);
                assert_eq!(calibration.provenance.rotations, profile.rotations);
                assert_eq!(calibration.provenance.prior, profile.prior);
                assert_eq!(calibration.provenance.adapter_digest, None);
            }
        }
    }
}
