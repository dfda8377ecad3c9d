//! The decision logic on a scripted backend whose "model" is a formula of what it is shown:
//! each option's logit is a score of its text plus a bias for its letter position. That is
//! enough to check the algebra exactly: rotations, prior subtraction, the two-stage Choice,
//! limits and invariants.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ruling_backend::{
    Backend, BackendError, BackendInfo, Branch, BranchLogits, Cancel, ChatMessage, DecoderEngine,
    Engine, EngineError, EngineOptions, ImageBudget, Layout, Picture, Stopped, VisionInfo,
};
use ruling_schema::{
    Answer, Capabilities, EngineKind, SystemOneResponse, ValidRequest, parse_request,
};
use serde_json::json;

const SPECIALS: [&str; 2] = ["<|im_start|>", "<|im_end|>"];
/// Token ids of merged letter pairs start here, past every `char`.
const PAIR_BASE: u32 = 0x20_0000;

/// A prefix with images as the backend was given it: its text, and each picture's digest and
/// size.
type SeenPrefix = (String, Vec<(String, u32, u32)>);

/// Char-level tokenizer, ChatML template, formula model.
#[derive(Debug)]
struct Scripted {
    info: BackendInfo,
    /// Added to the logit of the option at each letter position.
    bias: Vec<f32>,
    /// Whether the option's text counts at all (off: a pure letter-bias model).
    content: bool,
    forward_passes: AtomicUsize,
    /// Texts tokenized.
    encodes: AtomicUsize,
    /// Prefixes encoded (a subset of the forward passes).
    prefills: AtomicUsize,
    /// Cancelled once this many forward passes have run: a client leaving mid-request.
    cancel_after: Mutex<Option<(usize, Cancel)>>,
    /// Two capital letters in a row for which this says yes are one token, as BPE merges
    /// some letter pairs: the two-letter codes a wide choice can be shown with.
    pairs: Option<fn(u8, u8) -> bool>,
    /// How long each forward pass takes: a model slow enough to time.
    pass_time: Duration,
    /// Every prefix with images encoded: its text and its pictures.
    seen_images: Mutex<Vec<SeenPrefix>>,
    /// Pictures this wide are ones the model cannot read.
    unreadable_width: Option<u32>,
}

impl Scripted {
    fn new(bias: Vec<f32>, content: bool) -> Self {
        Self {
            info: BackendInfo {
                model_id: "scripted".into(),
                revision: None,
                context_length: 4096,
                vision: None,
                max_token_bytes: 0,
                adapter_digest: None,
            },
            bias,
            content,
            forward_passes: AtomicUsize::new(0),
            encodes: AtomicUsize::new(0),
            prefills: AtomicUsize::new(0),
            cancel_after: Mutex::new(None),
            pairs: None,
            pass_time: Duration::ZERO,
            seen_images: Mutex::new(Vec::new()),
            unreadable_width: None,
        }
    }

    /// The same model reading images: `[img]` marks where one goes, and each is one token
    /// per 4x4 square, at most 16.
    fn seeing(mut self) -> Self {
        self.info.vision = Some(VisionInfo {
            marker: "[img]".into(),
            budget: ImageBudget {
                side: 4,
                max_tokens: 16,
            },
        });
        self
    }

    /// The same model, taking `pass_time` over every forward pass.
    fn taking(mut self, pass_time: Duration) -> Self {
        self.pass_time = pass_time;
        self
    }

    /// The same model with letter pairs merged where `pairs` says so.
    fn with_pairs(mut self, pairs: fn(u8, u8) -> bool) -> Self {
        self.pairs = Some(pairs);
        self
    }

    fn pair(&self, text: &str) -> Option<u32> {
        let merges = self.pairs?;
        match text.as_bytes() {
            [a, b, ..] if a.is_ascii_uppercase() && b.is_ascii_uppercase() && merges(*a, *b) => {
                Some(PAIR_BASE + u32::from(a - b'A') * 26 + u32::from(b - b'A'))
            }
            _ => None,
        }
    }

    fn decode(&self, tokens: &[u32]) -> String {
        tokens
            .iter()
            .map(|&t| match t {
                0 => SPECIALS[0].to_owned(),
                1 => SPECIALS[1].to_owned(),
                t if t >= PAIR_BASE => {
                    let pair = t - PAIR_BASE;
                    [pair / 26, pair % 26]
                        .iter()
                        .map(|&l| char::from(b'A' + l as u8))
                        .collect()
                }
                t => char::from_u32(t - 10).map(String::from).unwrap_or_default(),
            })
            .collect()
    }

    /// A stable score of an option's text.
    fn score_of(&self, text: &str) -> f32 {
        if !self.content {
            return 0.0;
        }
        let sum: u32 = text.bytes().map(u32::from).sum();
        (sum % 17) as f32 / 4.0
    }
}

