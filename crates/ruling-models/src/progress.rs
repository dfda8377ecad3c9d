//! Progress reporting: bars (`indicatif`) when stderr is a terminal, one line per step
//! otherwise, or nothing at all.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// How a pull reports what it is doing (always on stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// Bars when stderr is a terminal, lines otherwise.
    #[default]
    Auto,
    /// Progress bars (also shows pip's own download bar).
    Bars,
    /// One line per step, no bars.
    Lines,
    /// Silent.
    Quiet,
}

impl ProgressMode {
    /// `Auto` decided against the current stderr.
    pub(crate) fn resolve(self) -> ProgressMode {
        match self {
            ProgressMode::Auto if std::io::stderr().is_terminal() => ProgressMode::Bars,
            ProgressMode::Auto => ProgressMode::Lines,
            other => other,
        }
    }
}

/// A resolved [`ProgressMode`] with the helpers the pull steps use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reporter {
    mode: ProgressMode,
}

impl Reporter {
    pub(crate) fn new(mode: ProgressMode) -> Self {
        Reporter {
            mode: mode.resolve(),
        }
    }

    pub(crate) fn mode(&self) -> ProgressMode {
        self.mode
    }

    /// One step, one line (also shown in bar mode; steps are rare).
    pub(crate) fn step(&self, message: &str) {
        if self.mode != ProgressMode::Quiet {
            eprintln!("{message}");
        }
    }

    /// A byte-count bar; hidden unless in bar mode.
    pub(crate) fn bytes(&self, total: Option<u64>, message: String) -> ProgressBar {
        if self.mode != ProgressMode::Bars {
            return ProgressBar::hidden();
        }
        let bar = match total {
            Some(total) => ProgressBar::new(total),
            None => ProgressBar::new_spinner(),
        };
        let template = if total.is_some() {
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
        } else {
            "{spinner} {msg} {bytes} {bytes_per_sec}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(message);
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    }
}
