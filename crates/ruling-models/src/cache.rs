//! The local cache: where models live, and the "verified" record that makes a second pull
//! instant.
//!
//! Layout under the cache root (`RULING_CACHE`, else `<platform cache dir>/ruling`):
//!
//! ```text
//! models/<catalog-name>/<file>                 the verified file
//! models/<catalog-name>/<file>.verified.json   {"sha256", "size", "mtime_ns"} of that file
//! models/<catalog-name>/.lock                  held (File::lock) during a pull
//! hub/                                         the hub client's own cache (hf: specs)
//! tmp/                                         pip download folders, removed after each pull
//! ```
//!
//! A file whose size and modification time still match its record is trusted without reading
//! it; otherwise it is hashed again, and a digest that is not the catalog's means the file is
//! corrupt: it is deleted and fetched again.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::digest::sha256_file;
use crate::error::PullError;
use crate::progress::Reporter;

/// The environment variable that overrides the cache root.
pub const CACHE_ENV: &str = "RULING_CACHE";

/// `RULING_CACHE` if set and non-empty, else `<platform cache dir>/ruling`.
pub fn default_cache_dir() -> Option<PathBuf> {
    match std::env::var_os(CACHE_ENV) {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => dirs::cache_dir().map(|dir| dir.join("ruling")),
    }
}

/// The folder of a catalog model inside a cache root.
pub fn model_dir(cache_root: &Path, name: &str) -> PathBuf {
    cache_root.join("models").join(name)
}

/// The record written next to a verified file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct VerifiedRecord {
    sha256: String,
    size: u64,
    mtime_ns: u64,
}

fn record_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".verified.json");
    file.with_file_name(name)
}

fn stat(file: &Path) -> std::io::Result<(u64, u64)> {
    let meta = fs::metadata(file)?;
    let mtime = meta
        .modified()?
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    Ok((meta.len(), mtime))
}

/// Records that `file` (as it is now on disk) has digest `sha256`.
pub(crate) fn write_record(file: &Path, sha256: &str) -> Result<(), PullError> {
    let (size, mtime_ns) = stat(file).map_err(PullError::io(file))?;
    let record = VerifiedRecord {
        sha256: sha256.to_owned(),
        size,
        mtime_ns,
    };
    let path = record_path(file);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut builder = tempfile::Builder::new();
    builder.prefix(".record.");
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
    let tmp = builder.tempfile_in(dir).map_err(PullError::io(dir))?;
    serde_json::to_writer(tmp.as_file(), &record)
        .map_err(|e| PullError::io(&path)(std::io::Error::other(e)))?;
    tmp.persist(&path)
        .map_err(|e| PullError::io(&path)(e.error))?;
    Ok(())
}

/// What the cache holds for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cached {
    /// Present with the expected digest.
    Verified,
    /// Not there.
    Missing,
    /// There, with another digest.
    Corrupt { got: String },
}

/// Checks `file` against `expected`; `force` re-hashes even when the record matches.
pub(crate) fn check(
    file: &Path,
    expected: &str,
    force: bool,
    reporter: &Reporter,
) -> Result<Cached, PullError> {
    let (size, mtime_ns) = match stat(file) {
        Ok(stat) => stat,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Cached::Missing),
        Err(e) => return Err(PullError::io(file)(e)),
    };
    if !force {
        let record = fs::read(record_path(file))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<VerifiedRecord>(&bytes).ok());
        if record.is_some_and(|r| r.sha256 == expected && r.size == size && r.mtime_ns == mtime_ns)
        {
            return Ok(Cached::Verified);
        }
    }
    reporter.step(&format!("verifying {}", file.display()));
    let bar = reporter.bytes(Some(size), "verifying".to_owned());
    let got = sha256_file(file, &bar).map_err(PullError::io(file))?;
    bar.finish_and_clear();
    if got == expected {
        write_record(file, &got)?;
        Ok(Cached::Verified)
    } else {
        Ok(Cached::Corrupt { got })
    }
}

/// Deletes a file and its record (either may be missing).
pub(crate) fn remove(file: &Path) -> Result<(), PullError> {
    for path in [file.to_path_buf(), record_path(file)] {
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(PullError::io(path)(e)),
        }
    }
    Ok(())
}