impl Backend for Scripted {
    /// The prefix's tokens: the formula reads options wherever they are shown.
    type Prefix = Vec<u32>;

    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, BackendError> {
        let mut out: String = messages
            .iter()
            .map(|m| format!("<|im_start|>{}\n{}<|im_end|>\n", m.role.as_str(), m.content))
            .collect();
        out.push_str("<|im_start|>assistant\n");
        Ok(out)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        self.encodes.fetch_add(1, Ordering::SeqCst);
        let mut ids = Vec::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if let Some(i) = SPECIALS.iter().position(|s| rest.starts_with(s)) {
                ids.push(i as u32);
                rest = &rest[SPECIALS[i].len()..];
            } else if let Some(id) = self.pair(rest) {
                ids.push(id);
                rest = &rest[2..];
            } else {
                ids.push(c as u32 + 10);
                rest = &rest[c.len_utf8()..];
            }
        }
        Ok(ids)
    }

    fn encode_prefix(&self, tokens: &[u32]) -> Result<Vec<u32>, BackendError> {
        self.forward_passes.fetch_add(1, Ordering::SeqCst);
        self.prefills.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.pass_time);
        Ok(tokens.to_vec())
    }

    fn count_prefix_with_images(
        &self,
        text: &str,
        images: &[&Picture],
    ) -> Result<usize, BackendError> {
        assert_eq!(text.matches("[img]").count(), images.len());
        if let Some(index) = images
            .iter()
            .position(|p| Some(p.width()) == self.unreadable_width)
        {
            return Err(BackendError::Image {
                index,
                reason: "its grid is too odd for this projector".into(),
            });
        }
        let tokens: usize = images
            .iter()
            .map(|p| (p.width() / 4 * (p.height() / 4)) as usize)
            .sum();
        Ok(self.encode(text)?.len() + tokens)
    }

    fn encode_prefix_with_images(
        &self,
        text: &str,
        images: &[&Picture],
    ) -> Result<Vec<u32>, BackendError> {
        self.forward_passes.fetch_add(1, Ordering::SeqCst);
        self.prefills.fetch_add(1, Ordering::SeqCst);
        self.seen_images.lock().unwrap().push((
            text.to_owned(),
            images
                .iter()
                .map(|p| (p.digest_hex(), p.width(), p.height()))
                .collect(),
        ));
        self.encode(text)
    }

    fn prefix_len(&self, prefix: &Vec<u32>) -> usize {
        prefix.len()
    }

    fn prefix_bytes(&self, prefix: &Vec<u32>) -> usize {
        prefix.len() * 4
    }

    fn score_branches(
        &self,
        prefix: &Vec<u32>,
        branches: &[Branch<'_>],
    ) -> Result<Vec<BranchLogits>, BackendError> {
        let passes = self.forward_passes.fetch_add(1, Ordering::SeqCst) + 1;
        std::thread::sleep(self.pass_time);
        if let Some((after, cancel)) = &*self.cancel_after.lock().unwrap()
            && passes >= *after
        {
            cancel.cancel();
        }
        Ok(branches
            .iter()
            .map(|branch| {
                let text = self.decode(&[prefix.as_slice(), branch.tokens].concat());
                let logits: Vec<f32> = branch
                    .codes
                    .iter()
                    .enumerate()
                    .map(|(position, &code)| {
                        let label = self.decode(&[code]);
                        let line = text
                            .lines()
                            .find_map(|l| l.strip_prefix(&format!("{label}. ")))
                            .unwrap_or("");
                        self.score_of(line) + self.bias.get(position).copied().unwrap_or(0.0)
                    })
                    .collect();
                let lse = logits.iter().map(|l| l.exp()).sum::<f32>().ln() + 0.1;
                BranchLogits {
                    logits,
                    log_normalizer: lse,
                    unread: Vec::new(),
                }
            })
            .collect())
    }
}

fn engine(backend: Scripted, rotations: u32, prior: bool) -> DecoderEngine<Scripted> {
    let options = EngineOptions {
        rotations,
        prior,
        ..EngineOptions::default()
    };
    DecoderEngine::new(backend, options, None).unwrap()
}

fn request(body: serde_json::Value) -> ValidRequest {
    parse_request(body.to_string().as_bytes(), &Capabilities::default()).unwrap()
}

/// Forty intent keys: more options than one pass reads, so a choice over them is two-stage.
fn intent_keys() -> Vec<String> {
    (0..40).map(|i| format!("intent_{i:02}")).collect()
}

/// One choice question over `keys`, each described as "about KEY".
fn wide_choice(keys: &[String]) -> ValidRequest {
    let criteria: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|k| (k.clone(), json!(format!("about {k}"))))
        .collect();
    request(json!({
        "model": "m", "state": "hello",
        "questions": {"intent": {"type": "choice", "instructions": "Which intent?", "criteria": criteria}}
    }))
}

fn probabilities(response: &SystemOneResponse, id: &str) -> Vec<(String, f64)> {
    match &response.answers[id] {
        Answer::Choice { probabilities, .. } | Answer::Score { probabilities, .. } => {
            probabilities.iter().map(|(k, p)| (k.clone(), *p)).collect()
        }
        Answer::Noul { noul } => vec![("yes".into(), *noul), ("no".into(), 1.0 - noul)],
        Answer::Box { .. } => panic!("no box here"),
    }
}

fn mixed_request() -> ValidRequest {
    request(mixed_body())
}

#[test]
fn answers_hold_the_invariants_in_every_setting() {
    for rotations in [1, 2, 4] {
        for prior in [false, true] {
            let engine = engine(
                Scripted::new(vec![0.7, 0.1, -0.3, 0.2], true),
                rotations,
                prior,
            );
            let request = mixed_request();
            let response = engine.evaluate(&request).unwrap();
            response.check_against(&request).unwrap();
            assert_eq!(response.usage.output_tokens, 0);
            assert!(response.usage.input_tokens > 0);
            assert!(response.evaluation_trace.is_none());
        }
    }
}

