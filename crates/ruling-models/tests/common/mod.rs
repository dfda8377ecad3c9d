//! Fake registry packages for offline mirror tests: tiny wheels written into a folder that pip
//! is pointed at (`PIP_NO_INDEX=1 PIP_FIND_LINKS=<dir>`), so the whole mirror path, real pip
//! included, runs without a network.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

use ruling_models::{CatalogEntry, Format, MirrorPart, ModelFile, ProgressMode, PullOptions};
use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic pseudo-random bytes.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u8
        })
        .collect()
}

/// Writes `<dist>-<version>-py3-none-any.whl` into `dir` with the given members plus the
/// `.dist-info` files pip reads.
pub fn write_wheel(dir: &Path, package: &str, version: &str, members: &[(&str, &[u8])]) {
    let dist = package.replace('-', "_");
    let path = dir.join(format!("{dist}-{version}-py3-none-any.whl"));
    let file = std::fs::File::create(&path).expect("create wheel");
    let mut zip = zip::ZipWriter::new(file);
    let options = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let info = format!("{dist}-{version}.dist-info");
    let metadata = format!("Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n");
    let wheel =
        "Wheel-Version: 1.0\nGenerator: ruling-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n";
    let mut record = String::new();
    let mut all: Vec<(String, Vec<u8>)> = members
        .iter()
        .map(|(name, bytes)| ((*name).to_owned(), bytes.to_vec()))
        .collect();
    all.push((format!("{info}/METADATA"), metadata.into_bytes()));
    all.push((format!("{info}/WHEEL"), wheel.as_bytes().to_vec()));
    for (name, bytes) in &all {
        zip.start_file(name.as_str(), options)
            .expect("start member");
        zip.write_all(bytes).expect("write member");
        record.push_str(&format!("{name},,\n"));
    }
    record.push_str(&format!("{info}/RECORD,,\n"));
    zip.start_file(format!("{info}/RECORD"), options)
        .expect("start RECORD");
    zip.write_all(record.as_bytes()).expect("write RECORD");
    zip.finish().expect("finish wheel");
}

pub fn leak<T>(v: Vec<T>) -> &'static [T] {
    Vec::leak(v)
}

pub fn s(v: String) -> &'static str {
    String::leak(v)
}

/// A fake GGUF model: one random chunk per entry of `sizes`, each in its own package
/// `<name>-partN`, concatenated in order. Returns the entry and the assembled bytes.
pub fn fake_gguf(wheels: &Path, name: &str, sizes: &[usize]) -> (&'static CatalogEntry, Vec<u8>) {
    let mut whole = Vec::new();
    let mut parts = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let n = i + 1;
        let package = format!("{name}-part{n}");
        let member = format!("{}/data/part{n:02}.bin", package.replace('-', "_"));
        let bytes = data(size, n as u64 * 7919 + size as u64);
        write_wheel(wheels, &package, "0.1.0", &[(&member, &bytes)]);
        whole.extend_from_slice(&bytes);
        parts.push(MirrorPart {
            package: s(package),
            version: "0.1.0",
            member: s(member),
        });
    }
    let file_name = s(format!("{name}.gguf"));
    let entry = CatalogEntry {
        name: s(name.to_owned()),
        description: "fake test model",
        upstream: "test/none",
        licence: "Apache-2.0",
        format: Format::Gguf,
        hub: None,
        files: leak(vec![ModelFile {
            name: file_name,
            hub_path: file_name,
            sha256: s(sha256_hex(&whole)),
            size: Some(whole.len() as u64),
            mirror: leak(parts),
        }]),
    };
    (Box::leak(Box::new(entry)), whole)
}

/// Options for an offline pull: pip sees only `wheels`, no hub.
pub fn offline_options(cache: &Path, wheels: &Path) -> PullOptions {
    let mut options = PullOptions::new(cache);
    options.hub = false;
    options.progress = ProgressMode::Lines;
    options.pip_env = vec![
        ("PIP_NO_INDEX".into(), "1".into()),
        ("PIP_FIND_LINKS".into(), wheels.display().to_string()),
    ];
    options
}

/// Files whose names mark them as unfinished or downloaded wheels, anywhere under `dir`.
pub fn leftovers(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".partial") || name.ends_with(".whl") {
                out.push(path);
            }
        }
    }
    out
}

/// Flips one byte in the middle of `path`, then moves its mtime a few seconds forward, as a
/// later modification would (file-system timestamps are coarse enough that a flip right after
/// a pull could otherwise keep the recorded mtime).
pub fn corrupt(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(path, &bytes).expect("write");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    let file = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open");
    file.set_modified(later).expect("set mtime");
}

/// A minimal stand-in for the hub's file endpoint (`/{repo}/resolve/{revision}/{file}` with
/// `Range` requests, `etag` and `x-repo-commit` headers), served on 127.0.0.1 from a thread.
/// Returns its base URL; the server lives as long as the test process.
pub fn fake_hub(files: Vec<(String, Vec<u8>)>) -> String {
    use std::io::{BufRead, BufReader};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut range = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("range")
                {
                    range = Some(value.trim().to_owned());
                }
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or("");
            let Some((_, bytes)) = files.iter().find(|(p, _)| p == path) else {
                let _ = stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                continue;
            };
            let len = bytes.len();
            let (start, end) = range
                .as_deref()
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.split_once('-'))
                .map(|(a, b)| {
                    let start: usize = a.parse().unwrap_or(0);
                    let end: usize = b.parse().unwrap_or(len.saturating_sub(1));
                    (start.min(len), end.min(len.saturating_sub(1)))
                })
                .unwrap_or((0, len.saturating_sub(1)));
            let body = &bytes[start..=end];
            let head = format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{end}/{len}\r\n\
                 ETag: \"{}\"\r\nX-Repo-Commit: 0123456789abcdef0123456789abcdef01234567\r\nConnection: close\r\n\r\n",
                body.len(),
                &sha256_hex(bytes)[..40],
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body);
        }
    });
    format!("http://{address}")
}
