//! How a state and each question become prompt text, with answer codes in a chosen order.
//!
//! A question is shown as its instructions followed by one lettered line per option; the model
//! answers with a letter. A *rotation* is an order of the options: cyclic shifts for a
//! Choice, lowest-first or highest-first for a Score, yes-first or no-first for a Noul.
//! Averaging over rotations cancels the model's preference for a position.

use ruling_schema::{ChoiceOption, Text};

/// The system turn of every prompt.
pub const SYSTEM_PROMPT: &str = "You read the state given by the user and answer a question about it. \
Answer with the letter of exactly one option and nothing else.";

/// What stands in for real content when measuring a model's letter preference.
pub const CONTENT_FREE: &str = "N/A";

/// The keys of a Noul's two options, in canonical order.
pub const NOUL_KEYS: [&str; 2] = ["yes", "no"];

/// One option as shown: its key (what the answer maps back to) and its line of text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownOption {
    pub key: String,
    pub line: String,
}

/// A question rendered with one ordering of its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedQuestion {
    /// The text that follows the state inside the user turn.
    pub text: String,
    /// Option keys in the order their codes were assigned: code `i` means `keys[i]`.
    pub keys: Vec<String>,
    /// Bytes of `text` before the first option's code: the *stem* (the instructions and any
    /// preamble, ending with a newline), the same in every rotation of the question.
    pub stem_len: usize,
    /// Bytes of `text` through the last option's line (the stem and every option, without
    /// the closing instruction).
    pub options_len: usize,
}

/// The line that closes every question: what the model is asked to write.
pub const ANSWER_LINE: &str = "Answer with the letter of one option.";

impl RenderedQuestion {
    /// The question asked *question-first*: its stem and options as the user turn's head
    /// (ending with a newline, the seam `prompt::user_head` keeps), and what follows them, the
    /// state and the closing instruction, as the branch. A question asked about many states
    /// then shares its encoded head across requests.
    pub fn question_first(&self, state_text: &str) -> (String, String) {
        let head = format!("{}\n", &self.text[..self.options_len]);
        let branch = format!("State: {}\n{ANSWER_LINE}", state_text.trim());
        (head, branch)
    }
}

/// Lay out `options` (in canonical order) as a question rotated by `shift` positions, or
/// reversed when `reverse` is set.
pub fn render(
    instructions: &str,
    preamble: &str,
    options: &[ShownOption],
    codes: &[String],
    shift: usize,
    reverse: bool,
) -> RenderedQuestion {
    let n = options.len();
    let order: Vec<usize> = if reverse {
        (0..n).rev().collect()
    } else {
        (0..n).map(|i| (i + shift) % n).collect()
    };
    // The branch starts with a letter, right after the newline that ends the prefix (see
    // `prompt::user_head` for why the seam sits there).
    let mut text = String::from("Question: ");
    text.push_str(instructions.trim());
    if !preamble.is_empty() {
        text.push('\n');
        text.push_str(preamble);
    }
    let stem_len = text.len() + 1;
    for (code, &index) in codes.iter().zip(&order) {
        text.push('\n');
        text.push_str(code);
        text.push_str(". ");
        text.push_str(&options[index].line);
    }
    let options_len = text.len();
    text.push('\n');
    text.push_str(ANSWER_LINE);
    RenderedQuestion {
        text,
        keys: order.iter().map(|&i| options[i].key.clone()).collect(),
        stem_len,
        options_len,
    }
}

/// A Choice's options: `key: description`, or the key alone when there is no description.
pub fn choice_options(options: &[ChoiceOption]) -> Vec<ShownOption> {
    options
        .iter()
        .map(|option| {
            let description = option
                .description
                .as_ref()
                .map(Text::render)
                .unwrap_or_default();
            let line = if description.trim().is_empty() {
                option.key.clone()
            } else {
                format!("{}: {}", option.key, one_line(&description))
            };
            ShownOption {
                key: option.key.clone(),
                line,
            }
        })
        .collect()
}

/// A Score's levels, keyed by their index.
pub fn score_options(levels: &[Text]) -> Vec<ShownOption> {
    levels
        .iter()
        .enumerate()
        .map(|(i, level)| ShownOption {
            key: i.to_string(),
            line: one_line(&level.render()),
        })
        .collect()
}

/// A Noul's two options.
pub fn noul_options() -> Vec<ShownOption> {
    NOUL_KEYS
        .iter()
        .map(|k| ShownOption {
            key: (*k).to_owned(),
            line: (*k).to_owned(),
        })
        .collect()
}

/// What a Noul's criteria say, as lines before the options.
pub fn noul_preamble(if_true: Option<&Text>, if_false: Option<&Text>) -> String {
    let mut lines = Vec::new();
    if let Some(text) = if_true.map(Text::render).filter(|t| !t.trim().is_empty()) {
        lines.push(format!("Answer yes if: {}", one_line(&text)));
    }
    if let Some(text) = if_false.map(Text::render).filter(|t| !t.trim().is_empty()) {
        lines.push(format!("Answer no if: {}", one_line(&text)));
    }
    lines.join("\n")
}

/// Option lines must stay one line each, or a multi-line description could read as options.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
