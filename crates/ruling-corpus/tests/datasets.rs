//! The readers against the real files in `shared/datasets` (beside the workspace, as in CI):
//! row counts and label counts per split as MANIFEST.md states them, every record a valid
//! System One request, soft targets that are distributions, disjoint splits, refusals of the
//! splits a dataset does not have, seeded sampling, the CLINC150 subsets, the exact shape of a
//! record of each newer reader, and bad rows reported with their file and line.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use ruling_corpus::{CorpusError, Dataset, Label, LoadOptions, Record, Split, catalog, load};
use ruling_schema::{Capabilities, Question};
use serde_json::json;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets")
}

fn options() -> LoadOptions {
    LoadOptions {
        root: Some(root()),
        ..LoadOptions::default()
    }
}

fn all(dataset: Dataset, split: Split) -> Vec<Record> {
    load(dataset, split, &options()).unwrap_or_else(|e| panic!("{dataset} {split}: {e}"))
}

fn sample(dataset: Dataset, split: Split, limit: usize, seed: u64) -> Vec<Record> {
    let options = LoadOptions {
        limit: Some(limit),
        seed,
        ..options()
    };
    load(dataset, split, &options).unwrap_or_else(|e| panic!("{dataset} {split}: {e}"))
}

fn ids(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| r.id.clone().expect("every dataset record has an id"))
        .collect()
}

