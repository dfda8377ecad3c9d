//! The scale-out recipe on loopback: two replicas behind `ruling-serve route`. Routed by a
//! hash of the state, every request about one state reaches the replica that encoded it, so
//! each state is encoded once in all; sent to the replicas in turn instead, as a load
//! balancer without affinity would, states are encoded on both.

mod common;

use common::{TestServer, json_of, metric, tiny};
use ruling_serve::{Config, RouteConfig};
use serde_json::{Value, json};

const STATES: [&str; 4] = [
    "My card was charged twice for the March invoice.",
    "The app logs me out every time I open settings.",
    "Please close my account at the end of the month.",
    "Where is the parcel I ordered two weeks ago?",
];

/// Three different questions about one state, one per request.
fn requests(model: &str, state: &str) -> Vec<Value> {
    [
        json!({"billing": {"type": "noul", "instructions": "Is it about billing?"}}),
        json!({"team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": null, "tech": null, "other": null}}}),
        json!({"urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "high"]}}),
    ]
    .into_iter()
    .map(|questions| json!({"model": model, "state": state, "questions": questions}))
    .collect()
}

/// Prefix cache (hits, misses) summed over the replicas.
async fn cache(replicas: &[TestServer]) -> (f64, f64) {
    let mut total = (0.0, 0.0);
    for replica in replicas {
        let text = replica.metrics().await;
        total.0 += metric(&text, "ruling_prefix_cache_hits").expect("hits");
        total.1 += metric(&text, "ruling_prefix_cache_misses").expect("misses");
    }
    total
}

#[tokio::test(flavor = "multi_thread")]
async fn routing_by_the_state_keeps_every_replica_cache_hitting() {
    let replicas = vec![
        TestServer::ready(Config::default(), tiny()).await,
        TestServer::ready(Config::default(), tiny()).await,
    ];
    let (_, _, models) = json_of(replicas[0].get("/v1/models").await).await;
    let model = models["models"][0]["name"].as_str().unwrap().to_owned();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = tokio::spawn(ruling_serve::route(
        RouteConfig {
            replicas: replicas.iter().map(|r| r.base.clone()).collect(),
            max_body_bytes: Config::default().max_body_bytes,
            timeout: Config::default().timeout,
        },
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    let client = reqwest::Client::new();
    let before = cache(&replicas).await;
    for state in STATES {
        for request in requests(&model, state) {
            let answer = client
                .post(format!("{base}/v1/systemone"))
                .json(&request)
                .send()
                .await
                .unwrap();
            let (status, _, body) = json_of(answer).await;
            assert_eq!(status, 200, "{body}");
        }
    }
    let routed = cache(&replicas).await;
    // Counters are whole numbers, read as f64 from the Prometheus text.
    let (hits, misses) = ((routed.0 - before.0) as u64, (routed.1 - before.1) as u64);
    assert_eq!(
        misses,
        STATES.len() as u64,
        "each state encoded once in all"
    );
    assert_eq!(hits, 2 * STATES.len() as u64, "every later question hits");

    // Without affinity: the same requests to the replicas in turn.
    let mut turn = 0;
    for state in STATES {
        for request in requests(&model, &format!("{state} (again)")) {
            let (status, _, _) = json_of(replicas[turn % 2].post_json(&request).await).await;
            assert_eq!(status, 200);
            turn += 1;
        }
    }
    let spread = cache(&replicas).await;
    let misses_in_turn = spread.1 - routed.1;
    assert!(
        misses_in_turn > STATES.len() as f64,
        "in turn, states are encoded on both replicas: {misses_in_turn} misses"
    );
    eprintln!(
        "prefix cache hit rate: routed by state {:.2}, in turn {:.2}",
        hits as f64 / (hits + misses) as f64,
        (spread.0 - routed.0) / (spread.0 - routed.0 + misses_in_turn)
    );

    // The router passes other routes and refusals through as the replicas give them.
    let listed = client
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    let refused = client
        .post(format!("{base}/v1/systemone"))
        .json(&json!({"model": model, "state": "s", "questions": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);

    stop.send(()).unwrap();
    router.await.unwrap().unwrap();
    for replica in replicas {
        replica.stop().await.unwrap();
    }
}
