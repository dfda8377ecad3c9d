//! Properties over generated requests: any valid request survives serialise then parse, and
//! the validated form converts back to the wire request it came from.

use indexmap::IndexMap;
use proptest::prelude::*;
use ruling_schema::{
    Capabilities, NoulCriteria, Question, State, SystemOneRequest, Text, parse_request, render_text,
};
use serde_json::{Value, json};

fn arb_text() -> impl Strategy<Value = Text> {
    prop_oneof![
        "\\PC{0,20}".prop_map(Text::from),
        Just(Text::null()),
        ("[a-z]{1,5}", "\\PC{0,10}").prop_map(|(k, v)| Text::new(json!({ k: v })).expect("object")),
        prop::collection::vec("\\PC{0,8}", 0..3)
            .prop_map(|items| Text::new(json!(items)).expect("array")),
    ]
}

fn arb_question() -> impl Strategy<Value = Question> {
    let noul = (
        arb_text(),
        prop::option::of((prop::option::of(arb_text()), prop::option::of(arb_text()))),
    )
        .prop_map(|(instructions, criteria)| Question::Noul {
            instructions,
            // Criteria with neither side mean the same as no criteria, and validation keeps
            // only the latter; generate the canonical form.
            criteria: criteria
                .filter(|(t, f)| {
                    t.as_ref().is_some_and(|t| !t.is_null())
                        || f.as_ref().is_some_and(|f| !f.is_null())
                })
                .map(|(if_true, if_false)| NoulCriteria {
                    if_true: if_true.filter(|t| !t.is_null()),
                    if_false: if_false.filter(|f| !f.is_null()),
                }),
        });
    let choice = (
        arb_text(),
        prop::collection::btree_map("\\PC{1,8}", arb_text(), 2..8),
    )
        .prop_map(|(instructions, criteria)| Question::Choice {
            instructions,
            criteria: criteria.into_iter().collect(),
        });
    let score = (
        arb_text(),
        prop::collection::btree_set("[a-z ]{1,10}", 2..=10),
    )
        .prop_map(|(instructions, levels)| Question::Score {
            instructions,
            criteria: levels.into_iter().map(Text::from).collect(),
        });
    prop_oneof![noul, choice, score]
}

fn arb_request() -> impl Strategy<Value = SystemOneRequest> {
    let state = prop_oneof![
        "\\PC{0,40}".prop_map(State::from),
        ("[a-z]{1,6}", "\\PC{0,20}")
            .prop_map(|(k, v)| State::new(json!({ k: v, "n": [1, 2.5] })).expect("object")),
    ];
    (
        "[a-z0-9-]{1,12}",
        state,
        prop::collection::vec(("[a-z0-9_]{1,6}", arb_question()), 1..5),
        any::<bool>(),
    )
        .prop_map(|(model, state, questions, trace)| SystemOneRequest {
            model,
            state,
            // Generated ids may repeat; an IndexMap keeps one of each, like a client's dict.
            questions: questions.into_iter().collect::<IndexMap<_, _>>(),
            assets: None,
            trace: trace.then_some(true),
        })
}

proptest! {
    #[test]
    fn any_valid_request_survives_serialise_then_parse(request in arb_request()) {
        let bytes = serde_json::to_vec(&request).expect("serialises");
        let valid = match parse_request(&bytes, &Capabilities::default()) {
            Ok(valid) => valid,
            Err(errors) => return Err(TestCaseError::fail(format!("{errors}\n{request:?}"))),
        };
        prop_assert_eq!(valid.questions().len(), request.questions.len());
        prop_assert_eq!(&valid.to_wire(), &request);

        let again = serde_json::to_vec(&valid.to_wire()).expect("serialises");
        let reparsed = parse_request(&again, &Capabilities::default()).expect("still valid");
        prop_assert_eq!(reparsed, valid);

        let typed: SystemOneRequest = serde_json::from_slice(&bytes).expect("wire types parse");
        prop_assert_eq!(typed, request);
    }

    #[test]
    fn rendering_the_same_text_twice_gives_the_same_string(text in arb_text()) {
        let copy: Value = serde_json::from_str(&serde_json::to_string(text.as_value()).expect("ser")).expect("de");
        prop_assert_eq!(text.render(), render_text(&copy));
        prop_assert_eq!(text.render(), text.render());
    }
}