/// How often each label of question `question` occurs.
fn label_counts(records: &[Record], question: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for record in records {
        *counts
            .entry(record.labels[question].answer_key())
            .or_default() += 1;
    }
    counts
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

/// Rows per split: MANIFEST.md's counts, split as the datasets README says.
const ROWS: [(Dataset, Split, usize); 36] = [
    // 3,270 rows, idx 0 to 3269: 1,635 even and 1,635 odd.
    (Dataset::Boolq, Split::Dev, 1635),
    (Dataset::Boolq, Split::HeldOut, 1635),
    (Dataset::ChaosnliSnli, Split::Dev, 1514),
    (Dataset::ChaosnliMnli, Split::Dev, 1599),
    (Dataset::Sst5, Split::Dev, 1101),
    (Dataset::Sst5, Split::HeldOut, 2210),
    // stsa.fine.dev less its 229 neutral sentences: the usual SST-2 dev set of 872.
    (Dataset::Sst2, Split::Dev, 872),
    (Dataset::Sst2, Split::HeldOut, 1821),
    // train 15,000 + val 3,000 + oos_train 100 + oos_val 100; test 4,500 + oos_test 1,000.
    (Dataset::Clinc150 { subset: None }, Split::Dev, 18_200),
    (Dataset::Clinc150 { subset: None }, Split::HeldOut, 5_500),
    (Dataset::Clinc150 { subset: Some(20) }, Split::Dev, 18_200),
    (
        Dataset::Clinc150 { subset: Some(20) },
        Split::HeldOut,
        5_500,
    ),
    (Dataset::Banking77, Split::HeldOut, 3080),
    (Dataset::AgNews, Split::HeldOut, 7600),
    (Dataset::Trec, Split::HeldOut, 500),
    (Dataset::Goemotions, Split::Dev, 5427),
    (Dataset::Cb, Split::Dev, 56),
    (Dataset::Rte, Split::Dev, 277),
    (Dataset::Sst5Train, Split::Dev, 8544),
    // Fold 1: trainset 9,960 + testset 1,076.
    (Dataset::Hwu64, Split::Dev, 11_036),
    // train_*_full 13,784 + validate_* 700.
    (Dataset::Snips, Split::Dev, 14_484),
    // dev 9,842 + test 9,824.
    (Dataset::Snli, Split::Dev, 19_666),
    (Dataset::MedicalAbstracts, Split::Dev, 2888),
    // easy-ham-1 2,500 + hard-ham-1 250 + spam-1 500; easy-ham-2 1,400 + spam-2 1,396.
    (Dataset::Spamassassin, Split::Dev, 3250),
    (Dataset::Spamassassin, Split::HeldOut, 2796),
    // 233 addresses, 1790-2016: 116 of even years, 117 of odd ones.
    (Dataset::Sotu, Split::Dev, 116),
    (Dataset::Sotu, Split::HeldOut, 117),
    // The paragraphs in the 110 named languages, of 30,094.
    (Dataset::Udhr, Split::Dev, 9143),
    // Noun and verb synsets, of 117,659.
    (Dataset::Wordnet, Split::Dev, 95_882),
    // The openers of the 21 topics, translated file names included, of 7,636.
    (Dataset::Chatterbot, Split::Dev, 7415),
    // The 22 named categories, of 14,396 texts.
    (Dataset::Fortunes, Split::Dev, 9823),
    // One log per in-scope CLINC150 test request (4,500 of its 5,500).
    (Dataset::Needle { tokens: 0 }, Split::HeldOut, 4500),
    (Dataset::Needle { tokens: 2048 }, Split::HeldOut, 4500),
    (Dataset::Needle { tokens: 8192 }, Split::HeldOut, 4500),
    // Both CLINC150 forms read the same rows; the counts above are per form.
    (Dataset::Clinc150 { subset: Some(1) }, Split::HeldOut, 5_500),
    (
        Dataset::Clinc150 { subset: Some(149) },
        Split::HeldOut,
        5_500,
    ),
];

#[test]
fn row_counts_per_split_match_the_manifest() {
    for (dataset, split, expected) in ROWS {
        let records = all(dataset, split);
        assert_eq!(records.len(), expected, "{dataset} {split}");
        let unique: HashSet<String> = ids(&records).into_iter().collect();
        assert_eq!(unique.len(), expected, "{dataset} {split}: ids are unique");
    }
    // Every split of every dataset in the catalog is counted above.
    for info in catalog() {
        for split in info.splits {
            assert!(
                ROWS.iter()
                    .any(|(d, s, _)| *d == info.dataset && s == split),
                "{} {split} has no expected count",
                info.name
            );
        }
    }
}

#[test]
fn every_record_is_a_valid_system_one_request_of_its_question_type() {
    let caps = Capabilities::default();
    for info in catalog() {
        for &split in info.splits {
            for record in all(info.dataset, split) {
                let valid = record
                    .validate(&caps)
                    .unwrap_or_else(|e| panic!("{} {split}: {e}", info.name));
                assert!(
                    valid
                        .questions()
                        .iter()
                        .all(|q| q.type_name() == info.question_type),
                    "{}: {} asks another type than {}",
                    info.name,
                    record.display_id(),
                    info.question_type
                );
                assert_eq!(record.family, info.name);
                assert!(
                    record
                        .id
                        .as_deref()
                        .is_some_and(|id| id.starts_with(&format!("{}:", info.name))),
                    "{:?}",
                    record.id
                );
                assert!(
                    !record.state.render().trim().is_empty(),
                    "{}",
                    record.display_id()
                );
                for question in record.questions.keys() {
                    assert!(
                        record.labels.contains_key(question),
                        "{}: {question} unlabelled",
                        record.display_id()
                    );
                    let target = record
                        .target_distribution(question)
                        .expect("labelled questions have a target");
                    let sum: f64 = target.values().sum();
                    assert!((sum - 1.0).abs() < 1e-9, "{}: {sum}", record.display_id());
                }
            }
        }
    }
}

#[test]
fn chaosnli_targets_are_the_vote_shares_and_labels_the_majority() {
    for (dataset, majority) in [
        (
            Dataset::ChaosnliSnli,
            counts(&[
                ("neutral", 813),
                ("entailment", 421),
                ("contradiction", 280),
            ]),
        ),
        (
            Dataset::ChaosnliMnli,
            counts(&[
                ("entailment", 741),
                ("neutral", 583),
                ("contradiction", 275),
            ]),
        ),
    ] {
        let records = all(dataset, Split::Dev);
        assert_eq!(label_counts(&records, "relation"), majority, "{dataset}");
        for record in &records {
            let target = record.soft_target("relation").expect("a soft target");
            let keys: Vec<&str> = target.keys().map(String::as_str).collect();
            assert_eq!(keys, ["entailment", "neutral", "contradiction"]);
            let sum: f64 = target.values().sum();
            assert!((sum - 1.0).abs() < 1e-12, "{}: {sum}", record.display_id());
            // 100 votes each: every share is a whole number of percent.
            assert!(
                target
                    .values()
                    .all(|p| ((p * 100.0).round() - p * 100.0).abs() < 1e-9)
            );
            let Label::Key(label) = &record.labels["relation"] else {
                panic!("a key label")
            };
            let most = target.values().copied().fold(0.0, f64::max);
            assert!(
                (target[label] - most).abs() < 1e-12,
                "the majority has the most votes"
            );
        }
    }
    // The first SNLI row of the file: 30 entailment, 70 neutral, 0 contradiction.
    let first = &all(Dataset::ChaosnliSnli, Split::Dev)[0];
    assert_eq!(
        first.id.as_deref(),
        Some("chaosnli-snli:2407214681.jpg#0r1n")
    );
    let target = first.soft_target("relation").expect("a soft target");
    assert!((target["entailment"] - 0.3).abs() < 1e-12);
    assert!((target["neutral"] - 0.7).abs() < 1e-12);
    assert!(target["contradiction"].abs() < 1e-12);
}

#[test]
fn label_counts_match_the_manifest() {
    let boolq_true: usize = Split::ALL
        .iter()
        .map(|&s| label_counts(&all(Dataset::Boolq, s), "answer")["yes"])
        .sum();
    assert_eq!(boolq_true, 2033);
    assert_eq!(
        label_counts(&all(Dataset::Sst5, Split::HeldOut), "sentiment"),
        counts(&[("0", 279), ("1", 633), ("2", 389), ("3", 510), ("4", 399)])
    );
    assert_eq!(
        label_counts(&all(Dataset::Trec, Split::HeldOut), "answer_type"),
        counts(&[
            ("description", 138),
            ("numeric", 113),
            ("entity", 94),
            ("location", 81),
            ("human", 65),
            ("abbreviation", 9),
        ])
    );
    assert_eq!(
        label_counts(&all(Dataset::Cb, Split::Dev), "relation"),
        counts(&[("contradiction", 28), ("entailment", 23), ("neutral", 5)])
    );
    assert_eq!(
        label_counts(&all(Dataset::Rte, Split::Dev), "relation"),
        counts(&[("entailment", 146), ("not_entailment", 131)])
    );
    let banking = label_counts(&all(Dataset::Banking77, Split::HeldOut), "intent");
    assert_eq!(banking.len(), 77);
    assert!(banking.values().all(|&n| n == 40), "40 per class");
    assert_eq!(
        label_counts(&all(Dataset::AgNews, Split::HeldOut), "topic"),
        counts(&[
            ("World", 1900),
            ("Sports", 1900),
            ("Business", 1900),
            ("Sci/Tech", 1900)
        ])
    );
    let clinc = label_counts(
        &all(Dataset::Clinc150 { subset: None }, Split::HeldOut),
        "intent",
    );
    assert_eq!(clinc.len(), 151);
    assert_eq!(clinc["oos"], 1000);
    let emotions = all(Dataset::Goemotions, Split::Dev);
    let multi = emotions
        .iter()
        .filter(|r| {
            r.labels
                .values()
                .filter(|l| **l == Label::Yes(true))
                .count()
                > 1
        })
        .count();
    assert_eq!(multi, 837, "rows carrying more than one emotion");
    assert!(emotions.iter().all(|r| r.questions.len() == 28));
}

#[test]
fn splits_are_disjoint() {
    for dataset in [
        Dataset::Boolq,
        Dataset::Sst5,
        Dataset::Sst2,
        Dataset::Clinc150 { subset: None },
    ] {
        let dev: HashSet<String> = ids(&all(dataset, Split::Dev)).into_iter().collect();
        let held_out: HashSet<String> = ids(&all(dataset, Split::HeldOut)).into_iter().collect();
        assert!(dev.is_disjoint(&held_out), "{dataset}");
    }
    // BoolQ: the id carries idx; dev holds the even ones, held-out the odd ones.
    for (split, parity) in [(Split::Dev, 0), (Split::HeldOut, 1)] {
        for id in ids(&all(Dataset::Boolq, split)) {
            let idx: u64 = id
                .strip_prefix("boolq:")
                .and_then(|i| i.parse().ok())
                .unwrap_or_else(|| panic!("{id}"));
            assert_eq!(idx % 2, parity, "{id} in {split}");
        }
    }
    // CLINC150: dev comes from train/val/oos_train/oos_val only, held-out from test/oos_test.
    for (split, parts) in [
        (Split::Dev, &["train", "val", "oos_train", "oos_val"][..]),
        (Split::HeldOut, &["test", "oos_test"][..]),
    ] {
        for id in ids(&all(Dataset::Clinc150 { subset: None }, split)) {
            let part = id.split(':').nth(1).unwrap_or_default();
            assert!(parts.contains(&part), "{id} in {split}");
        }
    }
    // SST: dev sentences come from the dev file, held-out ones from the test files.
    for (dataset, split, file) in [
        (Dataset::Sst5, Split::Dev, "dev"),
        (Dataset::Sst5, Split::HeldOut, "test"),
        (Dataset::Sst2, Split::Dev, "dev"),
        (Dataset::Sst2, Split::HeldOut, "test"),
    ] {
        assert!(
            ids(&all(dataset, split))
                .iter()
                .all(|id| id.split(':').nth(1) == Some(file)),
            "{dataset} {split}"
        );
    }
}

#[test]
fn splits_a_dataset_lacks_are_refused_with_the_reason() {
    for info in catalog() {
        for split in Split::ALL {
            if info.splits.contains(&split) {
                continue;
            }
            let error = load(info.dataset, split, &options())
                .expect_err(&format!("{} has no {split} split", info.name));
            let message = error.to_string();
            assert!(
                matches!(error, CorpusError::SplitUnavailable { split: s, .. } if s == split),
                "{message}"
            );
            assert!(message.contains(&info.name), "{message}");
            let why = match split {
                Split::Dev => "held-out only",
                Split::HeldOut => "dev only",
            };
            assert!(message.contains(why), "{message}");
        }
    }
    for dataset in [Dataset::Banking77, Dataset::AgNews, Dataset::Trec] {
        assert!(load(dataset, Split::Dev, &options()).is_err(), "{dataset}");
    }
    for dataset in [
        Dataset::ChaosnliSnli,
        Dataset::ChaosnliMnli,
        Dataset::Goemotions,
        Dataset::Cb,
        Dataset::Rte,
        Dataset::Sst5Train,
        Dataset::Hwu64,
        Dataset::Snips,
        Dataset::Snli,
        Dataset::MedicalAbstracts,
        Dataset::Udhr,
        Dataset::Wordnet,
        Dataset::Chatterbot,
        Dataset::Fortunes,
    ] {
        assert!(
            load(dataset, Split::HeldOut, &options()).is_err(),
            "{dataset}"
        );
    }
}

#[test]
fn sampling_is_seeded_and_nested() {
    for dataset in [
        Dataset::Boolq,
        Dataset::Trec,
        Dataset::Clinc150 { subset: Some(20) },
    ] {
        let split = dataset.splits()[0];
        let a = sample(dataset, split, 50, 3);
        assert_eq!(a.len(), 50);
        assert_eq!(
            a,
            sample(dataset, split, 50, 3),
            "{dataset}: same seed, same records"
        );
        assert_ne!(
            ids(&a),
            ids(&sample(dataset, split, 50, 4)),
            "{dataset}: another seed, another sample"
        );
        let smaller: HashSet<String> = ids(&sample(dataset, split, 20, 3)).into_iter().collect();
        let larger: HashSet<String> = ids(&a).into_iter().collect();
        assert!(
            smaller.is_subset(&larger),
            "{dataset}: a smaller limit is a subset"
        );
    }
    // A limit above the split's size gives the whole split.
    assert_eq!(sample(Dataset::Cb, Split::Dev, 1000, 1).len(), 56);
}

#[test]
fn clinc_subsets_hold_the_gold_intent_and_depend_only_on_seed_and_row() {
    let dataset = Dataset::Clinc150 { subset: Some(20) };
    for split in Split::ALL {
        let records = all(dataset, split);
        let mut gold_positions = BTreeMap::<usize, usize>::new();
        for record in &records {
            let Question::Choice { criteria, .. } = &record.questions["intent"] else {
                panic!("a choice")
            };
            let keys: Vec<&String> = criteria.keys().collect();
            assert_eq!(
                keys.len(),
                21,
                "20 intents and oos: {}",
                record.display_id()
            );
            assert_eq!(keys[20], "oos", "oos comes last");
            let Label::Key(gold) = &record.labels["intent"] else {
                panic!("a key label")
            };
            let position = criteria
                .get_index_of(gold)
                .unwrap_or_else(|| panic!("{}: gold {gold} offered", record.display_id()));
            *gold_positions.entry(position).or_default() += 1;
        }
        // The gold intent is not always in the same place.
        assert!(gold_positions.len() > 10, "{gold_positions:?}");
    }
    // A row's options depend on the seed and the row, not on which other rows were loaded.
    let sampled = sample(dataset, Split::Dev, 30, 5);
    let whole = load(
        dataset,
        Split::Dev,
        &LoadOptions {
            seed: 5,
            ..options()
        },
    )
    .expect("loads");
    for record in &sampled {
        let same = whole
            .iter()
            .find(|r| r.id == record.id)
            .expect("the sampled row is in the split");
        assert_eq!(same, record);
    }
    let reseeded = load(
        dataset,
        Split::Dev,
        &LoadOptions {
            seed: 6,
            ..options()
        },
    )
    .expect("loads");
    let differ = whole
        .iter()
        .zip(&reseeded)
        .filter(|(a, b)| a.questions != b.questions)
        .count();
    assert!(
        differ > whole.len() / 2,
        "another seed offers other intents"
    );
}

#[test]
fn a_clinc_subset_outside_its_range_is_refused() {
    for subset in [0, 150, 1000] {
        let error = load(
            Dataset::Clinc150 {
                subset: Some(subset),
            },
            Split::Dev,
            &options(),
        )
        .expect_err("out of range");
        assert!(
            matches!(error, CorpusError::InvalidSubset { subset: s, .. } if s == subset),
            "{error}"
        );
    }
}

#[test]
fn the_full_clinc_question_offers_every_intent_then_oos() {
    let records = sample(Dataset::Clinc150 { subset: None }, Split::HeldOut, 5, 0);
    for record in &records {
        let Question::Choice { criteria, .. } = &record.questions["intent"] else {
            panic!("a choice")
        };
        assert_eq!(criteria.len(), 151);
        assert_eq!(
            criteria.get_index(150).map(|(k, _)| k.as_str()),
            Some("oos")
        );
    }
}

#[test]
fn a_bad_row_is_reported_with_file_and_line() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("corpus-bad-root");
    std::fs::create_dir_all(root.join("boolq")).expect("a folder");
    std::fs::write(
        root.join("boolq/val.jsonl"),
        "{\"question\": \"q\", \"passage\": \"p\", \"idx\": 0, \"label\": \"true\"}\n\
         {\"question\": \"q\", \"passage\": \"p\", \"idx\": 2, \"label\": \"maybe\"}\n",
    )
    .expect("written");
    let options = LoadOptions {
        root: Some(root.clone()),
        ..LoadOptions::default()
    };
    let error = load(Dataset::Boolq, Split::Dev, &options).expect_err("label maybe");
    let message = error.to_string();
    assert!(message.contains("boolq/val.jsonl:2:"), "{message}");
    assert!(message.contains("maybe"), "{message}");
    // A missing file names the path.
    let error = load(Dataset::Trec, Split::HeldOut, &options).expect_err("no TREC here");
    assert!(matches!(error, CorpusError::Io { .. }), "{error}");
    assert!(error.to_string().contains("trec/TREC.test"), "{error}");
}

