//! The phrases a capacity refusal carries in its message.
//!
//! A capacity refusal is a 400 whose request is well formed but beyond what this model takes:
//! too long for its context, too many options, too few, a score of the wrong size. System One
//! clients tell one from other errors by searching the message for these phrases, so every
//! message that refuses for capacity is built from them, and every reader matches on them.

/// The request, a question or the state does not fit the model's context window.
pub const CONTEXT: &str = "maximum context length";
/// A choice has more options than the model answers in one request.
pub const TOO_MANY_OPTIONS: &str = "options per choice";
/// A choice has fewer than two options.
pub const TOO_FEW_OPTIONS: &str = "a choice needs at least two options";
/// A score has fewer than 2 or more than 10 levels.
pub const SCORE_LEVELS: &str = "a score takes 2 to 10 levels";

/// Every phrase, for a reader that only asks whether a message is a capacity refusal.
pub const ALL: [&str; 4] = [CONTEXT, TOO_MANY_OPTIONS, TOO_FEW_OPTIONS, SCORE_LEVELS];

/// Whether `message` refuses a request for capacity.
pub fn is_refusal(message: &str) -> bool {
    ALL.iter().any(|phrase| message.contains(phrase))
}