#[test]
fn a_cancelled_evaluation_stops_before_its_next_forward_pass() {
    // A wide choice is two scoring passes after the prefix: stage one, then the final choice.
    let request = wide_choice(&intent_keys());
    let backend = Scripted::new(vec![0.0; 26], true);
    let cancel = Cancel::new();
    // Cancelled during stage one (the prefix is pass 1, stage one pass 2).
    *backend.cancel_after.lock().unwrap() = Some((2, cancel.clone()));
    let engine = engine(backend, 1, false);
    let err = engine.evaluate_until(&request, &cancel).unwrap_err();
    assert_eq!(err.stopped(), Some(Stopped::Cancelled), "{err}");
    assert_eq!(
        engine.backend().forward_passes.load(Ordering::SeqCst),
        2,
        "stage two never ran"
    );
    // Cancelled before it starts: not even the prefix is encoded.
    let before = engine.backend().forward_passes.load(Ordering::SeqCst);
    let err = engine.evaluate_until(&request, &cancel).unwrap_err();
    assert_eq!(err.stopped(), Some(Stopped::Cancelled));
    assert_eq!(
        engine.backend().forward_passes.load(Ordering::SeqCst),
        before
    );
    // A handle nobody cancels answers as `evaluate` does.
    let fresh = Cancel::new();
    let answered = engine.evaluate_until(&request, &fresh).unwrap();
    assert_eq!(
        probabilities(&answered, "intent"),
        probabilities(&engine.evaluate(&request).unwrap(), "intent")
    );
}

#[test]
fn a_request_that_cannot_fit_its_allowed_time_is_refused_before_any_forward_pass() {
    let backend = Scripted::new(vec![0.0; 26], true).taking(Duration::from_millis(30));
    let engine = engine(backend, 2, false);
    let request = mixed_request();
    let passes = || engine.backend().forward_passes.load(Ordering::SeqCst);
    let allowing = |time| Cancel::new().allowing(time);
    // Nothing has been timed yet, so the first request runs whatever it is allowed.
    engine
        .evaluate_until(&request, &allowing(Duration::from_millis(1)))
        .unwrap();
    // Now the engine knows its pace: a millisecond is hopeless, and nothing runs.
    let before = passes();
    let err = engine
        .evaluate_until(&request, &allowing(Duration::from_millis(1)))
        .unwrap_err();
    assert!(matches!(err, EngineError::TooSlow { .. }), "{err}");
    assert!(err.to_string().contains("allowed per request"), "{err}");
    assert_eq!(passes(), before);
    // A handle that allows a minute, or says nothing of time, is answered.
    engine
        .evaluate_until(&request, &allowing(Duration::from_secs(60)))
        .unwrap();
    engine.evaluate_until(&request, &Cancel::new()).unwrap();
    assert!(passes() > before);
}

#[test]
fn a_wide_choice_goes_through_two_stages_and_keeps_every_key() {
    let keys = intent_keys();
    let request = wide_choice(&keys);
    let engine = engine(Scripted::new(vec![0.0; 26], true), 2, true);
    let response = engine.evaluate(&request).unwrap();
    response.check_against(&request).unwrap();
    let probs = probabilities(&response, "intent");
    assert_eq!(
        probs.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        keys
    );
    assert_eq!(probs.iter().filter(|(_, p)| *p == 0.0).count(), 40 - 8);
    assert!(probs.iter().filter(|(_, p)| *p > 0.0).count() == 8);
}

#[test]
fn a_wide_choice_traces_every_option_of_stage_one_and_its_final_pass() {
    let criteria: serde_json::Map<String, serde_json::Value> = (0..40)
        .map(|i| (format!("intent_{i:02}"), json!(format!("about {i}"))))
        .collect();
    let request = request(json!({
        "model": "m", "state": "hello", "trace": true,
        "questions": {"intent": {"type": "choice", "instructions": "Which intent?", "criteria": criteria}}
    }));
    let engine = engine(Scripted::new(vec![0.0; 26], true), 2, false);
    let response = engine.evaluate(&request).unwrap();
    let trace = &response.evaluation_trace.unwrap().questions["intent"];
    let stage_one = trace.stage_one.as_ref().expect("asked in two stages");
    assert_eq!(stage_one.len(), 40);
    assert!(
        stage_one
            .windows(2)
            .all(|w| w[0].log_odds_yes >= w[1].log_odds_yes),
        "strongest first"
    );
    // The final pass shows the eight strongest, in two rotations.
    assert_eq!(trace.rotations.len(), 2);
    let mut finalists: Vec<&str> = stage_one[..8].iter().map(|s| s.key.as_str()).collect();
    let mut shown: Vec<&str> = trace.rotations[0]
        .order
        .iter()
        .map(String::as_str)
        .collect();
    finalists.sort_unstable();
    shown.sort_unstable();
    assert_eq!(shown, finalists);
}

/// Letter pairs that are one token in the scripted tokenizer: about two thirds of them, so
/// some two-letter codes are proven and some are skipped.
fn some_pairs(a: u8, b: u8) -> bool {
    (u32::from(a) + u32::from(b)) % 3 != 0
}