#[test]
fn newer_datasets_label_counts_match_the_manifest() {
    assert_eq!(
        label_counts(&all(Dataset::Sst5Train, Split::Dev), "sentiment"),
        counts(&[
            ("0", 1092),
            ("1", 2218),
            ("2", 1624),
            ("3", 2322),
            ("4", 1288)
        ])
    );
    // dev 3,329 / 3,235 / 3,278 plus test 3,368 / 3,219 / 3,237.
    assert_eq!(
        label_counts(&all(Dataset::Snli, Split::Dev), "relation"),
        counts(&[
            ("entailment", 6697),
            ("neutral", 6454),
            ("contradiction", 6515)
        ])
    );
    assert_eq!(
        label_counts(&all(Dataset::MedicalAbstracts, Split::Dev), "topic"),
        counts(&[
            ("neoplasms", 633),
            ("digestive system diseases", 299),
            ("nervous system diseases", 385),
            ("cardiovascular diseases", 610),
            ("general pathological conditions", 961),
        ])
    );
    // Each intent's train_*_full rows plus its 100 validate_* rows.
    assert_eq!(
        label_counts(&all(Dataset::Snips, Split::Dev), "intent"),
        counts(&[
            ("AddToPlaylist", 2042),
            ("BookRestaurant", 2073),
            ("GetWeather", 2100),
            ("PlayMusic", 2100),
            ("RateBook", 2056),
            ("SearchCreativeWork", 2054),
            ("SearchScreeningEvent", 2059),
        ])
    );
    let hwu = all(Dataset::Hwu64, Split::Dev);
    let intents = label_counts(&hwu, "intent");
    assert_eq!(intents.len(), 64);
    let mut scenarios = BTreeMap::<&str, usize>::new();
    for (intent, n) in &intents {
        let scenario = intent.split('_').next().expect("scenario_intent");
        *scenarios.entry(scenario).or_default() += n;
    }
    assert_eq!(scenarios.len(), 18);
    // alarm 456 + 49, general 1,685 + 183, weather 175 + 19.
    assert_eq!(scenarios["alarm"], 505);
    assert_eq!(scenarios["general"], 1868);
    assert_eq!(scenarios["weather"], 194);
    let testset = ids(&hwu)
        .iter()
        .filter(|id| id.starts_with("hwu64:testset:"))
        .count();
    assert_eq!(testset, 1076);
}

