//! Any bytes as a System One request body, through the validation every JSON request takes.
//!
//! The server runs [`ruling_schema::parse_request`] on each body before anything else; a panic
//! there is the only way that path answers 5xx, so the target asserts what a client relies on:
//!
//! - a refusal names at least one problem, each located under `body`, and serialises to the
//!   422 body clients parse;
//! - an accepted request, written back out as JSON, is accepted again as the same request (so
//!   what the engine reads is exactly what the client sent).
//!
//! Each input is judged twice: for a text-only model with the full option limit, and for a
//! vision model with a small one, so both capability branches are explored.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ruling_schema::{Capabilities, LocItem, parse_request};

fuzz_target!(|body: &[u8]| {
    let narrow = Capabilities {
        max_choice_options: 8,
        ..Capabilities::vision()
    };
    for caps in [Capabilities::default(), narrow] {
        judge(body, &caps);
    }
});

fn judge(body: &[u8], caps: &Capabilities) {
    match parse_request(body, caps) {
        Ok(valid) => {
            let wire = valid.to_wire();
            let written = serde_json::to_vec(&wire).expect("an accepted request serialises");
            let again = parse_request(&written, caps).unwrap_or_else(|errors| {
                panic!(
                    "an accepted request, written back, is refused: {:?}",
                    errors.details()
                )
            });
            assert_eq!(again.to_wire(), wire, "the round trip changed the request");
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "a refusal names no problem");
            for detail in errors.details() {
                assert_eq!(
                    detail.loc.first(),
                    Some(&LocItem::from("body")),
                    "every problem is located under body: {detail:?}"
                );
            }
            serde_json::to_vec(&errors.into_body()).expect("a refusal serialises");
        }
    }
}
