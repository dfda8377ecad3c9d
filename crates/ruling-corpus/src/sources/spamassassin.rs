//! The SpamAssassin public mail corpus (`spamassassin/spamassassin.jsonl`): whole RFC-822
//! messages, headers and body, each spam or ham (not spam). The groups `easy-ham-1`,
//! `hard-ham-1` and `spam-1` are development data, `easy-ham-2` and `spam-2` are held out.

use std::path::Path;

use serde::Deserialize;

use super::{jsonl_rows, noul, single};
use crate::dataset::Split;
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "Is this e-mail spam?";

const DEV_GROUPS: [&str; 3] = ["easy-ham-1", "hard-ham-1", "spam-1"];
const HELD_OUT_GROUPS: [&str; 2] = ["easy-ham-2", "spam-2"];

#[derive(Deserialize)]
struct Line {
    text: String,
    label: String,
    group: String,
    id: String,
}

/// One message of the corpus.
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) group: String,
    /// The whole message as it was delivered: headers, a blank line, the body.
    pub(crate) text: String,
    pub(crate) spam: bool,
}

/// The messages of the groups `split` holds, in file order.
pub(crate) fn rows(root: &Path, split: Split) -> Result<Vec<Row>, CorpusError> {
    let path = root.join("spamassassin/spamassassin.jsonl");
    let mut rows = Vec::new();
    for (line, row) in jsonl_rows::<Line>(&path)? {
        let in_split = match split {
            Split::Dev => DEV_GROUPS.contains(&row.group.as_str()),
            Split::HeldOut => HELD_OUT_GROUPS.contains(&row.group.as_str()),
        };
        if !DEV_GROUPS.contains(&row.group.as_str())
            && !HELD_OUT_GROUPS.contains(&row.group.as_str())
        {
            return Err(CorpusError::malformed(
                &path,
                line,
                format!(
                    "group must be one of {:?}, got {:?}",
                    [DEV_GROUPS.as_slice(), HELD_OUT_GROUPS.as_slice()].concat(),
                    row.group
                ),
            ));
        }
        let spam = match row.label.as_str() {
            "spam" => true,
            "ham" => false,
            other => {
                return Err(CorpusError::malformed(
                    &path,
                    line,
                    format!("label must be \"spam\" or \"ham\", got {other:?}"),
                ));
            }
        };
        if in_split {
            rows.push(Row {
                id: row.id,
                group: row.group,
                text: row.text,
                spam,
            });
        }
    }
    Ok(rows)
}

pub(super) fn record(row: &Row) -> Record {
    single(
        "spamassassin",
        format!("spamassassin:{}:{}", row.group, row.id),
        row.text.clone(),
        "spam",
        noul(INSTRUCTIONS),
        Label::Yes(row.spam),
    )
}

/// The message as a reader sees it in a mail client: the `From`, `To`, `Subject` and `Date`
/// headers (the routing headers, often half the message, dropped) and the body.
pub(crate) fn as_read(text: &str) -> String {
    let (headers, body) = text
        .split_once("\n\n")
        .or_else(|| text.split_once("\r\n\r\n"))
        .unwrap_or((text, ""));
    let mut kept = Vec::new();
    let mut current: Option<String> = None;
    for line in headers.lines() {
        if line.starts_with([' ', '\t']) {
            if let Some(header) = current.as_mut() {
                header.push(' ');
                header.push_str(line.trim());
            }
            continue;
        }
        if let Some(header) = current.take() {
            kept.push(header);
        }
        let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
        if ["from", "to", "subject", "date"].contains(&name.as_str()) {
            current = Some(line.trim_end().to_owned());
        }
    }
    kept.extend(current);
    format!("{}\n\n{}", kept.join("\n"), body.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_as_read_keeps_its_reader_headers_and_body() {
        let text = "From x@y.com  Thu Aug 22\nReturn-Path: <a@b>\nReceived: from a\n\tby b\n\
                    From: Ann <ann@example.com>\nSubject: Lunch\n  on Friday\nTo: bob@example.com\n\n\
                    Hi Bob,\nlunch?\n";
        assert_eq!(
            as_read(text),
            "From: Ann <ann@example.com>\nSubject: Lunch on Friday\nTo: bob@example.com\n\nHi Bob,\nlunch?"
        );
    }
}