#[test]
fn a_wide_choice_is_one_pass_when_the_tokenizer_proves_its_codes() {
    let keys = intent_keys();
    let mut body = serde_json::to_value(wide_choice(&keys).to_wire()).unwrap();
    body["trace"] = json!(true);
    let request = request(body);
    let backend = Scripted::new(Vec::new(), true).with_pairs(some_pairs);
    let engine = engine(backend, 1, false);
    let before = engine.backend().forward_passes.load(Ordering::SeqCst);
    let response = engine.evaluate(&request).unwrap();
    response.check_against(&request).unwrap();
    let trace = &response.evaluation_trace.as_ref().unwrap().questions["intent"];
    assert!(trace.stage_one.is_none(), "asked in one pass");
    assert_eq!(trace.rotations.len(), 1);
    assert_eq!(trace.rotations[0].order, keys);
    // The prefix, then one scoring call.
    assert_eq!(
        engine.backend().forward_passes.load(Ordering::SeqCst) - before,
        2
    );
    // Each code was read off the line it labels: with no letter bias, every key's
    // probability is the softmax of its own line's score, codes past Z included.
    let scores: Vec<f64> = keys
        .iter()
        .map(|k| f64::from(engine.backend().score_of(&format!("{k}: about {k}"))))
        .collect();
    let total: f64 = scores.iter().map(|s| s.exp()).sum();
    for ((key, p), score) in probabilities(&response, "intent").iter().zip(&scores) {
        let expected = score.exp() / total;
        assert!((p - expected).abs() < 1e-6, "{key}: {p} vs {expected}");
    }
    // The shown codes run A..Z, then the proven pairs in spreadsheet order.
    let prompt = engine
        .question_prompt(
            request.state(),
            request.questions()[0].kind(),
            &(0..40).collect::<Vec<_>>(),
        )
        .unwrap();
    let labels: Vec<String> = prompt
        .codes
        .iter()
        .map(|&c| engine.backend().decode(&[c]))
        .collect();
    let expected: Vec<String> = ruling_backend::DEFAULT_CODES
        .iter()
        .map(|c| (*c).to_owned())
        .chain(
            ruling_backend::two_letter_codes()
                .into_iter()
                .filter(|c| some_pairs(c.as_bytes()[0], c.as_bytes()[1])),
        )
        .take(40)
        .collect();
    assert_eq!(labels, expected);
    assert!(
        labels
            .iter()
            .all(|l| engine.backend().encode(l).unwrap().len() == 1)
    );
}

#[test]
fn a_wide_choice_that_would_overflow_the_context_in_one_pass_takes_two_stages() {
    let keys = intent_keys();
    let backend = Scripted::new(Vec::new(), true).with_pairs(some_pairs);
    let options = EngineOptions {
        // Room for a stage-one branch and the eight-option final pass, not for all forty.
        max_branch_tokens: Some(500),
        ..EngineOptions::default()
    };
    let engine = DecoderEngine::new(backend, options, None).unwrap();
    let mut body = serde_json::to_value(wide_choice(&keys).to_wire()).unwrap();
    body["trace"] = json!(true);
    let request = request(body);
    let response = engine.evaluate(&request).unwrap();
    response.check_against(&request).unwrap();
    let trace = &response.evaluation_trace.unwrap().questions["intent"];
    assert_eq!(trace.stage_one.as_ref().map(Vec::len), Some(40));
}

#[test]
fn with_every_rotation_option_order_does_not_matter() {
    let base = ["alpha", "bravo", "charlie", "delta", "echo"];
    let permuted = ["delta", "alpha", "echo", "charlie", "bravo"];
    let ask = |order: &[&str]| {
        let criteria: serde_json::Map<String, serde_json::Value> = order
            .iter()
            .map(|k| ((*k).to_owned(), json!(format!("the {k} team"))))
            .collect();
        request(
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "choice", "instructions": "Which?", "criteria": criteria}}}),
        )
    };
    let engine = engine(
        Scripted::new(vec![1.5, -0.5, 0.3, 0.9, -1.0], true),
        5,
        true,
    );
    let a = probabilities(&engine.evaluate(&ask(&base)).unwrap(), "q");
    let b = probabilities(&engine.evaluate(&ask(&permuted)).unwrap(), "q");
    for (key, p) in &a {
        let q = b.iter().find(|(k, _)| k == key).unwrap().1;
        assert!((p - q).abs() < 1e-5, "{key}: {p} vs {q}");
    }
    // And the content still decides: the answer is not uniform.
    assert!(a.iter().any(|(_, p)| (p - 0.2).abs() > 0.01));
}

#[test]
fn the_prior_removes_a_constant_letter_bias() {
    let biased = || Scripted::new(vec![2.0, 0.5, -1.0, 0.0], false);
    let request = mixed_request();
    let debiased = engine(biased(), 1, true).evaluate(&request).unwrap();
    for id in ["billing", "team", "urgency"] {
        let probs = probabilities(&debiased, id);
        let uniform = 1.0 / probs.len() as f64;
        for (key, p) in probs {
            assert!((p - uniform).abs() < 1e-9, "{id}/{key}: {p}");
        }
    }
    let raw = engine(biased(), 1, false).evaluate(&request).unwrap();
    let team = probabilities(&raw, "team");
    assert!(team[0].1 > 0.5, "the raw answer follows the bias: {team:?}");
}

