//! The public surface end to end: fit temperatures, store them with their provenance, read
//! them back for an engine, and refuse them for any other readout.

use std::fs;
use std::path::PathBuf;

use ruling_calibration::{
    AnswerType, Calibration, CalibrationError, LabelledLogits, Provenance, ProvenanceField, Target,
    Temperatures, fit_temperatures, softmax, softmax_with_temperature,
};

/// A fresh, empty directory for one test, under Cargo's per-target scratch space.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("ruling-calibration")
        .join(name);
    // A previous run may have left it; start clean so the directory listings below are exact.
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

fn entries(dir: &PathBuf) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read scratch directory")
        .map(|e| {
            e.expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

fn provenance() -> Provenance {
    Provenance {
        model_id: "HuggingFaceTB/SmolLM2-135M-Instruct".to_owned(),
        revision: None,
        rotations: 2,
        prior: false,
        adapter_digest: Some("sha256:0123".to_owned()),
    }
}

fn fitted_calibration() -> Calibration {
    // Noul answers from an overconfident readout: [ln 4, 0] says 0.8 but is right 3 times in 5,
    // so the fit must soften it.
    let mut samples = Vec::new();
    for i in 0..50 {
        let target = if i % 5 < 3 { 0 } else { 1 };
        samples.push((
            AnswerType::Noul,
            LabelledLogits {
                logits: vec![4f64.ln(), 0.0],
                target: Target::Hard(target),
            },
        ));
    }
    samples.push((
        AnswerType::Choice,
        LabelledLogits {
            logits: vec![1.0, 0.0, -1.0],
            target: Target::Soft(vec![0.5, 0.3, 0.2]),
        },
    ));
    let fit = fit_temperatures(&samples).expect("valid samples");
    Calibration::from_fit(provenance(), fit, Some("2025-06-01T12:00:00Z".to_owned()))
}

#[test]
fn save_then_load_round_trips_and_leaves_only_the_file() {
    let dir = scratch_dir("round_trip");
    let path = dir.join("calibration.json");
    let calibration = fitted_calibration();
    calibration.save(&path).expect("save");
    assert_eq!(entries(&dir), vec!["calibration.json".to_owned()]);

    let back = Calibration::load(&path).expect("load");
    assert_eq!(back, calibration);
    let summary = back.fitted.as_ref().expect("fit summary kept");
    assert_eq!(summary.per_type[&AnswerType::Noul].samples, 50);
    assert_eq!(back.created.as_deref(), Some("2025-06-01T12:00:00Z"));

    // Saving again replaces the file in place, still without leftovers.
    let identity = Calibration::identity(provenance());
    identity.save(&path).expect("overwrite");
    assert_eq!(entries(&dir), vec!["calibration.json".to_owned()]);
    assert_eq!(Calibration::load(&path).expect("load"), identity);
}

#[test]
fn fitted_temperature_calibrates_the_readout() {
    let calibration = fitted_calibration();
    // P(yes) = 0.8 before; the data says 0.6, and the maximum-likelihood temperature gets
    // exactly there: 4^(1/T) = 1.5.
    let t = calibration.temperature(AnswerType::Noul);
    let want = 4f64.ln() / 1.5f64.ln();
    assert!((t - want).abs() < 1e-6, "temperature {t}, want {want}");
    let before = softmax(&[4f64.ln(), 0.0]).expect("finite logits");
    let after = softmax_with_temperature(&[4f64.ln(), 0.0], t).expect("finite logits");
    assert!((before[0] - 0.8).abs() < 1e-12);
    assert!((after[0] - 0.6).abs() < 1e-6);
    assert!((calibration.temperature(AnswerType::Score) - 1.0).abs() < f64::EPSILON);
}

#[test]
fn load_checked_refuses_another_readout() {
    let dir = scratch_dir("refusal");
    let path = dir.join("calibration.json");
    fitted_calibration().save(&path).expect("save");

    Calibration::load_checked(&path, &provenance()).expect("same provenance");
    let mut engine = provenance();
    engine.adapter_digest = None;
    match Calibration::load_checked(&path, &engine) {
        Err(CalibrationError::ProvenanceMismatch {
            field,
            calibrated_for,
            engine,
        }) => {
            assert_eq!(field, ProvenanceField::AdapterDigest);
            assert_eq!(calibrated_for, "sha256:0123");
            assert_eq!(engine, "none");
        }
        other => panic!("expected an adapter_digest mismatch, got {other:?}"),
    }
}

#[test]
fn invalid_temperature_on_disk_is_a_typed_error() {
    let dir = scratch_dir("invalid_temperature");
    let path = dir.join("calibration.json");
    let mut calibration = Calibration::identity(provenance());
    calibration.temperatures = Temperatures::new(1.0, 2.0, 3.0).expect("valid");
    let text = calibration
        .to_json()
        .expect("serialisable")
        .replace("\"choice\": 2.0", "\"choice\": -2.0");
    fs::write(&path, text).expect("write");
    assert!(matches!(
        Calibration::load(&path),
        Err(CalibrationError::InvalidTemperature(e)) if e.answer_type == AnswerType::Choice
    ));
}

#[test]
fn failed_save_reports_the_path_and_leaves_nothing() {
    let dir = scratch_dir("failed_save");
    let path = dir.join("missing").join("calibration.json");
    match Calibration::identity(provenance()).save(&path) {
        Err(CalibrationError::Io { path: reported, .. }) => assert_eq!(reported, path),
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert!(entries(&dir).is_empty());
    assert!(matches!(
        Calibration::load(dir.join("absent.json")),
        Err(CalibrationError::Io { .. })
    ));
}
