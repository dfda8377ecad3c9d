//! Splitting a rendered chat into the prefix every question shares and the tail each repeats.

use crate::backend::{Backend, ChatMessage, Role};
use crate::error::ContractError;

/// Written at the end of the user turn so the rendered template can be cut there. It is
/// unlikely in real text, and a state containing it is refused rather than mis-split.
pub const SPLIT_MARKER: &str = "\u{241E}ruling:split\u{241E}";

/// A rendered prompt cut at the end of the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptSplit {
    /// Everything through the state: encoded once and shared by every branch.
    pub prefix: String,
    /// What the template writes after the user turn (end of turn, assistant start): every
    /// branch is a question's text followed by this.
    pub tail: String,
}

/// The user turn up to the split: the state with trailing whitespace removed and one newline.
///
/// Where the prefix ends decides whether encoding it apart from the branch gives the tokens
/// encoding them together would. Pre-tokenizers merge runs that cross such a seam in two ways:
/// GPT-2-style ones keep a run of newlines whole only at the end of a text (so a prefix ending
/// in a blank line splits differently once a question follows), and Qwen's join punctuation with
/// the newlines after it (so a branch starting with a newline merges with a state ending in a
/// full stop). One newline at the end of the prefix and a branch starting with a letter is a
/// seam neither family crosses; `verify_backend` checks it for each model at load.
pub fn user_head(state_text: &str) -> String {
    format!("{}\n", state_text.trim_end())
}

/// Render `system` and the user turn `user_head` through the template and cut the result
/// where `user_head` ends. A template without a system role gets the system text at the top
/// of the user turn instead.
pub fn split_prompt<B: Backend + ?Sized>(
    backend: &B,
    system: &str,
    user_head: &str,
) -> Result<PromptSplit, ContractError> {
    if user_head.contains(SPLIT_MARKER) {
        return Err(ContractError::StateContainsMarker {
            marker: SPLIT_MARKER,
        });
    }
    let rendered = backend.render_chat(&conversation(
        backend,
        system,
        &format!("{user_head}{SPLIT_MARKER}"),
    ))?;
    let mut parts = rendered.split(SPLIT_MARKER);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(prefix), Some(tail), None) => Ok(PromptSplit {
            prefix: prefix.to_owned(),
            tail: tail.to_owned(),
        }),
        _ => Err(ContractError::MarkerNotPreserved {
            found: rendered.matches(SPLIT_MARKER).count(),
        }),
    }
}

/// The messages for one user turn, with the system text where the template can take it.
pub(crate) fn conversation<B: Backend + ?Sized>(
    backend: &B,
    system: &str,
    user: &str,
) -> Vec<ChatMessage> {
    if system.is_empty() {
        vec![ChatMessage::new(Role::User, user)]
    } else if backend.accepts_system_role() {
        vec![
            ChatMessage::new(Role::System, system),
            ChatMessage::new(Role::User, user),
        ]
    } else {
        vec![ChatMessage::new(Role::User, format!("{system}\n\n{user}"))]
    }
}
