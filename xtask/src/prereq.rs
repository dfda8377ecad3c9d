//! The system packages ruling's build needs beyond a Rust toolchain: llama.cpp (vendored by
//! `llama-cpp-sys-2`, under the `llama-cpp` feature the server and evaluator are built with) is
//! C++ built by cmake, and bindgen reads its headers through libclang. `cargo xtask ci` and
//! `cargo xtask serve` install whatever is missing with apt-get; elsewhere they say what to
//! install.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::bail;

/// One thing the build needs, how to tell it is there, and its Debian package.
struct Need {
    what: &'static str,
    package: &'static str,
    present: fn() -> bool,
    /// Needed by the tests only (`ci`), not to build or serve.
    tests_only: bool,
}

const NEEDS: &[Need] = &[
    Need {
        what: "cmake",
        package: "cmake",
        present: || runs("cmake", &["--version"]),
        tests_only: false,
    },
    Need {
        what: "a C++ compiler",
        package: "g++",
        present: || runs("c++", &["--version"]),
        tests_only: false,
    },
    Need {
        what: "libclang (for bindgen)",
        package: "libclang-dev",
        present: libclang_present,
        tests_only: false,
    },
    // ruling-serve's tests/nginx.rs: replicas behind the load balancer operators run.
    Need {
        what: "nginx",
        package: "nginx",
        present: || runs("nginx", &["-v"]) || std::path::Path::new("/usr/sbin/nginx").is_file(),
        tests_only: true,
    },
];

/// What a machine without apt-get needs, in one line (README.md says the same).
const ELSEWHERE: &str = "cmake, a C++ compiler and libclang (Fedora: dnf install cmake gcc-c++ \
                         clang-devel; macOS: brew install cmake llvm)";

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn libclang_present() -> bool {
    if let Some(dir) = std::env::var_os("LIBCLANG_PATH") {
        return Path::new(&dir).exists();
    }
    let in_dir = |dir: &Path| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.flatten().any(|entry| {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                // libclang-cpp (the C++ API, which some other packages pull in) is not the C
                // library bindgen loads; a machine with only it still needs libclang-dev.
                name.starts_with("libclang")
                    && !name.starts_with("libclang-cpp")
                    && name.contains(".so")
            })
        })
    };
    let llvm_dirs = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("llvm-"))
        .map(|e| e.path().join("lib"));
    [
        "/usr/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
    ]
    .iter()
    .map(Into::into)
    .chain(llvm_dirs)
    .any(|dir: std::path::PathBuf| in_dir(&dir))
}

/// Install what building and serving need and is missing (apt-get, as root or through sudo),
/// or fail saying what to install.
pub fn ensure() -> anyhow::Result<()> {
    ensure_needs(false)
}

/// [`ensure`], and what the tests need besides (nginx).
pub fn ensure_for_tests() -> anyhow::Result<()> {
    ensure_needs(true)
}

fn ensure_needs(tests: bool) -> anyhow::Result<()> {
    let wanted = |need: &&Need| tests || !need.tests_only;
    let missing: Vec<&Need> = NEEDS
        .iter()
        .filter(wanted)
        .filter(|need| !(need.present)())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|n| n.what).collect();
    let packages: Vec<&str> = missing.iter().map(|n| n.package).collect();
    if !runs("apt-get", &["--version"]) {
        bail!(
            "building ruling needs {}, which this machine lacks; install {ELSEWHERE}",
            names.join(", ")
        );
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    if !root && !runs("sudo", &["-n", "true"]) {
        bail!(
            "building ruling needs {}; install them as root: apt-get install {}",
            names.join(", "),
            packages.join(" ")
        );
    }
    eprintln!("xtask: installing {} (apt-get, once)", packages.join(" "));
    let apt = |args: &[&str]| -> anyhow::Result<()> {
        let mut command = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.arg("apt-get");
            sudo
        };
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        crate::ci::run_command(command)
    };
    apt(&["-q", "update"])?;
    let mut install = vec!["-q", "install", "-y", "--no-install-recommends"];
    install.extend(&packages);
    apt(&install)?;
    let still: Vec<&str> = NEEDS
        .iter()
        .filter(wanted)
        .filter(|need| !(need.present)())
        .map(|n| n.what)
        .collect();
    if !still.is_empty() {
        bail!("after apt-get install, still missing: {}", still.join(", "));
    }
    Ok(())
}
