//! Log-space numbers on the wire: `-inf` is a real value there (a key an order did not show,
//! an option a two-stage choice dropped), but JSON has no way to write it. Every non-finite
//! number is written as `null` and `null` is read back as `-inf`, the only non-finite value a
//! log-probability is meant to take; the JSON Schema says "number or null".
//!
//! Used through `#[serde(with = "...")]` and `#[schemars(schema_with = "...")]`, one module per
//! field shape.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One number as `null` when it is not finite.
struct Nullable(f64);

impl Serialize for Nullable {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.is_finite() {
            serializer.serialize_f64(self.0)
        } else {
            serializer.serialize_none()
        }
    }
}

impl<'de> Deserialize<'de> for Nullable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self(
            Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NEG_INFINITY),
        ))
    }
}

fn number_schema() -> Schema {
    json_schema!({
        "type": ["number", "null"],
        "format": "double",
    })
}

/// An `f64`.
pub mod scalar {
    use super::*;

    pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
        Nullable(*value).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        Ok(Nullable::deserialize(deserializer)?.0)
    }

    pub fn schema(_: &mut SchemaGenerator) -> Schema {
        number_schema()
    }
}

/// A `Vec<f64>`.
pub mod seq {
    use super::*;

    pub fn serialize<S: Serializer>(values: &[f64], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(values.iter().map(|&v| Nullable(v)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<f64>, D::Error> {
        let values = Vec::<Nullable>::deserialize(deserializer)?;
        Ok(values.into_iter().map(|v| v.0).collect())
    }

    pub fn schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "array",
            "items": number_schema(),
        })
    }
}

/// An `Option<Vec<f64>>`, `null` as a whole when absent.
pub mod optional_seq {
    use super::*;

    pub fn serialize<S: Serializer>(
        values: &Option<Vec<f64>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match values {
            Some(values) => super::seq::serialize(values, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<f64>>, D::Error> {
        let values = Option::<Vec<Nullable>>::deserialize(deserializer)?;
        Ok(values.map(|values| values.into_iter().map(|v| v.0).collect()))
    }

    pub fn schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": ["array", "null"],
            "items": number_schema(),
        })
    }
}
