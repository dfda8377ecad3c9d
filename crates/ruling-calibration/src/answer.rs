//! Answer types and the per-type temperatures that calibrate them.
//!
//! Each question type reads a different number of answer codes in a different kind of prompt,
//! so each is miscalibrated in its own way and gets its own temperature. This crate keeps its
//! own copy of the three type names instead of depending on `ruling-schema`: calibration
//! stands beside the wire types, not on top of them (box answers carry no distribution and are
//! never calibrated).

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The question types whose answers are a distribution over answer codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerType {
    /// Yes/no: P(yes).
    Noul,
    /// One key out of 2 to 255 options.
    Choice,
    /// An ordinal level out of 2 to 10.
    Score,
}

impl AnswerType {
    /// Every answer type, in a fixed order.
    pub const ALL: [AnswerType; 3] = [AnswerType::Noul, AnswerType::Choice, AnswerType::Score];

    /// The lowercase name used on the wire and in calibration files.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerType::Noul => "noul",
            AnswerType::Choice => "choice",
            AnswerType::Score => "score",
        }
    }
}

impl fmt::Display for AnswerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A temperature that is not a finite number greater than zero.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("temperature for {answer_type} must be finite and greater than zero, got {value}")]
pub struct InvalidTemperature {
    /// Which answer type the temperature was for.
    pub answer_type: AnswerType,
    /// The value refused.
    pub value: f64,
}

/// One temperature per answer type; every one finite and greater than zero by construction.
///
/// The default is 1.0 for every type, which leaves the model's probabilities unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "TemperaturesRecord", into = "TemperaturesRecord")]
pub struct Temperatures {
    noul: f64,
    choice: f64,
    score: f64,
}

impl Default for Temperatures {
    fn default() -> Self {
        Temperatures {
            noul: 1.0,
            choice: 1.0,
            score: 1.0,
        }
    }
}

impl Temperatures {
    /// Temperatures for (noul, choice, score), each checked.
    pub fn new(noul: f64, choice: f64, score: f64) -> Result<Self, InvalidTemperature> {
        let mut temperatures = Temperatures::default();
        temperatures.set(AnswerType::Noul, noul)?;
        temperatures.set(AnswerType::Choice, choice)?;
        temperatures.set(AnswerType::Score, score)?;
        Ok(temperatures)
    }

    /// The temperature for one answer type.
    pub fn get(&self, answer_type: AnswerType) -> f64 {
        match answer_type {
            AnswerType::Noul => self.noul,
            AnswerType::Choice => self.choice,
            AnswerType::Score => self.score,
        }
    }

    /// Replaces one temperature, refusing values that are not finite and greater than zero
    /// (and then leaving the old value in place).
    pub fn set(&mut self, answer_type: AnswerType, value: f64) -> Result<(), InvalidTemperature> {
        if !(value.is_finite() && value > 0.0) {
            return Err(InvalidTemperature { answer_type, value });
        }
        let slot = match answer_type {
            AnswerType::Noul => &mut self.noul,
            AnswerType::Choice => &mut self.choice,
            AnswerType::Score => &mut self.score,
        };
        *slot = value;
        Ok(())
    }
}

/// The serialised shape of [`Temperatures`], unchecked.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TemperaturesRecord {
    pub(crate) noul: f64,
    pub(crate) choice: f64,
    pub(crate) score: f64,
}

impl TryFrom<TemperaturesRecord> for Temperatures {
    type Error = InvalidTemperature;

    fn try_from(record: TemperaturesRecord) -> Result<Self, Self::Error> {
        Temperatures::new(record.noul, record.choice, record.score)
    }
}

impl From<Temperatures> for TemperaturesRecord {
    fn from(t: Temperatures) -> Self {
        TemperaturesRecord {
            noul: t.noul,
            choice: t.choice,
            score: t.score,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_types_serialise_lowercase() {
        let json = serde_json::to_string(&AnswerType::ALL).expect("serialisable");
        assert_eq!(json, r#"["noul","choice","score"]"#);
        let back: Vec<AnswerType> = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, AnswerType::ALL);
        assert_eq!(AnswerType::Choice.to_string(), "choice");
    }

    #[test]
    fn default_temperatures_are_one_and_setting_checks() {
        let mut t = Temperatures::default();
        for answer_type in AnswerType::ALL {
            assert!((t.get(answer_type) - 1.0).abs() < f64::EPSILON);
        }
        t.set(AnswerType::Score, 2.5).expect("valid");
        assert!((t.get(AnswerType::Score) - 2.5).abs() < f64::EPSILON);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = t
                .set(AnswerType::Noul, bad)
                .expect_err("invalid temperature");
            assert_eq!(err.answer_type, AnswerType::Noul);
        }
        assert!((t.get(AnswerType::Noul) - 1.0).abs() < f64::EPSILON);
    }

    #[test]
    fn deserialising_refuses_non_positive_temperatures() {
        let ok: Temperatures =
            serde_json::from_str(r#"{"noul":1.5,"choice":0.7,"score":2.0}"#).expect("valid");
        assert!((ok.get(AnswerType::Choice) - 0.7).abs() < f64::EPSILON);
        assert!(
            serde_json::from_str::<Temperatures>(r#"{"noul":0,"choice":1,"score":1}"#).is_err()
        );
    }
}
