//! The `ruling-serve pull` command line, offline: a local model path is printed back; an
//! unknown name fails with the accepted forms and the catalog names.

use std::process::Command;

fn ruling_serve() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ruling-serve"));
    cmd.env_remove("RULING_MODEL").env_remove("RULING_VERIFY");
    cmd
}

#[test]
fn pull_of_a_local_gguf_prints_its_path() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let gguf = tmp.path().join("m.gguf");
    std::fs::write(&gguf, b"GGUF").expect("write");
    let out = ruling_serve()
        .args(["pull", &gguf.display().to_string(), "--cache"])
        .arg(tmp.path().join("cache"))
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        gguf.display().to_string()
    );
}

#[test]
fn pull_of_an_unknown_name_lists_the_catalog() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = ruling_serve()
        .args(["pull", "no-such-model", "--cache"])
        .arg(tmp.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("smollm2-135m"), "{stderr}");
    assert!(stderr.contains("hf:org/repo[@revision]"), "{stderr}");
}
