//! A test engine: answers every question with a uniform distribution, and can be made to
//! wait at a gate, count its calls, panic, fail or take one timed "forward pass" per question,
//! so queueing, timeouts, cancellation and shutdown can be tested deterministically.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use indexmap::IndexMap;
use ruling_backend::{BackendError, Cancel, Engine, EngineError, EngineInfo};
use ruling_core::Ruling;
use ruling_schema::{
    Answer, BoxRegion, Capabilities, QuestionKind, SystemOneResponse, Usage, ValidRequest,
};

/// Closed until opened; `wait` blocks while closed.
#[derive(Debug, Default)]
pub struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.changed.notify_all();
    }

    pub fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.changed.wait(open).unwrap();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Answer,
    Panic,
    Fail,
}

/// What a test holds on to: the gate, the call counts.
#[derive(Debug, Default)]
pub struct Control {
    pub gate: Gate,
    /// Requests the engine began.
    pub started: AtomicUsize,
    /// Requests the engine finished.
    pub finished: AtomicUsize,
    /// Forward passes the engine ran (a slow engine runs one per question).
    pub passes: AtomicUsize,
}

impl Control {
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }

    pub fn passes(&self) -> usize {
        self.passes.load(Ordering::SeqCst)
    }

    /// Wait until `n` requests have begun (at most 10 s).
    pub async fn wait_started(&self, n: usize) {
        for _ in 0..1000 {
            if self.started() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the engine did not start {n} requests within 10 s");
    }
}

#[derive(Debug)]
pub struct TestEngine {
    info: EngineInfo,
    behaviour: Behaviour,
    gated: bool,
    /// How long each question's forward pass takes (none: answers at once).
    pass: Option<Duration>,
    control: Arc<Control>,
}

pub const TEST_MODEL: &str = "test-engine";

impl TestEngine {
    /// An engine that answers at once.
    pub fn ruling() -> Ruling {
        Self::build(Behaviour::Answer, false).0
    }

    /// An engine that waits at the gate before answering each request.
    pub fn gated() -> (Ruling, Arc<Control>) {
        Self::build(Behaviour::Answer, true)
    }

    pub fn behaving(behaviour: Behaviour) -> Ruling {
        Self::build(behaviour, false).0
    }

    /// An engine that spends `pass` on each question, one forward pass after another, and
    /// looks at its cancel handle before each, as the decoder engine does.
    pub fn slow(pass: Duration) -> (Ruling, Arc<Control>) {
        Self::built(Behaviour::Answer, false, Some(pass))
    }

    fn build(behaviour: Behaviour, gated: bool) -> (Ruling, Arc<Control>) {
        Self::built(behaviour, gated, None)
    }

    fn built(behaviour: Behaviour, gated: bool, pass: Option<Duration>) -> (Ruling, Arc<Control>) {
        let control = Arc::new(Control::default());
        let engine = TestEngine {
            info: EngineInfo {
                model: TEST_MODEL.to_owned(),
                capabilities: Capabilities::default(),
                max_context: 4096,
            },
            behaviour,
            gated,
            pass,
            control: Arc::clone(&control),
        };
        (Ruling::from_engine(Box::new(engine)), control)
    }
}

impl Engine for TestEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn evaluate(&self, request: &ValidRequest) -> Result<SystemOneResponse, EngineError> {
        self.evaluate_until(request, &Cancel::never())
    }

    fn evaluate_until(
        &self,
        request: &ValidRequest,
        cancel: &Cancel,
    ) -> Result<SystemOneResponse, EngineError> {
        self.control.started.fetch_add(1, Ordering::SeqCst);
        if self.gated {
            self.control.gate.wait();
        }
        if let Some(pass) = self.pass {
            for _ in request.questions() {
                cancel.check()?;
                std::thread::sleep(pass);
                self.control.passes.fetch_add(1, Ordering::SeqCst);
            }
        }
        let result = match self.behaviour {
            Behaviour::Answer => Ok(uniform(&self.info.model, request)),
            Behaviour::Panic => panic!("the test engine panics on purpose"),
            Behaviour::Fail => Err(EngineError::Backend(BackendError::Forward {
                source: "the test engine fails on purpose".into(),
            })),
        };
        self.control.finished.fetch_add(1, Ordering::SeqCst);
        result
    }
}

/// Every question answered with a uniform distribution.
fn uniform(model: &str, request: &ValidRequest) -> SystemOneResponse {
    let answers = request
        .questions()
        .iter()
        .map(|q| {
            let answer = match q.kind() {
                QuestionKind::Noul { .. } => Answer::Noul { noul: 0.5 },
                QuestionKind::Choice { options, .. } => {
                    let p = 1.0 / options.len() as f64;
                    Answer::Choice {
                        choice: options[0].key.clone(),
                        confidence: 0.0,
                        probabilities: options.iter().map(|o| (o.key.clone(), p)).collect(),
                    }
                }
                QuestionKind::Score { levels, .. } => {
                    let p = 1.0 / levels.len() as f64;
                    Answer::Score {
                        score: (levels.len() - 1) as f64 / 2.0,
                        confidence: 0.0,
                        legend: levels
                            .iter()
                            .enumerate()
                            .map(|(i, l)| (i.to_string(), l.render()))
                            .collect(),
                        probabilities: (0..levels.len()).map(|i| (i.to_string(), p)).collect(),
                    }
                }
                QuestionKind::Box { .. } => Answer::Box {
                    region: BoxRegion {
                        top: 0.0,
                        bottom: 1.0,
                        left: 0.0,
                        right: 1.0,
                    },
                    confidence: None,
                },
            };
            (q.id().to_owned(), answer)
        })
        .collect::<IndexMap<_, _>>();
    SystemOneResponse {
        model: model.to_owned(),
        answers,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 0,
        },
        evaluation_trace: None,
    }
}