fn find(records: &[Record], id: &str) -> Record {
    records
        .iter()
        .find(|r| r.id.as_deref() == Some(id))
        .unwrap_or_else(|| panic!("no record {id}"))
        .clone()
}

fn options_of(record: &Record, question: &str) -> Vec<String> {
    let Question::Choice { criteria, .. } = &record.questions[question] else {
        panic!("{}: {question} is not a choice", record.display_id())
    };
    criteria.keys().cloned().collect()
}

#[test]
fn newer_datasets_records_have_their_exact_shape() {
    // sst5-train asks the sst5 question; only the id, family and sentence differ.
    let train = &all(Dataset::Sst5Train, Split::Dev)[0];
    assert_eq!(
        serde_json::to_value(train).expect("serialises"),
        json!({
            "id": "sst5-train:train:0",
            "family": "sst5-train",
            "state": "a stirring , funny and finally transporting re-imagining of beauty and the \
                      beast and 1930s horror films",
            "questions": {"sentiment": {
                "type": "score",
                "instructions": "How positive or negative is the sentiment of this sentence \
                                 from a movie review?",
                "criteria": ["very negative", "negative", "neutral", "positive", "very positive"],
            }},
            "labels": {"sentiment": 4},
            "weight": 1.0,
        })
    );
    assert_eq!(
        train.questions,
        sample(Dataset::Sst5, Split::Dev, 1, 0)[0].questions
    );

    let hwu = find(
        &all(Dataset::Hwu64, Split::Dev),
        "hwu64:trainset:alarm_set:1",
    );
    assert_eq!(hwu.family, "hwu64");
    assert_eq!(
        hwu.state.render(),
        "set an alarm for tomorrow at six in the morning"
    );
    assert_eq!(hwu.labels["intent"], Label::Key("alarm_set".into()));
    let keys = options_of(&hwu, "intent");
    assert_eq!(keys.len(), 64);
    assert_eq!(&keys[..3], ["alarm_query", "alarm_remove", "alarm_set"]);
    assert_eq!(keys[63], "weather_query");
    let Question::Choice {
        instructions,
        criteria,
    } = &hwu.questions["intent"]
    else {
        panic!("a choice")
    };
    assert_eq!(
        instructions.render(),
        "Which intent does this request to a home assistant express?"
    );
    assert!(criteria.values().all(|d| d.is_null()), "the names say it");

    let snips = all(Dataset::Snips, Split::Dev);
    let first = find(&snips, "snips:validate:AddToPlaylist:0");
    assert_eq!(
        first.state.render(),
        "I'd like to have this track onto my Classical Relaxations playlist."
    );
    assert_eq!(first.labels["intent"], Label::Key("AddToPlaylist".into()));
    assert_eq!(
        options_of(&first, "intent"),
        [
            "AddToPlaylist",
            "BookRestaurant",
            "GetWeather",
            "PlayMusic",
            "RateBook",
            "SearchCreativeWork",
            "SearchScreeningEvent"
        ]
    );
    // The emoji the file writes as CESU-8 surrogate halves reads as the character.
    assert_eq!(
        find(&snips, "snips:train:PlayMusic:461").state.render(),
        "I want toi hear some Pop Punk Perfection \u{1F355} off of Deezer"
    );

    let snli = &all(Dataset::Snli, Split::Dev)[0];
    assert_eq!(snli.id.as_deref(), Some("snli:dev:0"));
    assert_eq!(
        snli.state.render(),
        "Premise: Two women are embracing while holding to go packages .\nHypothesis: The \
         sisters are hugging goodbye while holding to go packages after just eating lunch ."
    );
    assert_eq!(snli.labels["relation"], Label::Key("neutral".into()));
    assert!(snli.references.is_empty(), "hard labels only");
    assert_eq!(
        snli.questions,
        sample(Dataset::ChaosnliSnli, Split::Dev, 1, 0)[0].questions,
        "the ChaosNLI question"
    );

    let medical = &all(Dataset::MedicalAbstracts, Split::Dev)[0];
    assert_eq!(medical.id.as_deref(), Some("medical-abstracts:0"));
    assert!(
        medical
            .state
            .render()
            .starts_with("Obstructive sleep apnea following topical oropharyngeal anesthesia")
    );
    assert_eq!(
        medical.labels["topic"],
        Label::Key("nervous system diseases".into())
    );
    assert_eq!(
        options_of(medical, "topic"),
        [
            "neoplasms",
            "digestive system diseases",
            "nervous system diseases",
            "cardiovascular diseases",
            "general pathological conditions"
        ]
    );
}

