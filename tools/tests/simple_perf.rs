//! `simple-consumer-perf` against a broker in this process: 0.7's columns, messages counted as
//! 0.7 counts them (inner messages of compressed sets one by one, payload bytes), where it
//! starts and stops, and what it says about a partition it cannot read.

use std::time::Duration;

use bytes::Bytes;
use tributary::client::connect;
use tributary::env::TokioEnv;
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{OffsetsRequest, ProduceRequest, Request, Response};
use tributary_tools::date_format::DateFormat;
use tributary_tools::simple_perf::{simple_consumer_perf, SimplePerfOptions};

use crate::support;

fn set(n: usize, size: usize, codec: CompressionCodec) -> Bytes {
    let mut b = MessageSetBuilder::new();
    (0..n).for_each(|i| {
        b.push(vec![i as u8; size]);
    });
    b.build(codec)
}

fn options(port: u16) -> SimplePerfOptions {
    SimplePerfOptions {
        server: format!("kafka://127.0.0.1:{port}"),
        topic: "perf".parse().unwrap(),
        partition: 0,
        fetch_size: 1024,
        from_latest: false,
        messages: None,
        report_every: None,
        hide_header: false,
        dates: DateFormat::perf_default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_reads_a_partition_to_its_end_and_prints_0_7s_columns() {
    let dir = tempfile::tempdir().unwrap();
    let (port, server) = support::standalone_broker(dir.path(), "log.flush.interval=1\n").await;
    // 30 plain messages of 100 B, then a gzip set of 50 messages of 10 B (one entry on disk,
    // 50 messages to 0.7's count), then 30 more plain: 110 messages, 6,500 payload bytes.
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(5))
        .await
        .unwrap();
    let sets = [
        set(30, 100, CompressionCodec::None),
        set(50, 10, CompressionCodec::Gzip),
        set(30, 100, CompressionCodec::None),
    ];
    let total: usize = sets.iter().map(Bytes::len).sum();
    for messages in sets {
        conn.send(&Request::Produce(ProduceRequest {
            topic: "perf".parse().unwrap(),
            partition: 0,
            messages,
        }))
        .await
        .unwrap();
    }
    // Everything visible first (each append is flushed), then one run.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let latest = Request::Offsets(OffsetsRequest {
            topic: "perf".parse().unwrap(),
            partition: 0,
            time: -1,
            max_offsets: 1,
        });
        match conn.call(&latest).await.unwrap() {
            Response::Offsets(o) if o.offsets.first() == Some(&(total as i64)) => break,
            _ => assert!(
                tokio::time::Instant::now() < deadline,
                "the produces never became visible"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut out = Vec::new();
    let result = simple_consumer_perf(&TokioEnv, &options(port), &mut out)
        .await
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        result.messages, 110,
        "inner messages of the gzip set count one by one"
    );
    assert_eq!(result.end_offset, total as i64);
    assert_eq!(result.payload_bytes, 6_500);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "start.time, end.time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
    );
    let columns: Vec<&str> = lines[1].split(", ").collect();
    assert_eq!(columns.len(), 7, "{}", lines[1]);
    assert_eq!(
        (columns[2], columns[3], columns[5]),
        ("1024", "0.0062", "110")
    );
    assert_eq!(lines.len(), 2);

    // From the latest offset there is nothing; --messages stops early; progress lines.
    let latest = SimplePerfOptions {
        from_latest: true,
        hide_header: true,
        ..options(port)
    };
    let mut out = Vec::new();
    let r = simple_consumer_perf(&TokioEnv, &latest, &mut out)
        .await
        .unwrap();
    assert_eq!((r.messages, r.end_offset), (0, result.end_offset));
    assert_eq!(
        String::from_utf8(out).unwrap().lines().count(),
        1,
        "no header"
    );
    let limited = SimplePerfOptions {
        messages: Some(10),
        fetch_size: 400,
        report_every: Some(10),
        ..options(port)
    };
    let mut out = Vec::new();
    let r = simple_consumer_perf(&TokioEnv, &limited, &mut out)
        .await
        .unwrap();
    assert!(r.messages > 10 && r.messages < 110, "{r:?}");
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("time, fetch.size,"), "{text}");
    assert!(
        text.lines().count() >= 2,
        "a progress line per 10 messages: {text}"
    );

    // What it cannot read, it says.
    let missing = SimplePerfOptions {
        partition: 7,
        ..options(port)
    };
    let err = simple_consumer_perf(&TokioEnv, &missing, &mut Vec::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("perf/7"), "{err}");
    let small = SimplePerfOptions {
        fetch_size: 50,
        ..options(port)
    };
    let err = simple_consumer_perf(&TokioEnv, &small, &mut Vec::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("raise --fetch-size"), "{err}");
    server.abort();
}
