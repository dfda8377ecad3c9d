//! "Does this text mention X?" about long documents, answered by the text itself: a name the
//! document holds only once or twice (a needle in thousands of tokens), or one another
//! document of the same collection holds and this one never does. Whole State of the Union
//! addresses and whole chapters of Moby-Dick are asked this way, so the encoder learns to find
//! one line in a state read in many windows.

use std::collections::{BTreeMap, HashSet};

use rand::Rng;
use rand::seq::IndexedRandom;
use rand_chacha::ChaCha8Rng;

use super::{Draft, noul, pick};
use crate::record::Label;

const WORDINGS: [&str; 4] = [
    "Does this text mention {x}?",
    "Is {x} named anywhere in the text?",
    "Does the document refer to {x}?",
    "Is there any mention of {x} in this text?",
];

/// Capitalised words of five letters or more, with how often each occurs.
fn names(text: &str) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let mut chars = word.chars();
        let capitalised =
            chars.next().is_some_and(char::is_uppercase) && chars.clone().all(char::is_lowercase);
        if capitalised && word.len() >= 5 {
            *counts.entry(word).or_insert(0) += 1;
        }
    }
    counts
}

/// Every word of `text`, for telling whether a name occurs at all.
fn words(text: &str) -> HashSet<&str> {
    text.split(|c: char| !c.is_alphanumeric()).collect()
}

/// One mention question about `text` (`others`: other documents of its collection): a rare name
/// of its own half the time, else a name only others hold. `None` when neither exists.
pub(super) fn ask(
    text: &str,
    others: &[&str],
    id: &str,
    rng: &mut ChaCha8Rng,
    draft: &mut Draft,
) -> Option<()> {
    let own = names(text);
    let present = words(text);
    let rare: Vec<&str> = own
        .iter()
        .filter(|(_, n)| **n <= 2)
        .map(|(w, _)| *w)
        .collect();
    let yes = !rare.is_empty() && rng.random_bool(0.5);
    let name = if yes {
        *rare.choose(rng)?
    } else {
        let mut found = None;
        for _ in 0..8 {
            let other = others.choose(rng)?;
            let candidates: Vec<&str> = names(other)
                .into_keys()
                .filter(|w| !present.contains(w))
                .collect();
            if let Some(w) = candidates.choose(rng) {
                found = Some(*w);
                break;
            }
        }
        found?
    };
    let template = pick(rng, &WORDINGS);
    draft.ask(id, noul(template.replace("{x}", name)), Label::Yes(yes));
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn mentions_are_answered_by_the_text() {
        let text = "The Pequod sailed from Nantucket. Ahab stood on deck. Ahab spoke.";
        let others = ["Starbuck watched the Albatross pass by."];
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let (mut yes, mut no) = (0, 0);
        for i in 0..40 {
            let mut draft = Draft::default();
            ask(text, &others, "m", &mut rng, &mut draft).expect("a question");
            let Label::Yes(answer) = draft.labels["m"] else {
                panic!()
            };
            let asked = draft.questions["m"].clone();
            let ruling_schema::Question::Noul { instructions, .. } = asked else {
                panic!()
            };
            let asked = instructions.render();
            let name = ["Pequod", "Nantucket", "Starbuck", "Albatross"]
                .into_iter()
                .find(|n| asked.contains(n))
                .unwrap_or_else(|| panic!("{i}: {asked}"));
            assert_eq!(answer, text.contains(name), "{asked}");
            if answer { yes += 1 } else { no += 1 }
        }
        assert!(yes > 5 && no > 5);
    }
}
