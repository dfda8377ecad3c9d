//! `ModelSpec` parsing: every accepted form, and errors that say what is accepted.

use ruling_models::{CATALOG, HubRepo, LocalModel, ModelSpec, SpecError};

#[test]
fn every_catalog_name_parses_to_its_entry() {
    for entry in CATALOG {
        match ModelSpec::parse(entry.name).expect("catalog name") {
            ModelSpec::Catalog(found) => assert_eq!(found.name, entry.name),
            other => panic!("{}: {other:?}", entry.name),
        }
    }
    for name in [
        "qwen2.5-coder-0.5b",
        "smollm2-135m",
        "qwen2.5-coder-1.5b",
        "gemma3-270m",
        "minilm-l6",
    ] {
        assert!(ruling_models::catalog::get(name).is_some(), "{name}");
    }
}

#[test]
fn hub_repos_parse_with_and_without_revision() {
    assert_eq!(
        ModelSpec::parse("hf:HuggingFaceTB/SmolLM2-135M-Instruct").expect("hub"),
        ModelSpec::Hub(HubRepo {
            repo: "HuggingFaceTB/SmolLM2-135M-Instruct".into(),
            revision: None,
        })
    );
    let spec: ModelSpec = "hf:org/repo@abc123".parse().expect("hub@rev");
    assert_eq!(spec.to_string(), "hf:org/repo@abc123");
}

#[test]
fn unknown_names_list_the_forms_and_the_catalog() {
    let err = ModelSpec::parse("smollm2").expect_err("unknown");
    assert_eq!(
        err,
        SpecError::Unknown {
            given: "smollm2".into()
        }
    );
    let message = err.to_string();
    for entry in CATALOG {
        assert!(message.contains(entry.name), "{message}");
    }
    assert!(message.contains("hf:org/repo[@revision]"), "{message}");
    assert!(message.contains(".gguf"), "{message}");
    assert_eq!(ModelSpec::parse("  ").expect_err("empty"), SpecError::Empty);
}

#[test]
fn bad_hub_specs_say_what_is_expected() {
    let err = ModelSpec::parse("hf:just-a-name").expect_err("bad hub");
    assert!(matches!(err, SpecError::BadHubRepo { .. }));
    assert!(err.to_string().contains("hf:org/repo[@revision]"), "{err}");
}

#[test]
fn local_paths_are_checked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let gguf = tmp.path().join("m.gguf");
    std::fs::write(&gguf, b"GGUF").expect("write");
    let given = gguf.display().to_string();
    assert_eq!(
        ModelSpec::parse(&given).expect("gguf"),
        ModelSpec::Local(LocalModel::Gguf { path: gguf.clone() })
    );

    let not_gguf = tmp.path().join("m.bin");
    std::fs::write(&not_gguf, b"x").expect("write");
    assert!(matches!(
        ModelSpec::parse(&not_gguf.display().to_string()),
        Err(SpecError::NotAModel { .. })
    ));

    let dir = tmp.path().join("encoder");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("config.json"), b"{}").expect("write");
    std::fs::write(dir.join("model.safetensors"), b"").expect("write");
    let err = ModelSpec::parse(&dir.display().to_string()).expect_err("no tokenizer");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    std::fs::write(dir.join("tokenizer.json"), b"{}").expect("write");
    assert_eq!(
        ModelSpec::parse(&dir.display().to_string()).expect("dir"),
        ModelSpec::Local(LocalModel::Directory { path: dir.clone() })
    );

    let missing = tmp.path().join("nope.gguf");
    assert!(matches!(
        ModelSpec::parse(&missing.display().to_string()),
        Err(SpecError::NotFound { .. })
    ));
}
