//! Records through JSONL: a round trip keeps them exactly, a bad line is reported with the file
//! and line, and a write replaces the file whole.

use std::path::PathBuf;

use ruling_corpus::{CorpusError, Dataset, LoadOptions, Split, load, read_jsonl, write_jsonl};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("corpus-jsonl");
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir.join(name)
}

fn options() -> LoadOptions {
    LoadOptions {
        root: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets")),
        limit: Some(20),
        seed: 1,
    }
}

#[test]
fn records_round_trip_through_jsonl() {
    let mut records = Vec::new();
    for dataset in [Dataset::ChaosnliSnli, Dataset::Sst5, Dataset::Goemotions] {
        records.extend(load(dataset, Split::Dev, &options()).expect("loads"));
    }
    let path = scratch("round-trip.jsonl");
    write_jsonl(&path, &records).expect("written");
    assert_eq!(read_jsonl(&path).expect("read back"), records);
    let text = std::fs::read_to_string(&path).expect("readable");
    assert_eq!(text.lines().count(), records.len(), "one record per line");
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("a line")).expect("JSON");
    let keys: Vec<&str> = first
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "id",
            "family",
            "state",
            "questions",
            "labels",
            "references",
            "weight"
        ]
    );

    // Rewriting replaces the file and leaves no temporary file behind.
    write_jsonl(&path, &records[..3]).expect("rewritten");
    assert_eq!(read_jsonl(&path).expect("read back").len(), 3);
    let leftovers = std::fs::read_dir(path.parent().expect("a folder"))
        .expect("listable")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .count();
    assert_eq!(leftovers, 0);
}

#[test]
fn a_bad_line_names_file_and_line() {
    let path = scratch("bad.jsonl");
    std::fs::write(
        &path,
        "{\"family\": \"f\", \"state\": \"s\", \"questions\": {\"q\": {\"type\": \"noul\", \"instructions\": null}}}\n\
         \n\
         {\"family\": \"f\", \"state\": 3, \"questions\": {}}\n",
    )
    .expect("written");
    let error = read_jsonl(&path).expect_err("line 3 has a number for a state");
    assert!(
        matches!(error, CorpusError::Json { line: 3, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("bad.jsonl:3:"), "{error}");

    let missing = scratch("missing.jsonl");
    let error = read_jsonl(&missing).expect_err("no such file");
    assert!(error.to_string().contains("missing.jsonl"), "{error}");
}

#[test]
fn a_record_from_another_tool_reads_with_defaults() {
    // No id, no references, no weight: what the seeds' distillation wrote.
    let path = scratch("minimal.jsonl");
    std::fs::write(
        &path,
        "{\"family\": \"distill\", \"state\": {\"k\": 1}, \
          \"questions\": {\"q\": {\"type\": \"score\", \"instructions\": \"How?\", \"criteria\": [\"low\", \"high\"]}}, \
          \"labels\": {\"q\": 1}}\n",
    )
    .expect("written");
    let records = read_jsonl(&path).expect("reads");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].id, None);
    assert!((records[0].weight - 1.0).abs() < f64::EPSILON);
    records[0]
        .validate(&ruling_schema::Capabilities::default())
        .expect("valid");
}
