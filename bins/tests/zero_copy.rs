//! Zero-copy fetch on real sockets: a response far larger than the socket buffers, sent with
//! sendfile to a reader that takes it slowly (every partial send and wait for the socket to
//! drain), arrives byte for byte as stored, and the connection goes on serving in order.

use std::time::Duration;

use crate::support;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tributary::client::connect;
use tributary::env::TokioEnv;
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{
    FetchRequest, OffsetsRequest, ProduceRequest, Request, Response, ResponseKind,
};

fn set(k: u8) -> Bytes {
    let mut b = MessageSetBuilder::new();
    (0..200usize).for_each(|i| {
        b.push((0..1000).map(|j| (i + j) as u8 ^ k).collect::<Vec<u8>>());
    });
    b.build(CompressionCodec::None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_zero_copy_response_reaches_a_slow_reader_whole_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    // Small socket buffers, so the 8 MiB answer needs many sends and many waits.
    let extra = "log.flush.interval=1\nsocket.send.buffer=16384\n";
    let (port, server) = support::standalone_broker(dir.path(), extra).await;
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(5))
        .await
        .unwrap();
    let mut stored = BytesMut::new();
    for k in 0..40u8 {
        let messages = set(k);
        stored.extend_from_slice(&messages);
        conn.send(&Request::Produce(ProduceRequest {
            topic: "big".parse().unwrap(),
            partition: 0,
            messages,
        }))
        .await
        .unwrap();
    }
    let offsets = Request::Offsets(OffsetsRequest {
        topic: "big".parse().unwrap(),
        partition: 0,
        time: -1,
        max_offsets: 1,
    });
    let Response::Offsets(end) = conn.call(&offsets).await.unwrap() else {
        panic!("not an offsets response")
    };
    assert_eq!(
        end.offsets,
        vec![stored.len() as i64],
        "everything is flushed"
    );

    // A raw socket, read in small bites with pauses: FETCH everything, then OFFSETS on the same
    // connection (its answer must come after the whole FETCH answer, not inside it).
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let fetch = Request::Fetch(FetchRequest {
        topic: "big".parse().unwrap(),
        partition: 0,
        offset: 0,
        max_bytes: 16 << 20,
    });
    let mut requests = BytesMut::new();
    fetch.encode(&mut requests).unwrap();
    offsets.encode(&mut requests).unwrap();
    raw.write_all(&requests).await.unwrap();
    let mut received = Vec::new();
    let mut bite = vec![0u8; 64 * 1024];
    let want = 6 + stored.len() + 4 + 2 + 4 + 8;
    while received.len() < want {
        let n = tokio::time::timeout(Duration::from_secs(20), raw.read(&mut bite))
            .await
            .expect("the broker stopped sending")
            .unwrap();
        assert!(n > 0, "closed after {} of {want} bytes", received.len());
        received.extend_from_slice(&bite[..n]);
        if received.len() % 7 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let received = Bytes::from(received);
    let fetch_len = 4 + 2 + stored.len();
    let Response::Fetch(f) =
        Response::decode(ResponseKind::Fetch, &received.slice(4..fetch_len)).unwrap()
    else {
        panic!("not a fetch response")
    };
    assert_eq!(f.messages.len(), stored.len());
    assert!(
        f.messages == stored.freeze(),
        "the served bytes differ from the stored ones"
    );
    let Response::Offsets(o) =
        Response::decode(ResponseKind::Offsets, &received.slice(fetch_len + 4..)).unwrap()
    else {
        panic!("not an offsets response")
    };
    assert_eq!(o.offsets, end.offsets);
    server.abort();
}