#[test]
fn an_over_long_state_is_refused_before_any_forward_pass() {
    let engine = engine(Scripted::new(vec![0.0; 4], true), 2, true);
    let before = engine.backend().forward_passes.load(Ordering::SeqCst);
    let request = request(json!({
        "model": "m", "state": "x".repeat(5000),
        "questions": {"q": {"type": "noul", "instructions": "Long?"}}
    }));
    let err = engine.evaluate(&request).unwrap_err();
    assert!(matches!(err, EngineError::InputTooLong { .. }));
    assert!(err.to_string().contains("maximum context length"), "{err}");
    assert_eq!(
        engine.backend().forward_passes.load(Ordering::SeqCst),
        before
    );
}

#[test]
fn a_state_too_long_for_any_tokenization_is_refused_without_tokenizing() {
    let mut backend = Scripted::new(vec![0.0; 4], true);
    // The longest token this tokenizer has is a special marker of 12 bytes.
    backend.info.max_token_bytes = 12;
    let engine = engine(backend, 1, false);
    let before = engine.backend().encodes.load(Ordering::SeqCst);
    let request = request(json!({
        "model": "m", "state": "x".repeat(12 * 4096 + 12),
        "questions": {"q": {"type": "noul", "instructions": "Long?"}}
    }));
    let err = engine.evaluate(&request).unwrap_err();
    assert!(err.to_string().contains("maximum context length"), "{err}");
    assert!(err.to_string().contains("at least 4097 tokens"), "{err}");
    assert_eq!(engine.backend().encodes.load(Ordering::SeqCst), before);
}

#[test]
fn a_request_over_its_budget_names_the_question() {
    let options = EngineOptions {
        max_request_tokens: 600,
        ..EngineOptions::default()
    };
    let engine = DecoderEngine::new(Scripted::new(vec![0.0; 4], true), options, None).unwrap();
    let before = engine.backend().forward_passes.load(Ordering::SeqCst);
    let request = request(json!({
        "model": "m", "state": "short",
        "questions": {
            "first": {"type": "noul", "instructions": "One?"},
            "second": {"type": "noul", "instructions": "y".repeat(400)}
        }
    }));
    let err = engine.evaluate(&request).unwrap_err();
    let EngineError::InputTooLong { question, message } = &err else {
        panic!("{err}")
    };
    assert_eq!(question.as_deref(), Some("second"));
    assert!(message.contains("maximum context length"));
    assert_eq!(
        engine.backend().forward_passes.load(Ordering::SeqCst),
        before
    );
}

#[test]
fn answers_are_deterministic_and_independent_of_other_questions() {
    let engine = engine(Scripted::new(vec![0.4, -0.2, 0.1, 0.3], true), 2, true);
    let full = mixed_request();
    let a = engine.evaluate(&full).unwrap();
    let b = engine.evaluate(&full).unwrap();
    assert_eq!(a, b);
    let alone = request(json!({
        "model": "m", "state": {"ticket": 7, "text": "charged twice"},
        "questions": {"urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high", "critical"]}}
    }));
    let c = engine.evaluate(&alone).unwrap();
    assert_eq!(a.answers["urgency"], c.answers["urgency"]);
}

#[test]
fn the_trace_reports_what_was_computed() {
    let engine = engine(Scripted::new(vec![0.4, -0.2, 0.1, 0.3], true), 2, true);
    let mut body = json!({"model": "m", "state": "s", "questions": {"q": {"type": "noul", "instructions": "Yes?"}}, "trace": true});
    let response = engine.evaluate(&request(body.clone())).unwrap();
    let trace = response.evaluation_trace.unwrap();
    assert_eq!(trace.engine, EngineKind::Decoder);
    assert_eq!(trace.prefix_cached, Some(false));
    assert!(trace.prefix_tokens > 0);
    let q = &trace.questions["q"];
    assert_eq!(q.rotations.len(), 2);
    assert_eq!(q.candidate_mass.len(), 2);
    assert_eq!(q.branch_tokens.len(), 2);
    assert!((q.temperature - 1.0).abs() < f64::EPSILON);
    assert!(q.rotations[0].prior.is_some());
    assert!(q.stage_one.is_none());
    body["trace"] = json!(false);
    assert!(
        engine
            .evaluate(&request(body))
            .unwrap()
            .evaluation_trace
            .is_none()
    );
}

#[test]
fn box_questions_are_refused_by_a_text_engine() {
    let engine = engine(Scripted::new(vec![0.0; 4], true), 1, true);
    let request = parse_request(
        json!({"model": "m", "state": "s", "questions": {"b": {"type": "box", "instructions": "Where?"}}}).to_string().as_bytes(),
        &Capabilities::vision(),
    )
    .unwrap();
    assert!(matches!(
        engine.evaluate(&request),
        Err(EngineError::Unsupported(_))
    ));
}

