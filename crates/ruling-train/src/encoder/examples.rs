//! Records into the encoder's examples: each record packed exactly as the engine packs it.

use ruling_corpus::Record;
use ruling_encoder::train::Example;
use ruling_encoder::{EncoderQuestion, EncoderTokenizer, Limits, PrepareError, prepare};
use ruling_schema::Capabilities;

/// What packing the records left out.
#[derive(Debug, Default, Clone, Copy)]
pub struct Skipped {
    pub unlabelled: usize,
    pub too_long: usize,
    pub weightless: usize,
}

/// One example per record that has a labelled question, packed exactly as the engine packs it.
pub fn examples(
    records: &[Record],
    tokenizer: &EncoderTokenizer,
    limits: Limits,
) -> anyhow::Result<(Vec<Example>, Vec<String>, Skipped)> {
    let mut out = Vec::with_capacity(records.len());
    let mut families = Vec::with_capacity(records.len());
    let mut skipped = Skipped::default();
    for record in records {
        if record.weight == 0.0 {
            skipped.weightless += 1;
            continue;
        }
        let valid = record.validate(&Capabilities::default())?;
        let mut questions = Vec::new();
        let mut targets = Vec::new();
        for question in valid.questions() {
            let Some(target) = record.target_distribution(question.id()) else {
                continue;
            };
            let Some(encoded) = EncoderQuestion::from_valid(question) else {
                continue;
            };
            let target: Vec<f32> = encoded
                .options
                .iter()
                .map(|(key, _)| target.get(key).copied().unwrap_or(0.0) as f32)
                .collect();
            questions.push(encoded);
            targets.push(target);
        }
        if questions.is_empty() {
            skipped.unlabelled += 1;
            continue;
        }
        let prepared = match prepare(tokenizer, &valid.state().render(), &questions, limits) {
            Ok(prepared) => prepared,
            Err(PrepareError::Pack { .. }) => {
                skipped.too_long += 1;
                continue;
            }
            Err(other) => return Err(other.into()),
        };
        let targets = prepared
            .order
            .iter()
            .map(|&q| {
                prepared.sorted_options[q]
                    .iter()
                    .map(|&o| targets[q][o])
                    .collect()
            })
            .collect();
        let kinds = prepared.order.iter().map(|&q| questions[q].kind).collect();
        out.push(Example {
            packed: prepared.packed,
            targets,
            kinds,
            weight: record.weight as f32,
        });
        families.push(record.family.clone());
    }
    Ok((out, families, skipped))
}
