//! Records as JSON Lines: one record per line, blank lines skipped on reading.
//!
//! Writing goes to a temporary file next to the destination, is synced, and is renamed into
//! place, so a reader sees the old file or the whole new one, never half of it.

use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::CorpusError;
use crate::record::Record;

/// Reads every record of a JSONL file.
pub fn read_jsonl(path: impl AsRef<Path>) -> Result<Vec<Record>, CorpusError> {
    let path = path.as_ref();
    let file = fs::File::open(path).map_err(CorpusError::io(path))?;
    read_jsonl_from(BufReader::new(file), path)
}

/// Reads every record from `reader`; `path` names the source in errors.
pub fn read_jsonl_from(reader: impl BufRead, path: &Path) -> Result<Vec<Record>, CorpusError> {
    let mut records = Vec::new();
    for (index, line) in reader.lines().enumerate() {
        let line = line.map_err(CorpusError::io(path))?;
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(&line).map_err(|source| CorpusError::Json {
            path: path.to_owned(),
            line: index as u64 + 1,
            source,
        })?;
        records.push(record);
    }
    Ok(records)
}

/// Writes `records` to `path`, one per line, replacing the file atomically.
pub fn write_jsonl(path: impl AsRef<Path>, records: &[Record]) -> Result<(), CorpusError> {
    let path = path.as_ref();
    let temporary = temporary_path(path);
    let written = write_all(&temporary, records)
        .and_then(|()| fs::rename(&temporary, path).map_err(CorpusError::io(path)));
    if written.is_err() {
        // Best effort: the write error is the one worth reporting.
        let _ = fs::remove_file(&temporary);
    }
    written
}

fn write_all(temporary: &Path, records: &[Record]) -> Result<(), CorpusError> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temporary)
        .map_err(CorpusError::io(temporary))?;
    let mut out = BufWriter::new(file);
    for (index, record) in records.iter().enumerate() {
        serde_json::to_writer(&mut out, record).map_err(|source| CorpusError::Json {
            path: temporary.to_owned(),
            line: index as u64 + 1,
            source,
        })?;
        out.write_all(b"\n").map_err(CorpusError::io(temporary))?;
    }
    let file = out
        .into_inner()
        .map_err(|e| CorpusError::io(temporary)(e.into_error()))?;
    // Without the sync a crash after the rename could leave an empty file in place.
    file.sync_all().map_err(CorpusError::io(temporary))
}

/// A name next to `path` that no other writer (thread or process) picks at the same time.
fn temporary_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "records.jsonl".to_owned());
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}.{unique}.tmp", std::process::id()))
}