#[test]
fn a_state_seen_before_is_not_encoded_again_and_answers_do_not_change() {
    let ask = |state: &str, question: &str| {
        request(json!({
            "model": "m", "state": state,
            "questions": {"q": {"type": "choice", "instructions": question, "criteria": {"a": "first", "b": "second", "c": null}}}
        }))
    };
    let cached = engine(Scripted::new(vec![0.4, -0.2, 0.1], true), 2, false);
    let uncached = DecoderEngine::new(
        Scripted::new(vec![0.4, -0.2, 0.1], true),
        EngineOptions {
            rotations: 2,
            prefix_cache_bytes: 0,
            ..EngineOptions::default()
        },
        None,
    )
    .unwrap();
    let requests = [
        ask("the same state", "Which one?"),
        ask("the same state", "And which one now?"),
        ask("another state", "Which one?"),
        ask("the same state", "Which one?"),
    ];
    // Loading proves the contract with a forward pass of its own; count from here.
    let at_load = (
        cached.backend().prefills.load(Ordering::SeqCst),
        uncached.backend().prefills.load(Ordering::SeqCst),
    );
    for request in &requests {
        let a = cached.evaluate(request).unwrap();
        let b = uncached.evaluate(request).unwrap();
        assert_eq!(a, b, "the cache changes nothing a client sees");
    }
    // Two distinct states: two prefills with the cache, one per request without it.
    assert_eq!(
        cached.backend().prefills.load(Ordering::SeqCst) - at_load.0,
        2
    );
    assert_eq!(
        uncached.backend().prefills.load(Ordering::SeqCst) - at_load.1,
        4
    );
    let stats = cached.prefix_cache_stats().unwrap();
    assert_eq!((stats.hits, stats.misses, stats.entries), (2, 2, 2));
    assert!(stats.bytes > 0 && stats.bytes <= stats.capacity_bytes);
    let off = uncached.prefix_cache_stats().unwrap();
    assert_eq!((off.hits, off.misses, off.entries), (0, 4, 0));
}

fn adaptive_engine(margin: f64, min_rotations: usize) -> DecoderEngine<Scripted> {
    let options = EngineOptions {
        rotations: 4,
        adaptive: Some(ruling_backend::AdaptiveRotations {
            margin,
            min_rotations,
        }),
        ..EngineOptions::default()
    };
    DecoderEngine::new(
        Scripted::new(vec![0.4, -0.2, 0.1, 0.3], true),
        options,
        None,
    )
    .unwrap()
}

fn traced(mut body: serde_json::Value) -> ValidRequest {
    body["trace"] = json!(true);
    request(body)
}

fn mixed_body() -> serde_json::Value {
    json!({
        "model": "m",
        "state": {"ticket": 7, "text": "charged twice"},
        "questions": {
            "billing": {"type": "noul", "instructions": "Is this about billing?", "criteria": {"true": "payments", "false": null}},
            "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "tech": null, "sales": "deals", "other": null}},
            "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high", "critical"]}
        }
    })
}

#[test]
fn adaptive_rotations_that_never_stop_change_nothing() {
    let full = engine(Scripted::new(vec![0.4, -0.2, 0.1, 0.3], true), 4, false);
    let never = adaptive_engine(f64::INFINITY, 2);
    let request = traced(mixed_body());
    assert_eq!(
        full.evaluate(&request).unwrap(),
        never.evaluate(&request).unwrap()
    );
}

#[test]
fn a_decided_question_skips_its_remaining_rotations() {
    let full = engine(Scripted::new(vec![0.4, -0.2, 0.1, 0.3], true), 4, false);
    let eager = adaptive_engine(0.0, 1);
    let request = traced(mixed_body());
    let all = full.evaluate(&request).unwrap();
    let early = eager.evaluate(&request).unwrap();
    early.check_against(&request).unwrap();
    let all_trace = all.evaluation_trace.as_ref().unwrap();
    let early_trace = early.evaluation_trace.as_ref().unwrap();
    assert_eq!(all_trace.questions["team"].rotations.len(), 4);
    // With no margin asked for, one rotation settles every question.
    for id in ["billing", "team", "urgency"] {
        assert_eq!(early_trace.questions[id].rotations.len(), 1, "{id}");
    }
    assert!(early.usage.input_tokens < all.usage.input_tokens);
}

#[test]
fn adaptive_stopping_depends_only_on_the_question() {
    let engine = adaptive_engine(0.5, 2);
    let together = engine.evaluate(&traced(mixed_body())).unwrap();
    let mut body = mixed_body();
    let team = body["questions"]["team"].clone();
    body["questions"] = json!({ "team": team });
    let alone = engine.evaluate(&traced(body)).unwrap();
    assert_eq!(together.answers["team"], alone.answers["team"]);
    assert_eq!(
        together.evaluation_trace.unwrap().questions["team"],
        alone.evaluation_trace.unwrap().questions["team"]
    );
}

