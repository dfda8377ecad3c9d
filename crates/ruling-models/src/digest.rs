//! Streaming sha256: the hashing writer every fetched byte passes through, and whole-file
//! hashing for cache checks.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use indicatif::ProgressBar;
use sha2::{Digest, Sha256};

use crate::files::hex;

/// Writes through to `inner` and hashes everything written.
#[derive(Debug)]
pub(crate) struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    /// The inner writer, the hex digest and the byte count.
    pub(crate) fn finish(self) -> (W, String, u64) {
        (self.inner, hex(&self.hasher.finalize()), self.written)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The sha256 of a file, read in 1 MiB blocks.
pub(crate) fn sha256_file(path: &Path, bar: &ProgressBar) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bar.inc(n as u64);
    }
    Ok(hex(&hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_writer_matches_known_digest() {
        let mut w = HashingWriter::new(Vec::new());
        w.write_all(b"ab").ok();
        w.write_all(b"c").ok();
        let (inner, digest, n) = w.finish();
        assert_eq!(inner, b"abc");
        assert_eq!(n, 3);
        assert_eq!(
            digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
