//! Training logs: many development requests to a virtual assistant in one state, one message
//! per line, with questions whose answer lives in one message ("Does any message in this log
//! ask about transfer?", "Which of these does message 12 ask about?"). Short logs fit one
//! window of the encoder; long ones (up to several thousand tokens) teach it to read a state
//! in windows and still find the one line that matters.
//!
//! The messages are CLINC150's development requests less any a held-out split holds; the
//! logs are drawn from the training seed, so the same options give the same logs.

use indexmap::IndexMap;
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use ruling_schema::{State, Text};

use super::{ChoiceOptions, Draft, choice, noul, spaced};
use crate::record::{Label, Record};
use crate::sources::clinc150::OUT_OF_SCOPE;
use crate::sources::needle::{any_message_asks, log};

/// How many messages a log holds: mostly a few, sometimes hundreds (a 600-message log is
/// about 7,000 tokens).
fn length(rng: &mut ChaCha8Rng) -> usize {
    match rng.random_range(0..10) {
        0..=5 => rng.random_range(2..=30),
        6..=8 => rng.random_range(31..=150),
        _ => rng.random_range(151..=600),
    }
}

/// One log record drawn from `rows` (CLINC150 development records with their intent label),
/// intents named from `intents`, domains from `domains`.
pub(super) fn record(
    index: usize,
    rows: &[Record],
    intents: &[String],
    domains: &IndexMap<String, String>,
    rng: &mut ChaCha8Rng,
) -> Record {
    let count = length(rng).min(rows.len());
    let messages: Vec<&Record> = rows.choose_multiple(rng, count).collect();
    let intent_of = |r: &Record| match r.labels.get("intent") {
        Some(Label::Key(key)) if key != OUT_OF_SCOPE => Some(key.clone()),
        _ => None,
    };
    let present: Vec<String> = messages.iter().filter_map(|r| intent_of(r)).collect();
    let texts: Vec<String> = messages.iter().map(|r| r.state.render()).collect();
    let text_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut draft = Draft::default();

    // Does any message ask about an intent: one that is there half the time (always, when a
    // long log holds every intent).
    let absent: Vec<&String> = intents.iter().filter(|i| !present.contains(i)).collect();
    let yes = !present.is_empty() && (absent.is_empty() || rng.random_bool(0.5));
    let asked = if yes {
        present.choose(rng).expect("present").clone()
    } else {
        (*absent.choose(rng).expect("an absent intent")).clone()
    };
    draft.ask("any", any_message_asks(&asked), Label::Yes(yes));

    // What one message asks about, among a few intents, or none of them.
    let k = rng.random_range(0..messages.len());
    let gold = intent_of(messages[k]);
    let others = rng.random_range(3..=9);
    let mut offered: Vec<&String> = intents
        .iter()
        .filter(|i| Some(*i) != gold.as_ref())
        .collect::<Vec<_>>()
        .choose_multiple(rng, others)
        .copied()
        .collect();
    let keep_gold = gold.is_some() && rng.random_bool(0.8);
    if keep_gold {
        offered.push(gold.as_ref().expect("kept"));
    }
    offered.shuffle(rng);
    let mut options: ChoiceOptions = offered
        .iter()
        .map(|i| ((*i).clone(), Text::from(spaced(i))))
        .collect();
    options.push(("none".to_owned(), Text::from("none of the listed intents")));
    let answer = if keep_gold {
        gold.clone().expect("kept")
    } else {
        "none".to_owned()
    };
    draft.ask(
        "message",
        choice(
            format!("Which of these does message {} ask about?", k + 1),
            options,
        ),
        Label::Key(answer),
    );

    // Whether one message is about a domain (a third of the logs).
    if rng.random_bool(0.35) {
        let j = rng.random_range(0..messages.len());
        let own = intent_of(messages[j]).and_then(|i| domains.get(&i).cloned());
        let names: Vec<&String> = domains.values().filter(|d| *d != "meta").collect();
        let domain = match &own {
            Some(d) if d != "meta" && rng.random_bool(0.5) => d.clone(),
            _ => (*names.choose(rng).expect("domains")).clone(),
        };
        draft.ask(
            "domain",
            noul(format!("Is message {} about {}?", j + 1, spaced(&domain))),
            Label::Yes(own.as_deref() == Some(domain.as_str())),
        );
    }

    Record {
        id: Some(format!("logs:{index}")),
        family: "logs".to_owned(),
        state: State::from(log(&text_refs)),
        questions: draft.questions,
        labels: draft.labels,
        references: draft.references,
        weight: 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn row(text: &str, intent: &str) -> Record {
        Record {
            id: None,
            family: "clinc150".into(),
            state: State::from(text.to_owned()),
            questions: IndexMap::new(),
            labels: IndexMap::from([("intent".to_owned(), Label::Key(intent.to_owned()))]),
            references: IndexMap::new(),
            weight: 1.0,
        }
    }

    #[test]
    fn logs_ask_about_their_messages_even_when_every_intent_is_present() {
        let rows = vec![
            row("move 10 dollars to savings", "transfer"),
            row("what is my balance", "balance"),
            row("book a table for two", "restaurant_reservation"),
        ];
        let intents: Vec<String> = ["transfer", "balance", "restaurant_reservation"]
            .map(String::from)
            .to_vec();
        let domains = IndexMap::from([("transfer".to_owned(), "banking".to_owned())]);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for i in 0..200 {
            let record = record(i, &rows, &intents, &domains, &mut rng);
            record
                .validate(&ruling_schema::Capabilities::default())
                .unwrap_or_else(|e| panic!("{e}"));
            let text = record.state.render();
            let Label::Yes(yes) = record.labels["any"] else {
                panic!()
            };
            let ruling_schema::Question::Noul { instructions, .. } = &record.questions["any"]
            else {
                panic!()
            };
            let asked = instructions.render();
            let present = rows.iter().any(|r| {
                let Label::Key(intent) = &r.labels["intent"] else {
                    panic!()
                };
                text.contains(&r.state.render()) && asked.contains(&intent.replace('_', " "))
            });
            assert_eq!(yes, present, "{asked}\n{text}");
        }
    }
}
