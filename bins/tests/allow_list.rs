//! The SSL listener's allow-list in the request handler: every kind of request naming a topic
//! its principal may not use is refused as docs/security.md says, block by block where the
//! protocol answers per block, and nothing refused is stored.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::watch;
use tributary::broker::access::{Access, AllowListFile};
use tributary::broker::acks;
use tributary::broker::handler::{CloseReason, Effects, Handler};
use tributary::broker::reply::Reply;
use tributary::env::TokioEnv;
use tributary::logs::Logs;
use tributary::metrics::broker::BrokerMeter;
use tributary::real_fs::RealFs;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::log::TopicPartition;
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{
    ErrorCode, FetchRequest, OffsetsRequest, ProduceRequest, Request, Response,
    TopicOriginsRequest, TOPIC_AUTHORIZATION_FAILED,
};

fn set(n: usize) -> Bytes {
    let mut b = MessageSetBuilder::new();
    (0..n).for_each(|i| {
        b.push(vec![i as u8; 10]);
    });
    b.build(CompressionCodec::None)
}

fn produce(topic: &str) -> ProduceRequest {
    ProduceRequest {
        topic: topic.parse().unwrap(),
        partition: 0,
        messages: set(3),
    }
}

fn fetch(topic: &str) -> FetchRequest {
    FetchRequest {
        topic: topic.parse().unwrap(),
        partition: 0,
        offset: 0,
        max_bytes: 1 << 20,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_kind_is_refused_for_a_topic_no_rule_allows_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "brokerid=0\nlog.dir={}\nenable.zookeeper=false\nlog.flush.interval=1\n",
        dir.path().join("logs").display()
    );
    let config = BrokerConfig::from_properties(&Properties::parse("t", &text).unwrap()).unwrap();
    let (logs, _) = Logs::<RealFs>::open(RealFs, config, 0).unwrap();
    let logs = Arc::new(logs);
    let (_stop, stop_rx) = watch::channel(false);
    let (flushes, committer) = acks::start(
        TokioEnv,
        Duration::from_millis(1),
        BrokerMeter::new(None),
        stop_rx,
    );
    tokio::spawn(committer);
    let handler = Handler::with_acks(TokioEnv, logs.clone(), flushes);
    let rules = dir.path().join("allow.list");
    std::fs::write(&rules, "all CN=ok,O=Example allowed\n").unwrap();
    let access = Access::of(
        "CN=ok,O=Example".into(),
        Some(Arc::new(AllowListFile::load(rules).unwrap())),
    );
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut handle = async |request: Request| {
        handler
            .handle_as(request, &mut rng, &mut Effects::default(), &access)
            .await
    };
    // PRODUCE / MULTIPRODUCE: refused whole, before anything is appended.
    let refused = handle(Request::MultiProduce(vec![
        produce("allowed"),
        produce("denied"),
    ]))
    .await;
    assert!(
        matches!(&refused, Err(CloseReason::Denied { principal, topic }) if principal == "CN=ok,O=Example" && topic.as_str() == "denied"),
        "{refused:?}"
    );
    assert!(matches!(
        handle(Request::Produce(produce("denied"))).await,
        Err(CloseReason::Denied { .. })
    ));
    assert_eq!(logs.partition_count(&"allowed".parse().unwrap()), 1);
    let created = |t: &str| {
        logs.get(&TopicPartition::new(t.parse().unwrap(), 0))
            .is_some()
    };
    assert!(
        !created("allowed"),
        "part of a refused MULTIPRODUCE was appended"
    );
    assert!(!created("denied"));
    // ACKED_PRODUCE: answered per set.
    let acked = handle(Request::AckedProduce(vec![
        produce("allowed"),
        produce("denied"),
    ]))
    .await;
    let Ok(Some(Reply::Response(Response::AckedProduce(r)))) = acked else {
        panic!("{acked:?}")
    };
    let errors: Vec<ErrorCode> = r.acks.iter().map(|a| a.error).collect();
    assert_eq!(errors, [ErrorCode::NoError, TOPIC_AUTHORIZATION_FAILED]);
    assert!(created("allowed") && !created("denied"));
    // MULTIFETCH: the allowed block is served, the other answers 29.
    let fetched = handle(Request::MultiFetch(vec![fetch("allowed"), fetch("denied")])).await;
    let Ok(Some(Reply::MultiFetch(blocks))) = fetched else {
        panic!("{fetched:?}")
    };
    let errors: Vec<ErrorCode> = blocks.iter().map(|b| b.error).collect();
    assert_eq!(errors, [ErrorCode::NoError, TOPIC_AUTHORIZATION_FAILED]);
    let fetched = handle(Request::Fetch(fetch("denied"))).await;
    assert!(
        matches!(fetched, Ok(Some(Reply::Fetch(ref b))) if b.error == TOPIC_AUTHORIZATION_FAILED),
        "{fetched:?}"
    );
    // OFFSETS and TOPIC_ORIGINS (reading and merging).
    let offsets = handle(Request::Offsets(OffsetsRequest {
        topic: "denied".parse().unwrap(),
        partition: 0,
        time: -1,
        max_offsets: 1,
    }))
    .await;
    assert!(
        matches!(&offsets, Ok(Some(Reply::Response(Response::Offsets(o)))) if o.error == TOPIC_AUTHORIZATION_FAILED && o.offsets.is_empty()),
        "{offsets:?}"
    );
    for merge in [Bytes::new(), Bytes::from_static(b"x")] {
        let origins = handle(Request::TopicOrigins(TopicOriginsRequest {
            topic: "denied".parse().unwrap(),
            merge,
        }))
        .await;
        assert!(
            matches!(&origins, Ok(Some(Reply::Response(Response::TopicOrigins(o)))) if o.error == TOPIC_AUTHORIZATION_FAILED),
            "{origins:?}"
        );
    }
    // The same requests without an allow-list (the plaintext listener) are served.
    let open = handler
        .handle(
            Request::Fetch(fetch("denied")),
            &mut ChaCha8Rng::seed_from_u64(2),
            &mut Effects::default(),
        )
        .await;
    assert!(
        matches!(open, Ok(Some(Reply::Fetch(ref b))) if b.error != TOPIC_AUTHORIZATION_FAILED),
        "{open:?}"
    );
}
