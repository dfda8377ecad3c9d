//! AG News test set (`ag_news/test.csv`, `classes.txt`): a news title and description with
//! one of four topics. Held out only.
//!
//! In this release every line break of a description was replaced by a backslash (the readme
//! says `\n`, but the bytes hold the backslash alone: "A second\team of rocketeers"). A run of
//! backslashes becomes one space here; the HTML-entity remnants (`#39;`, `&lt;`) stay as every
//! AG News benchmark shows them.

use std::path::Path;

use ruling_schema::Question;

use super::{choice, csv_rows, lines, single};
use crate::error::CorpusError;
use crate::record::{Label, Record};

const INSTRUCTIONS: &str = "Which topic is this news article about?";

/// Descriptions of the classes, by the names in `classes.txt`.
const DESCRIPTIONS: [(&str, &str); 4] = [
    (
        "World",
        "world news: politics, conflicts and international affairs",
    ),
    ("Sports", "sport"),
    ("Business", "business: companies, markets and the economy"),
    ("Sci/Tech", "science and technology"),
];

pub(super) struct Row {
    /// Position among the rows, from 0.
    row: usize,
    text: String,
    class: String,
}

/// The question (its options named as in `classes.txt`) and every row of `test.csv`.
pub(super) fn rows(root: &Path) -> Result<(Question, Vec<Row>), CorpusError> {
    let classes_path = root.join("ag_news/classes.txt");
    let classes: Vec<String> = lines(&classes_path)?
        .into_iter()
        .map(|(_, name)| name.trim().to_owned())
        .collect();
    let mut options = Vec::with_capacity(classes.len());
    for class in &classes {
        let Some((name, description)) = DESCRIPTIONS.iter().find(|(n, _)| n == class) else {
            return Err(CorpusError::malformed(
                &classes_path,
                0,
                format!("unknown class {class:?}; expected World, Sports, Business, Sci/Tech"),
            ));
        };
        options.push((*name, Some(*description)));
    }
    let question = choice(INSTRUCTIONS, options);

    let path = root.join("ag_news/test.csv");
    let rows = csv_rows(&path, b',', false, 3)?
        .into_iter()
        .enumerate()
        .map(|(row, (line, record))| {
            let class = record[0]
                .parse::<usize>()
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| classes.get(i))
                .ok_or_else(|| {
                    CorpusError::malformed(
                        &path,
                        line,
                        format!(
                            "class index must be 1 to {}, got {:?}",
                            classes.len(),
                            &record[0]
                        ),
                    )
                })?;
            Ok(Row {
                row,
                text: format!("{}\n{}", unbreak(&record[1]), unbreak(&record[2])),
                class: class.clone(),
            })
        })
        .collect::<Result<_, CorpusError>>()?;
    Ok((question, rows))
}

/// Backslash runs (escaped line breaks) become one space; the text is trimmed.
fn unbreak(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_break = false;
    for c in text.chars() {
        if c == '\\' {
            if !in_break {
                out.push(' ');
            }
            in_break = true;
        } else {
            out.push(c);
            in_break = false;
        }
    }
    out.trim().to_owned()
}

pub(super) fn record(question: &Question, row: &Row) -> Record {
    single(
        "ag-news",
        format!("ag-news:{}", row.row),
        row.text.clone(),
        "topic",
        question.clone(),
        Label::Key(row.class.clone()),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn backslash_breaks_become_spaces() {
        assert_eq!(super::unbreak("A second\\team"), "A second team");
        assert_eq!(super::unbreak("end.\\\\\"Next"), "end. \"Next");
    }
}
