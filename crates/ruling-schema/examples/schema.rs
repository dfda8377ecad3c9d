//! Prints the JSON Schema of the System One v1 request body, or with `--response` of the
//! response body, as pretty JSON.
//!
//! `cargo run -p ruling-schema --example schema [-- --response]`

use std::io::Write as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schema = match std::env::args().nth(1).as_deref() {
        None => ruling_schema::request_schema(),
        Some("--response") => ruling_schema::response_schema(),
        Some("--error") => ruling_schema::error_schema(),
        Some(other) => {
            return Err(
                format!("unknown argument {other:?}; expected --response or --error").into(),
            );
        }
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &schema)?;
    writeln!(out)?;
    Ok(())
}