/// A datasets folder of its own under the test target directory, emptied first.
fn scratch_root(name: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("a folder");
    root
}

fn write(root: &std::path::Path, file: &str, text: impl AsRef<[u8]>) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("a folder");
    std::fs::write(path, text).expect("written");
}

fn load_error(dataset: Dataset, root: PathBuf) -> String {
    let options = LoadOptions {
        root: Some(root),
        ..LoadOptions::default()
    };
    load(dataset, Split::Dev, &options)
        .map(|r| r.len())
        .expect_err("a bad file")
        .to_string()
}

#[test]
fn bad_rows_of_the_newer_datasets_are_refused_with_file_and_line() {
    const HWU_HEADER: &str =
        "answerid;scenario;intent;answer_annotation;answer_from_anno;answer_from_user\n";
    let root = scratch_root("corpus-bad-hwu64");
    write(
        &root,
        "hwu64/trainset/alarm_set.csv",
        format!(
            "{HWU_HEADER}1;alarm;set;\"wake me\";\"wake me\";\"Wake me\"\n2;alarm;query;\"a\";\"a\";\"a\"\n"
        ),
    );
    write(
        &root,
        "hwu64/testset/alarm_set.csv",
        format!("{HWU_HEADER}3;alarm;set;\"b\";\"b\";\"b\"\n"),
    );
    let message = load_error(Dataset::Hwu64, root.clone());
    assert!(
        message.contains("hwu64/trainset/alarm_set.csv:3:"),
        "{message}"
    );
    assert!(message.contains("alarm_query"), "{message}");
    // A testset without the trainset's intents is refused, naming the missing one.
    write(
        &root,
        "hwu64/trainset/alarm_set.csv",
        format!("{HWU_HEADER}1;alarm;set;\"wake me\";\"wake me\";\"Wake me\"\n"),
    );
    write(
        &root,
        "hwu64/trainset/alarm_query.csv",
        format!("{HWU_HEADER}2;alarm;query;\"a\";\"a\";\"a\"\n"),
    );
    let message = load_error(Dataset::Hwu64, root);
    assert!(
        message.contains("hwu64/testset") && message.contains("alarm_query"),
        "{message}"
    );

    let root = scratch_root("corpus-bad-snips");
    write(
        &root,
        "snips/train_AddToPlaylist_full.json",
        "{\"PlayMusic\": [{\"data\": [{\"text\": \"play it\"}]}]}",
    );
    let message = load_error(Dataset::Snips, root.clone());
    assert!(
        message.contains("snips/train_AddToPlaylist_full.json:0:"),
        "{message}"
    );
    assert!(message.contains("\"AddToPlaylist\""), "{message}");
    write(
        &root,
        "snips/train_AddToPlaylist_full.json",
        b"{\"AddToPlaylist\": [\n{\"data\": [{\"text\": \"add \xed\xa0\xbc it\"}]}]}",
    );
    let message = load_error(Dataset::Snips, root);
    assert!(
        message.contains("train_AddToPlaylist_full.json:2: not UTF-8"),
        "{message}"
    );

    let root = scratch_root("corpus-bad-snli");
    write(
        &root,
        "snli_esnli/s1.dev",
        "A man sleeps . \nA dog runs . \n",
    );
    write(
        &root,
        "snli_esnli/s2.dev",
        "A man rests . \nA cat runs . \n",
    );
    write(&root, "snli_esnli/labels.dev", "entailment\nmaybe\n");
    let message = load_error(Dataset::Snli, root.clone());
    assert!(message.contains("snli_esnli/labels.dev:2:"), "{message}");
    assert!(message.contains("maybe"), "{message}");
    write(&root, "snli_esnli/labels.dev", "entailment\n");
    let message = load_error(Dataset::Snli, root);
    assert!(message.contains("labels.dev:0:"), "{message}");
    assert!(message.contains("align"), "{message}");

    let root = scratch_root("corpus-bad-medical");
    write(
        &root,
        "medical_abstracts/medical_tc_labels.csv",
        "condition_label,condition_name\n1,neoplasms\n2,digestive system diseases\n\
         3,nervous system diseases\n4,cardiovascular diseases\n5,general pathological conditions\n",
    );
    write(
        &root,
        "medical_abstracts/medical_tc_test.csv",
        "condition_label,medical_abstract\n1,\"A tumour.\"\n7,\"Something else.\"\n",
    );
    let message = load_error(Dataset::MedicalAbstracts, root.clone());
    assert!(
        message.contains("medical_abstracts/medical_tc_test.csv:3:"),
        "{message}"
    );
    assert!(message.contains("\"7\""), "{message}");
    write(
        &root,
        "medical_abstracts/medical_tc_labels.csv",
        "condition_label,condition_name\n1,neoplasms\n2,skin diseases\n",
    );
    let message = load_error(Dataset::MedicalAbstracts, root);
    assert!(
        message.contains("medical_tc_labels.csv:3:") && message.contains("skin diseases"),
        "{message}"
    );
}
