//! Calibration for ruling: turning the logits an engine reads at the answer position into
//! probabilities that mean what they say. It owns the numerically stable softmax, the
//! per-answer-type temperatures and their fitting on labelled logits, the calibration file
//! that ties temperatures to the exact readout they were fitted for (and refuses any other),
//! the confidence reported next to choice and score answers, the metrics (ECE with its
//! reliability diagram, Brier, log loss, coverage at an error rate, accuracy, macro-F1, the
//! mean absolute error of an expected level, KL divergence from a soft target, flip rate) that
//! judge all of it, and a seeded paired bootstrap for how sure a measured difference is.
//!
//! It depends on no tensor library and not on `ruling-schema`: everything here is plain
//! `f64` slices, so the engine, the trainer and the evaluator share one definition of each
//! quantity.

pub mod answer;
pub mod bootstrap;
pub mod confidence;
pub mod distribution;
pub mod file;
pub mod metrics;
pub mod softmax;
pub mod temperature;

pub use answer::{AnswerType, InvalidTemperature, Temperatures};
pub use bootstrap::{
    BootstrapInterval, BootstrapOptions, paired_bootstrap, quantile, runs_bootstrap,
};
pub use confidence::{choice_confidence, score_confidence};
pub use distribution::{DistributionError, check_distribution};
pub use file::{Calibration, CalibrationError, FORMAT_VERSION, Provenance, ProvenanceField};
pub use metrics::{
    KL_EPSILON, MetricError, ReliabilityBin, ReliabilityDiagram, accuracy, argmax, argmax_or_first,
    brier_score, brier_score_soft, coverage_at_error, expected_calibration_error, expected_level,
    flip_rate, kl_divergence, log_loss, log_loss_soft, macro_f1, mean_absolute_error,
    mean_kl_divergence, reliability_diagram,
};
pub use softmax::{
    SoftmaxError, log_softmax, log_softmax_with_temperature, log_sum_exp, softmax,
    softmax_with_temperature,
};
pub use temperature::{
    CHI_SQUARED_1_95, FitError, FitOptions, FitResult, FitSummary, LabelledLogits, MAX_TEMPERATURE,
    MIN_TEMPERATURE, SampleError, Target, TemperatureFit, fit_temperature, fit_temperature_with,
    fit_temperatures, fit_temperatures_with,
};