#[test]
fn a_question_prompt_shows_the_options_in_the_order_asked_and_refuses_others() {
    let engine = engine(Scripted::new(vec![0.7, 0.1, -0.3, 0.2], true), 1, false);
    let request = mixed_request();
    let state = request.state();
    for question in request.questions() {
        let n = match question.kind() {
            ruling_schema::QuestionKind::Choice { options, .. } => options.len(),
            ruling_schema::QuestionKind::Score { levels, .. } => levels.len(),
            _ => 2,
        };
        let forward: Vec<usize> = (0..n).collect();
        let reversed: Vec<usize> = (0..n).rev().collect();
        let a = engine
            .question_prompt(state, question.kind(), &forward)
            .unwrap();
        let b = engine
            .question_prompt(state, question.kind(), &reversed)
            .unwrap();
        // The same prefix, the same codes, the keys in the order shown.
        assert_eq!(a.tokens[..a.prefix_len], b.tokens[..b.prefix_len]);
        assert_eq!(a.codes, b.codes);
        assert_eq!(a.codes.len(), n);
        let mut back = b.keys.clone();
        back.reverse();
        assert_eq!(a.keys, back, "{}", question.id());
        assert_ne!(a.tokens, b.tokens);
        // Not a permutation: refused, naming the order.
        let bad: Vec<usize> = vec![0; n];
        let err = engine
            .question_prompt(state, question.kind(), &bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a permutation"), "{err}");
        // A noul or score is shown forward or reversed, never shuffled.
        if n > 2 && !matches!(question.kind(), ruling_schema::QuestionKind::Choice { .. }) {
            let mut shuffled = forward.clone();
            shuffled.swap(0, 1);
            let err = engine
                .question_prompt(state, question.kind(), &shuffled)
                .unwrap_err()
                .to_string();
            assert!(err.contains("not shuffled"), "{err}");
        }
    }
}

/// The wide choice of forty described intents about `state`, traced.
fn wide_about(state: &str) -> ValidRequest {
    let mut body = serde_json::to_value(wide_choice(&intent_keys()).to_wire()).unwrap();
    body["state"] = json!(state);
    body["trace"] = json!(true);
    request(body)
}

fn with_layout(layout: Layout) -> DecoderEngine<Scripted> {
    let options = EngineOptions {
        rotations: 2,
        layout,
        ..EngineOptions::default()
    };
    let backend = Scripted::new(vec![0.3, -0.1, 0.2], true).with_pairs(some_pairs);
    DecoderEngine::new(backend, options, None).unwrap()
}

#[test]
fn a_long_question_about_short_states_is_asked_question_first_and_its_head_reused() {
    let engine = with_layout(Layout::Auto);
    let prefills = || engine.backend().prefills.load(Ordering::SeqCst);
    let at_load = prefills();

    let first = engine.evaluate(&wide_about("hello")).unwrap();
    let trace = first.evaluation_trace.as_ref().unwrap();
    let question = &trace.questions["intent"];
    // One head per rotation, and the state never encoded as a prefix of its own.
    assert_eq!(question.question_prefix_tokens.len(), 2);
    assert!(question.question_prefix_tokens.iter().all(|&t| t > 0));
    assert_eq!(trace.prefix_cached, None);
    assert_eq!(prefills() - at_load, 2);

    // Another state, the same question: both heads come from the cache.
    let second = engine.evaluate(&wide_about("howdy")).unwrap();
    assert_eq!(prefills() - at_load, 2, "no head is encoded twice");
    let stats = engine.prefix_cache_stats().unwrap();
    assert_eq!((stats.hits, stats.misses), (2, 2));
    // Usage counts the heads either way, so it depends on the request alone.
    assert_eq!(first.usage, second.usage);
    let heads: usize = question.question_prefix_tokens.iter().sum();
    let branches: usize = question.branch_tokens.iter().sum();
    assert_eq!(first.usage.input_tokens as usize, heads + branches);

    // The formula reads each option's line wherever it is shown: the same answers as
    // state-first, bit for bit.
    let state_first = with_layout(Layout::StateFirst)
        .evaluate(&wide_about("hello"))
        .unwrap();
    assert!(
        state_first.evaluation_trace.as_ref().unwrap().questions["intent"]
            .question_prefix_tokens
            .is_empty()
    );
    assert_eq!(first.answers, state_first.answers);
}

#[test]
fn short_questions_stay_state_first_unless_asked_otherwise() {
    let mixed = traced(mixed_body());
    let auto = with_layout(Layout::Auto).evaluate(&mixed).unwrap();
    let forced = with_layout(Layout::QuestionFirst).evaluate(&mixed).unwrap();
    for (id, question) in &auto.evaluation_trace.as_ref().unwrap().questions {
        assert!(question.question_prefix_tokens.is_empty(), "{id}");
    }
    for (id, question) in &forced.evaluation_trace.as_ref().unwrap().questions {
        assert_eq!(
            question.question_prefix_tokens.len(),
            question.rotations.len(),
            "{id}"
        );
    }
    assert_eq!(auto.answers, forced.answers);
    // A question's layout depends on itself and the state only: asked alone, the same.
    let alone = request(json!({
        "model": "m", "state": {"ticket": 7, "text": "charged twice"},
        "questions": {"urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high", "critical"]}}
    }));
    let alone = with_layout(Layout::QuestionFirst).evaluate(&alone).unwrap();
    assert_eq!(alone.answers["urgency"], forced.answers["urgency"]);
}

/// A PNG of `width x height` whose pixels follow `shade`.
fn png(width: u32, height: u32, shade: u8) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([shade, (x * 7) as u8, (y * 13) as u8])
    });
    let mut bytes = Vec::new();
    image
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    bytes
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn image_request(assets: serde_json::Value, state: &str, question: &str) -> ValidRequest {
    let body = json!({
        "model": "m", "state": state, "assets": assets,
        "questions": {"q": {"type": "noul", "instructions": question}},
    });
    parse_request(body.to_string().as_bytes(), &Capabilities::vision()).unwrap()
}

fn inline(bytes: &[u8]) -> serde_json::Value {
    json!({"type": "image", "format": "png", "data_base64": b64(bytes)})
}

