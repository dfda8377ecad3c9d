//! Append-only JSON Lines journals: the files a long run writes as it goes and reads back to
//! resume after a kill.
//!
//! Each append is one `write` of whole lines ending in a newline, flushed and synced, so a kill
//! can leave at most one unterminated line at the end. Reading keeps the complete lines and
//! reports the bytes of that tail; [`repair`] cuts it off before appending again. A complete
//! line that does not parse is an error naming the line: that is not what a kill leaves.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::CorpusError;

/// A journal read back: its complete lines, and the unterminated tail a cut write left.
#[derive(Debug)]
pub struct ReadBack<T> {
    pub lines: Vec<T>,
    /// Length of the complete lines: where [`repair`] cuts the file.
    pub complete_bytes: u64,
    /// Bytes of an unterminated last line; 0 when the file ends with a newline.
    pub partial_bytes: u64,
}

impl<T> Default for ReadBack<T> {
    fn default() -> Self {
        Self {
            lines: Vec::new(),
            complete_bytes: 0,
            partial_bytes: 0,
        }
    }
}

/// Reads a journal. A missing file reads as empty; blank lines are skipped.
pub fn read_journal<T: DeserializeOwned>(path: &Path) -> Result<ReadBack<T>, CorpusError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ReadBack::default()),
        Err(e) => return Err(CorpusError::io(path)(e)),
    };
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut lines = Vec::new();
    for (index, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value = serde_json::from_slice(line).map_err(|source| CorpusError::Json {
            path: path.to_owned(),
            line: index as u64 + 1,
            source,
        })?;
        lines.push(value);
    }
    Ok(ReadBack {
        lines,
        complete_bytes: complete as u64,
        partial_bytes: (bytes.len() - complete) as u64,
    })
}

/// Cuts the unterminated last line a killed writer left, so appending starts on a fresh line.
/// Returns how many bytes were dropped.
pub fn repair<T>(path: &Path, read: &ReadBack<T>) -> Result<u64, CorpusError> {
    if read.partial_bytes == 0 {
        return Ok(0);
    }
    let file = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(CorpusError::io(path))?;
    file.set_len(read.complete_bytes)
        .and_then(|()| file.sync_all())
        .map_err(CorpusError::io(path))?;
    Ok(read.partial_bytes)
}

/// Appends lines to a journal, creating it (and its folder) on first use.
#[derive(Debug)]
pub struct Appender {
    file: fs::File,
    path: PathBuf,
}

impl Appender {
    pub fn open(path: &Path) -> Result<Self, CorpusError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(CorpusError::io(parent))?;
        }
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(CorpusError::io(path))?;
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }

    /// Appends one line.
    pub fn append<T: Serialize>(&mut self, line: &T) -> Result<(), CorpusError> {
        self.append_all(std::slice::from_ref(line))
    }

    /// Appends every line in one write, so a kill keeps all of them or none but the last's
    /// unterminated tail (which [`repair`] removes).
    pub fn append_all<T: Serialize>(&mut self, lines: &[T]) -> Result<(), CorpusError> {
        let mut bytes = Vec::new();
        for (index, line) in lines.iter().enumerate() {
            serde_json::to_writer(&mut bytes, line).map_err(|source| CorpusError::Json {
                path: self.path.clone(),
                line: index as u64 + 1,
                source,
            })?;
            bytes.push(b'\n');
        }
        self.file
            .write_all(&bytes)
            .and_then(|()| self.file.sync_data())
            .map_err(CorpusError::io(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Line {
        id: u32,
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ruling-journal-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let _ = fs::remove_file(&path);
        path
    }

    #[test]
    fn a_cut_last_line_is_ignored_then_repaired() {
        let path = scratch("cut.jsonl");
        let mut out = Appender::open(&path).unwrap();
        out.append_all(&[Line { id: 1 }, Line { id: 2 }]).unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"id\":")
            .unwrap();
        let read: ReadBack<Line> = read_journal(&path).unwrap();
        assert_eq!(read.lines, [Line { id: 1 }, Line { id: 2 }]);
        assert_eq!(read.partial_bytes, 6);
        assert_eq!(repair(&path, &read).unwrap(), 6);
        Appender::open(&path)
            .unwrap()
            .append(&Line { id: 3 })
            .unwrap();
        let read: ReadBack<Line> = read_journal(&path).unwrap();
        assert_eq!(read.lines.len(), 3);
        assert_eq!(read.partial_bytes, 0);
    }

    #[test]
    fn a_corrupt_complete_line_names_its_line() {
        let path = scratch("corrupt.jsonl");
        fs::write(&path, "{\"id\":1}\n\nnot json\n").unwrap();
        let error = read_journal::<Line>(&path).unwrap_err().to_string();
        assert!(error.contains("corrupt.jsonl:3"), "{error}");
        assert!(
            read_journal::<Line>(&scratch("missing.jsonl"))
                .unwrap()
                .lines
                .is_empty()
        );
    }
}
