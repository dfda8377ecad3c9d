//! `hf:org/repo` specs against a local stand-in for the hub: the repository listing decides
//! the model's shape, the files land in the hub client's cache, and a second pull is served
//! from that cache without the network.

mod common;

use common::fake_hub;
use ruling_models::{HubRepo, LocalModel, ModelSpec, ProgressMode, PullOptions, Source, pull_spec};

#[test]
fn hf_directory_model_is_fetched_then_served_from_cache() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("config.json", b"{\"hidden_size\": 8}".to_vec()),
        ("tokenizer.json", b"{\"model\": {}}".to_vec()),
        ("model.safetensors", common::data(5000, 3)),
    ];
    let listing = r#"{"sha": "0123456789abcdef0123456789abcdef01234567", "siblings": [
        {"rfilename": "README.md"}, {"rfilename": "config.json"},
        {"rfilename": "tokenizer.json"}, {"rfilename": "model.safetensors"}]}"#;
    let mut served: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|(name, bytes)| (format!("/org/enc/resolve/main/{name}"), bytes.clone()))
        .collect();
    served.push((
        "/api/models/org/enc/revision/main".into(),
        listing.as_bytes().to_vec(),
    ));
    let mut options = PullOptions::new(tmp.path());
    options.progress = ProgressMode::Lines;
    options.hub_endpoint = Some(fake_hub(served));
    let spec = ModelSpec::Hub(HubRepo {
        repo: "org/enc".into(),
        revision: None,
    });

    let pulled = pull_spec(&spec, &options).expect("pull");
    assert_eq!(pulled.source, Source::Hub);
    let LocalModel::Directory { path } = &pulled.model else {
        panic!("expected a directory, got {:?}", pulled.model)
    };
    for (name, bytes) in &files {
        assert_eq!(
            &std::fs::read(path.join(name)).expect("read"),
            bytes,
            "{name}"
        );
    }

    // Nothing listens here: only the cache can answer.
    options.hub_endpoint = Some("http://127.0.0.1:9".into());
    let again = pull_spec(&spec, &options).expect("from cache");
    assert_eq!(again.source, Source::Cache);
    assert_eq!(again.model, pulled.model);
}
