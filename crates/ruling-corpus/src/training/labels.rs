//! Training questions from the labels of the sources added for the distilled judge: whole
//! e-mails (spam or not), State of the Union addresses (which party), text in many languages
//! (which language), WordNet definitions (which supersense), chatbot openers (which topic),
//! quotations (which category).
//!
//! Each row's evaluation question is asked in the ways programs ask such things: a choice over
//! a subset of the labels (2 to 30 of them), its gold label left out a fifth of the time so an
//! abstain option is right; options named by their keys, with descriptions, or by their
//! descriptions under opaque keys; or a yes/no question about one label, the row's own half
//! the time. Spam is a yes/no question asked straight, negated, or as a two-way choice. The
//! wordings follow the taxonomy's kinds (`crate::taxonomy`: language, topic, subject, spam).

use rand::Rng;
use rand::seq::IndexedRandom;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use ruling_schema::Text;

use super::{ChoiceOptions, Draft, asked, choice, label, noul, options_of, pick, wording};
use crate::record::{Label, Record};

/// How one source's labels are asked about.
pub(super) struct LabelQuestions {
    /// The question id of the reader's record (and of the training record's choice).
    pub id: &'static str,
    /// Instructions of the choice; `{none}` is the abstain option's key when there is one.
    pub choice: &'static [&'static str],
    /// Yes/no wordings about one label; `{x}` is the label in words.
    pub noul: &'static [&'static str],
    /// Largest choice offered (the reader's whole set when smaller).
    pub most: usize,
}

pub(super) const LANGUAGE: LabelQuestions = LabelQuestions {
    id: "language",
    choice: &[
        "Which language is this text written in?",
        "What language is this? Answer {none} if it is none of these.",
        "Identify the language of the text.",
        "The text is in which of these languages?",
    ],
    noul: &[
        "Is this text written in {x}?",
        "Is the language of this text {x}?",
        "Would a reader of {x} understand this text?",
    ],
    most: 30,
};

pub(super) const SUPERSENSE: LabelQuestions = LabelQuestions {
    id: "supersense",
    choice: &[
        "What kind of thing or event does this definition describe?",
        "Which category does the defined word belong to? Answer {none} if none fits.",
        "The word defined here names which of these?",
    ],
    noul: &[
        "Does this definition describe {x}?",
        "Is the word defined here {x}?",
    ],
    most: 26,
};

pub(super) const CHAT_TOPIC: LabelQuestions = LabelQuestions {
    id: "topic",
    choice: &[
        "What is this message about?",
        "Which topic does this message to a chatbot belong to? Answer {none} if none fits.",
        "Route this message to the topic it is about.",
    ],
    noul: &[
        "Is this message about {x}?",
        "Does the user want to talk about {x}?",
    ],
    most: 21,
};

pub(super) const QUOTE_CATEGORY: LabelQuestions = LabelQuestions {
    id: "category",
    choice: &[
        "Which category does this quotation belong to?",
        "File this text under one of these categories, or {none}.",
        "What is this saying about?",
    ],
    noul: &[
        "Is this quotation about {x}?",
        "Would this be filed under {x}?",
    ],
    most: 22,
};

pub(super) const PARTY: LabelQuestions = LabelQuestions {
    id: "party",
    choice: &[
        "Which party did the president who gave this address belong to?",
        "This State of the Union address was given by a president of which party?",
        "Which party's president gave this speech? Answer {none} if none of these.",
    ],
    noul: &[
        "Was this address given by a president of {x}?",
        "Did a president of {x} give this speech?",
    ],
    most: 8,
};

/// Abstain options, key and description.
const ABSTAIN: [(&str, &str); 3] = [
    ("none", "none of the other options"),
    ("other", "something not listed"),
    ("none of these", "no listed option fits"),
];

/// How options are shown.
#[derive(Clone, Copy)]
enum Style {
    /// As the reader's question shows them.
    Evaluation,
    /// Keys alone.
    Bare,
    /// Letters as keys, the label (and its description) as the description: the option is
    /// known only by what it says.
    Opaque,
}

