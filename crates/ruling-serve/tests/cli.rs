//! The `ruling-serve` command line: `pull` offline (a local model path is printed back; an
//! unknown name fails with the accepted forms and the catalog names), and `serve` as a real
//! process: it answers, keeps the API key out of its log, and exits 0 on SIGTERM.

use std::path::PathBuf;
use std::process::Command;

fn ruling_serve() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ruling-serve"));
    for var in [
        "RULING_MODEL",
        "RULING_VERIFY",
        "RULING_API_KEY",
        "RULING_PORT",
        "RULING_HOST",
        "RULING_ALIAS",
    ] {
        cmd.env_remove(var);
    }
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

/// `ruling-serve` with no subcommand serves; SIGTERM stops it cleanly with exit status 0, and
/// the API key never shows up in its output.
#[cfg(unix)]
#[test]
fn serve_answers_and_exits_zero_on_sigterm() {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::net::TcpStream;
    use std::process::Stdio;

    let model =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/generated/tiny-qwen2.gguf");
    assert!(model.exists(), "run `cargo xtask fixtures`");
    let mut child = ruling_serve()
        .env_remove("RULING_LOG")
        .args(["--port", "0", "--model"])
        .arg(&model)
        .env("RULING_API_KEY", "sekrit-key-do-not-log")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ruling-serve starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut log = String::new();
    let address = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).expect("a log line") > 0,
            "ruling-serve exited before listening: {log}"
        );
        log.push_str(&line);
        if let Some(at) = line.find("address=") {
            break line[at + "address=".len()..]
                .split_whitespace()
                .next()
                .expect("an address")
                .to_owned();
        }
    };
    let get = |path: &str, auth: bool| -> String {
        let mut stream = TcpStream::connect(&address).expect("connect");
        let auth = if auth {
            "Authorization: Bearer sekrit-key-do-not-log\r\n"
        } else {
            ""
        };
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
        )
        .expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        response
    };
    let mut ready = false;
    for _ in 0..300 {
        if get("/health", false).starts_with("HTTP/1.1 200") {
            ready = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(ready, "the model loads");
    assert!(get("/v1/models", false).starts_with("HTTP/1.1 401"));
    assert!(get("/v1/models", true).starts_with("HTTP/1.1 200"));

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let exit = child.wait().expect("ruling-serve exits");
    stderr
        .read_to_string(&mut log)
        .expect("the rest of the log");
    assert!(exit.success(), "exit status {exit:?}; log:\n{log}");
    assert!(log.contains("shutting down"), "{log}");
    assert!(!log.contains("sekrit"), "the key is never logged:\n{log}");
}

#[test]
fn serve_refuses_an_empty_api_key() {
    let out = ruling_serve()
        .args([
            "serve",
            "--port",
            "0",
            "--model",
            "/nonexistent.gguf",
            "--api-key",
            " ",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--api-key"), "{stderr}");
}

#[test]
fn serve_refuses_bad_adapter_flags_before_and_at_load() {
    let run = |args: &[&str]| {
        let out = ruling_serve()
            .env_remove("RULING_ADAPTER")
            .env_remove("RULING_ADAPTER_CALIBRATION")
            .args(["serve", "--port", "0"])
            .args(args)
            .output()
            .expect("run");
        assert!(!out.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    };
    let no_equals = run(&["--model", "/nonexistent.gguf", "--adapter", "support"]);
    assert!(
        no_equals.contains("--adapter") && no_equals.contains("NAME=PATH"),
        "{no_equals}"
    );
    let no_name = run(&[
        "--model",
        "/nonexistent.gguf",
        "--adapter",
        "=a.safetensors",
    ]);
    assert!(no_name.contains("no name"), "{no_name}");
    let stray = run(&[
        "--model",
        "/nonexistent.gguf",
        "--adapter",
        "support=a.safetensors",
        "--adapter-calibration",
        "billing=c.json",
    ]);
    assert!(
        stray.contains(r#"names "billing""#) && stray.contains("adapters: support"),
        "{stray}"
    );

    // A missing adapter file stops the server once the base has loaded.
    let model =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/generated/tiny-qwen2.gguf");
    assert!(model.exists(), "run `cargo xtask fixtures`");
    let model = model.display().to_string();
    let missing = run(&[
        "--model",
        &model,
        "--adapter",
        "gone=/nonexistent/adapter.safetensors",
    ]);
    assert!(
        missing.contains("adapter gone") && missing.contains("/nonexistent/adapter.safetensors"),
        "{missing}"
    );
}