#[test]
fn images_are_named_in_the_text_shown_after_the_state_and_decoded_once() {
    let engine = engine(Scripted::new(vec![0.0; 4], true).seeing(), 1, false);
    let photo = png(64, 48, 10);
    let request = image_request(
        json!({"<a>": inline(&photo), "<b>": inline(&photo), "<c>": inline(&png(8, 8, 200))}),
        "Receipt <a>, again <b>, and a logo <c>.",
        "Is <a> a receipt?",
    );
    let response = engine.evaluate(&request).unwrap();
    response.check_against(&request).unwrap();
    let seen = engine.backend().seen_images.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one prefix");
    let (text, pictures) = &seen[0];
    // The same bytes under two placeholders are one image.
    assert_eq!(pictures.len(), 2, "{pictures:?}");
    assert!(
        text.contains("Receipt <image 1>, again <image 1>, and a logo <image 2>.\n<image 1>: [img]\n<image 2>: [img]\n"),
        "{text}"
    );
    // Resized to the budget: at most 16 tokens of 4x4, edges on the grid.
    let (_, w, h) = &pictures[0];
    assert!(
        w % 4 == 0 && h % 4 == 0 && (w / 4) * (h / 4) <= 16,
        "{w}x{h}"
    );
    assert_eq!(pictures[1].1, 8);
    // Usage counts the images' tokens.
    let text_only = engine
        .evaluate(&request_about(
            "Receipt <image 1>, again <image 1>, and a logo <image 2>.",
        ))
        .unwrap();
    assert!(response.usage.input_tokens > text_only.usage.input_tokens);
}

fn request_about(state: &str) -> ValidRequest {
    request(json!({
        "model": "m", "state": state,
        "questions": {"q": {"type": "noul", "instructions": "Is <image 1> a receipt?"}},
    }))
}

#[test]
fn the_same_images_reuse_the_prefix_and_other_images_do_not() {
    let engine = engine(Scripted::new(vec![0.0; 4], true).seeing(), 1, false);
    let ask = |shade| {
        let request = image_request(
            json!({"<a>": inline(&png(16, 16, shade))}),
            "Look: <a>",
            "Is <a> dark?",
        );
        engine.evaluate(&request).unwrap()
    };
    let prefills = || engine.backend().prefills.load(Ordering::SeqCst);
    let before = prefills();
    ask(1);
    ask(1);
    assert_eq!(prefills(), before + 1);
    ask(2);
    assert_eq!(
        prefills(),
        before + 2,
        "another picture with the same text is another prefix"
    );
}

#[test]
fn an_unreadable_image_is_refused_by_its_placeholder_before_any_forward_pass() {
    let engine = engine(Scripted::new(vec![0.0; 4], true).seeing(), 1, false);
    let passes = || engine.backend().forward_passes.load(Ordering::SeqCst);
    let before = passes();
    let mut cut = png(32, 32, 5);
    cut.truncate(cut.len() - 20);
    let request = image_request(
        json!({"<ok>": inline(&png(8, 8, 1)), "<bad>": inline(&cut)}),
        "<ok> and <bad>",
        "Same?",
    );
    let (placeholder, message) = asset_refusal(engine.evaluate(&request).unwrap_err());
    assert_eq!(placeholder, "<bad>");
    assert!(message.contains("cannot be read"), "{message}");
    assert_eq!(passes(), before);
}

/// The placeholder and message of an engine's refusal of one image asset.
fn asset_refusal(err: EngineError) -> (String, String) {
    match err {
        EngineError::Asset {
            placeholder,
            message,
        } => (placeholder, message),
        other => panic!("not an asset refusal: {other:?}"),
    }
}

#[test]
fn a_box_question_on_a_model_without_coordinates_is_refused_clearly() {
    let engine = engine(Scripted::new(vec![0.0; 4], true).seeing(), 1, false);
    let body = json!({
        "model": "m", "state": "<a>", "assets": {"<a>": inline(&png(8, 8, 1))},
        "questions": {"where": {"type": "box", "instructions": "Where is the logo?"}},
    });
    let request = parse_request(body.to_string().as_bytes(), &Capabilities::vision()).unwrap();
    let err = engine.evaluate(&request).unwrap_err();
    assert!(
        matches!(&err, EngineError::Unsupported(m) if m.contains("\"where\"") && m.contains("coordinate")),
        "{err}"
    );
}

#[test]
fn a_text_engine_refuses_images() {
    let engine = engine(Scripted::new(vec![0.0; 4], true), 1, false);
    assert!(!engine.info().capabilities.vision);
    let request = image_request(json!({"<a>": inline(&png(8, 8, 1))}), "<a>", "Dark?");
    let err = engine.evaluate(&request).unwrap_err();
    assert!(err.to_string().contains("reads text only"), "{err}");
}

#[test]
fn an_image_the_backend_cannot_read_is_named_by_its_placeholder() {
    let mut backend = Scripted::new(vec![0.0; 4], true).seeing();
    backend.unreadable_width = Some(12);
    let engine = engine(backend, 1, false);
    let request = image_request(
        json!({"<fine>": inline(&png(8, 8, 1)), "<odd>": inline(&png(12, 8, 2))}),
        "<fine> then <odd>",
        "Same?",
    );
    let (placeholder, message) = asset_refusal(engine.evaluate(&request).unwrap_err());
    assert_eq!(placeholder, "<odd>");
    assert!(message.contains("too odd"), "{message}");
}
