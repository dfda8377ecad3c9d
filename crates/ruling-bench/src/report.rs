//! The report: `docs/bench/backends.md` (three tables) and the runs as JSON beside it.

use std::fmt::Write as _;

use anyhow::Context as _;
use ruling_models::files::write_atomic;

use crate::{Args, Run, SHAPES, WriteRow, shape_name};

/// Writes the markdown report and the JSON of every run, each replaced atomically.
pub fn write_report(args: &Args, runs: &[Run]) -> anyhow::Result<()> {
    let mut md = String::new();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    writeln!(md, "# Decoder backends side by side\n")?;
    writeln!(
        md,
        "Written by `cargo xtask bench backends` on {} ({cpus} CPUs, {} threads per backend). \
         Each model runs in a child process per backend; plain llama.cpp runs in the llama \
         child after the backend is measured, on exactly the prefix and branches the engine \
         sent (recorded), so the ratios compare the same work measured in one run. Requests go \
         through the real `DecoderEngine` with the prefix cache off, so each pays its prefill; \
         short requests are the median of three. Tokens after the prefix count every branch \
         and each shared stem once. Plain llama.cpp always decodes whole branches, every \
         rotation: its time in a shared-stem or adaptive row is that of the same request with \
         whole branches. Generation is greedy, {} tokens at most per prompt, timed from the \
         prompt to the last token.\n",
        std::env::consts::ARCH,
        args.threads,
        args.write_tokens
    )?;
    let mut models: Vec<&str> = runs.iter().map(|r| r.model.as_str()).collect();
    models.dedup();
    let tables = Tables { runs, models };
    tables.prefill(&mut md)?;
    tables.requests(&mut md)?;
    tables.generation(&mut md)?;
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let json = serde_json::to_vec_pretty(runs)?;
    for (path, bytes) in [
        (args.out.clone(), md.as_bytes()),
        (args.out.with_extension("json"), json.as_slice()),
    ] {
        write_atomic(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("bench: wrote {}", args.out.display());
    Ok(())
}

/// Every run, and the models in the order they ran.
struct Tables<'a> {
    runs: &'a [Run],
    models: Vec<&'a str>,
}

impl<'a> Tables<'a> {
    /// The candle and llama runs of one model.
    fn of(&self, model: &str) -> (Option<&'a Run>, Option<&'a Run>) {
        let find = |backend: &str| {
            self.runs
                .iter()
                .find(|r| r.model == model && r.backend == backend)
        };
        (find("candle"), find("llama"))
    }

    fn prefill(&self, md: &mut String) -> std::fmt::Result {
        writeln!(md, "## Prefill, memory\n")?;
        writeln!(
            md,
            "| model | state tokens | candle tok/s | llama backend tok/s | plain llama.cpp tok/s | candle peak RSS MiB | llama peak RSS MiB |"
        )?;
        writeln!(md, "|---|---|---|---|---|---|---|")?;
        for model in &self.models {
            let (candle, llama) = self.of(model);
            let tokens = candle.or(llama).map_or(0, |r| r.prefill_tokens);
            writeln!(
                md,
                "| {model} | {tokens} | {} | {} | {} | {} | {} |",
                cell(candle.map(|r| r.prefill_tokens_per_s), 0),
                cell(llama.map(|r| r.prefill_tokens_per_s), 0),
                cell(
                    llama
                        .and_then(|r| r.plain.as_ref())
                        .map(|p| p.prefill_tokens_per_s),
                    0
                ),
                cell(candle.map(|r| r.peak_rss_mib), 0),
                cell(llama.map(|r| r.peak_rss_mib), 0),
            )?;
        }
        Ok(())
    }

    fn requests(&self, md: &mut String) -> std::fmt::Result {
        writeln!(
            md,
            "\n## Requests (seconds; ratio = plain llama.cpp over the llama backend)\n"
        )?;
        writeln!(
            md,
            "| model | questions | rotations | branches | tokens after the prefix | candle s | llama backend s | plain llama.cpp s | plain / llama | cost vs 1 question (llama) |"
        )?;
        writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
        for model in &self.models {
            let (candle, llama) = self.of(model);
            for (i, (questions, every, stops, stems)) in SHAPES.iter().enumerate() {
                let pick = |r: Option<&Run>| r.and_then(|r| r.requests.get(i)).map(|q| q.seconds);
                // Plain llama.cpp always reads every rotation asked for.
                let plain_s = llama
                    .and_then(|r| r.plain.as_ref())
                    .and_then(|p| {
                        p.requests
                            .iter()
                            .find(|q| q.questions == *questions && q.every_rotation == *every)
                    })
                    .map(|q| q.seconds);
                let shape = llama.or(candle).and_then(|r| r.requests.get(i));
                let one = llama.and_then(|r| {
                    r.requests
                        .iter()
                        .find(|q| {
                            q.questions == 1
                                && q.every_rotation == *every
                                && !q.adaptive
                                && q.stems == *stems
                        })
                        .map(|q| q.seconds)
                });
                writeln!(
                    md,
                    "| {model} | {questions} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    shape_name(*every, *stops, *stems),
                    shape.map_or(0, |s| s.branches),
                    shape.map_or(0, |s| s.branch_tokens),
                    cell(pick(candle), 2),
                    cell(pick(llama), 2),
                    cell(plain_s, 2),
                    ratio(plain_s, pick(llama), 2, "x"),
                    ratio(pick(llama), one, 2, "x"),
                )?;
            }
        }
        Ok(())
    }

    fn generation(&self, md: &mut String) -> std::fmt::Result {
        writeln!(md, "\n## Generation (tokens/s over the whole call)\n")?;
        writeln!(
            md,
            "| model | prompts | candle | llama backend | plain llama.cpp | llama / plain |"
        )?;
        writeln!(md, "|---|---|---|---|---|---|")?;
        for model in &self.models {
            let (candle, llama) = self.of(model);
            for (i, prompts) in [1, 8].iter().enumerate() {
                let rate = |w: Option<&WriteRow>| w.map(|w| w.tokens as f64 / w.seconds);
                let c = rate(candle.and_then(|r| r.writing.get(i)));
                let l = rate(llama.and_then(|r| r.writing.get(i)));
                let p = rate(
                    llama
                        .and_then(|r| r.plain.as_ref())
                        .and_then(|p| p.writing.get(i)),
                );
                writeln!(
                    md,
                    "| {model} | {prompts} | {} | {} | {} | {} |",
                    cell(c, 1),
                    cell(l, 1),
                    cell(p, 1),
                    ratio(l, p, 2, ""),
                )?;
            }
        }
        Ok(())
    }
}

/// A table cell: the value at `digits` decimals, or a dash when it was not measured.
fn cell(value: Option<f64>, digits: usize) -> String {
    value.map_or("—".to_owned(), |v| format!("{v:.digits$}"))
}

/// `over / under` at `digits` decimals with `unit` after it, or a dash when either is missing.
fn ratio(over: Option<f64>, under: Option<f64>, digits: usize, unit: &str) -> String {
    match (over, under) {
        (Some(o), Some(u)) => format!("{:.digits$}{unit}", o / u),
        _ => "—".into(),
    }
}