/// The training questions of one labelled row.
pub(super) fn draft(row: &Record, asking: &LabelQuestions, rng: &mut ChaCha8Rng) -> Draft {
    let evaluation = asked(row, asking.id);
    let labels = options_of(evaluation);
    let Label::Key(gold) = label(row, asking.id) else {
        panic!("{}: a {} label is a key", row.display_id(), asking.id);
    };
    let gold = labels
        .iter()
        .position(|(key, _)| key == gold)
        .unwrap_or_else(|| panic!("{}: {gold:?} is not offered", row.display_id()));
    let mut draft = Draft::default();
    if rng.random_bool(0.3) {
        // One label, the row's own half the time.
        let yes = rng.random_bool(0.5);
        let asked = if yes {
            gold
        } else {
            *(0..labels.len())
                .filter(|&i| i != gold)
                .collect::<Vec<_>>()
                .choose(rng)
                .expect("two labels or more")
        };
        let (key, description) = &labels[asked];
        let words = if description.is_null() || rng.random_bool(0.5) {
            key.replace(['_', '.'], " ")
        } else {
            description.render()
        };
        let template = pick(rng, asking.noul);
        draft.ask(
            asking.id,
            noul(template.replace("{x}", &words)),
            Label::Yes(yes),
        );
        return draft;
    }
    let Some(template) = wording(rng, asking.choice) else {
        draft.ask(
            asking.id,
            evaluation.clone(),
            Label::Key(labels[gold].0.clone()),
        );
        return draft;
    };
    let size = rng.random_range(2..=asking.most.min(labels.len()));
    let keep_gold = rng.random_bool(0.8);
    let others: Vec<usize> = (0..labels.len()).filter(|&i| i != gold).collect();
    let mut offered: Vec<usize> = others
        .choose_multiple(rng, (size - usize::from(keep_gold)).min(others.len()))
        .copied()
        .collect();
    if keep_gold {
        offered.push(gold);
    }
    offered.shuffle(rng);
    let style = *pick(rng, &[Style::Evaluation, Style::Bare, Style::Opaque]);
    let mut options: ChoiceOptions = offered
        .iter()
        .enumerate()
        .map(|(n, &i)| {
            let (key, description) = &labels[i];
            match style {
                Style::Evaluation => (key.clone(), description.clone()),
                Style::Bare => (key.clone(), Text::null()),
                Style::Opaque => {
                    let words = if description.is_null() {
                        key.replace(['_', '.'], " ")
                    } else {
                        format!("{}: {}", key.replace(['_', '.'], " "), description.render())
                    };
                    (opaque_key(n), Text::from(words))
                }
            }
        })
        .collect();
    let needs_abstain = !keep_gold || template.contains("{none}") || rng.random_bool(0.2);
    let mut abstain = None;
    if needs_abstain {
        let (key, description) = *pick(rng, &ABSTAIN);
        let key = match style {
            Style::Opaque => opaque_key(options.len()),
            _ => key.to_owned(),
        };
        options.push((key.clone(), Text::from(description)));
        abstain = Some(key);
    }
    let answer = if keep_gold {
        let at = offered.iter().position(|&i| i == gold).expect("kept");
        options[at].0.clone()
    } else {
        abstain
            .clone()
            .expect("an abstain option when the gold label is left out")
    };
    let instructions = template.replace("{none}", abstain.as_deref().unwrap_or("none"));
    draft.ask(asking.id, choice(instructions, options), Label::Key(answer));
    draft
}

/// The `n`-th opaque key: `A` to `Z`, then `option 27` and on.
fn opaque_key(n: usize) -> String {
    match u8::try_from(n) {
        Ok(n) if n < 26 => char::from(b'A' + n).to_string(),
        _ => format!("option {}", n + 1),
    }
}

/// Spam asked straight, negated, or as a two-way choice; the label is the reader's.
pub(super) fn spam(row: &Record, rng: &mut ChaCha8Rng) -> Draft {
    let Label::Yes(spam) = *label(row, "spam") else {
        panic!("{}: a spam label is a boolean", row.display_id());
    };
    let mut draft = Draft::default();
    match rng.random_range(0..6) {
        0 | 1 => draft.ask("spam", asked(row, "spam").clone(), Label::Yes(spam)),
        2 => draft.ask(
            "spam",
            noul(*pick(
                rng,
                &[
                    "Is this unsolicited bulk e-mail?",
                    "Would a spam filter be right to block this message?",
                    "Is this e-mail junk?",
                ],
            )),
            Label::Yes(spam),
        ),
        3 => draft.ask(
            "legitimate",
            noul(*pick(
                rng,
                &[
                    "Is this a legitimate e-mail, not spam?",
                    "Should this message reach the inbox?",
                    "Is this a genuine message to its recipient?",
                ],
            )),
            Label::Yes(!spam),
        ),
        _ => {
            let (yes_key, no_key) = *pick(
                rng,
                &[("spam", "ham"), ("spam", "legitimate"), ("junk", "inbox")],
            );
            let mut options = vec![
                (
                    yes_key.to_owned(),
                    Text::from("unsolicited bulk or fraudulent mail"),
                ),
                (
                    no_key.to_owned(),
                    Text::from("a real message to its recipient"),
                ),
            ];
            options.shuffle(rng);
            let answer = if spam { yes_key } else { no_key };
            draft.ask(
                "kind",
                choice(
                    *pick(
                        rng,
                        &[
                            "What kind of e-mail is this?",
                            "How should this message be filed?",
                        ],
                    ),
                    options,
                ),
                Label::Key(answer.to_owned()),
            );
        }
    }
    draft
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use ruling_schema::Question;

    #[test]
    fn opaque_keys_are_letters_then_numbered() {
        assert_eq!(opaque_key(0), "A");
        assert_eq!(opaque_key(25), "Z");
        assert_eq!(opaque_key(26), "option 27");
    }

    #[test]
    fn labelled_drafts_are_valid_and_their_labels_name_an_option() {
        let question = choice(
            "Which?",
            vec![
                ("a".into(), Text::from("the first")),
                ("b".into(), Text::null()),
                ("c".into(), Text::from("the third")),
            ],
        );
        let row = Record {
            id: Some("x:1".into()),
            family: "x".into(),
            state: ruling_schema::State::from("text"),
            questions: [("topic".to_owned(), question)].into_iter().collect(),
            labels: [("topic".to_owned(), Label::Key("b".into()))]
                .into_iter()
                .collect(),
            references: Default::default(),
            weight: 1.0,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut saw_abstain = false;
        for _ in 0..200 {
            let draft = draft(&row, &CHAT_TOPIC, &mut rng);
            let (id, question) = draft.questions.first().expect("one question");
            let record = Record {
                questions: draft.questions.clone(),
                labels: draft.labels.clone(),
                ..row.clone()
            };
            record
                .validate(&ruling_schema::Capabilities::default())
                .unwrap_or_else(|e| panic!("{e}"));
            if let (Question::Choice { criteria, .. }, Label::Key(key)) =
                (question, &draft.labels[id])
            {
                saw_abstain |= ABSTAIN.iter().any(|(k, _)| k == key)
                    || criteria[key].render().contains("no listed");
            }
        }
        assert!(saw_abstain, "the gold label is sometimes left out");
    }
}
