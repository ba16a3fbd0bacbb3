//! A connection that failed mid-call is never reused: 0.7 has no correlation ids, so a late
//! answer would otherwise be taken as the answer to the next request.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tributary::client::{connect, ClientError};
use tributary::env::TokioEnv;
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{
    ErrorCode, FetchRequest, FetchResponse, ProduceRequest, Request, Response,
};

fn fetch(offset: i64) -> Request {
    Request::Fetch(FetchRequest {
        topic: "t".parse().unwrap(),
        partition: 0,
        offset,
        max_bytes: 1000,
    })
}

fn fetch_response(payload: &str) -> Bytes {
    let mut set = MessageSetBuilder::new();
    set.push(payload.as_bytes().to_vec());
    Response::Fetch(FetchResponse {
        error: ErrorCode::NoError,
        messages: set.build(CompressionCodec::None),
    })
    .to_bytes()
    .unwrap()
}

/// Reads one request frame (size prefix and body).
async fn read_request(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    let size = stream.read_i32().await.unwrap();
    let mut body = vec![0; size as usize];
    stream.read_exact(&mut body).await.unwrap();
    body
}

/// A broker stand-in that answers the first request late (after the client gave up) and every
/// later one at once.
async fn late_broker() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        read_request(&mut stream).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let _ = stream
            .write_all(&fetch_response("stale answer to the first fetch"))
            .await;
        loop {
            tokio::select! {
                _ = read_request(&mut stream) => {
                    let _ = stream.write_all(&fetch_response("answer to the second fetch")).await;
                }
                () = tokio::time::sleep(Duration::from_secs(5)) => return,
            }
        }
    });
    port
}

#[tokio::test]
async fn late_response_is_never_returned_for_the_next_call() {
    let port = late_broker().await;
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_millis(100))
        .await
        .unwrap();
    let first = conn.call(&fetch(0)).await;
    assert!(
        matches!(first, Err(ClientError::Timeout { .. })),
        "{first:?}"
    );
    // Let the stale answer arrive on the socket.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let second = conn.call(&fetch(100)).await;
    match second {
        Err(ClientError::Poisoned { cause, .. }) => {
            assert!(cause.contains("did not answer"), "{cause}")
        }
        other => panic!("a timed-out connection was reused: {other:?}"),
    }
    assert!(conn.is_poisoned());
    // Sends are refused too: a produce after the failure must not go out on this connection.
    let produce = Request::Produce(ProduceRequest {
        topic: "t".parse().unwrap(),
        partition: 0,
        messages: Bytes::new(),
    });
    assert!(matches!(
        conn.send(&produce).await,
        Err(ClientError::Poisoned { .. })
    ));
}

#[tokio::test]
async fn call_refuses_a_produce_before_sending_it() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(2))
        .await
        .unwrap();
    let (mut server_side, _) = listener.accept().await.unwrap();
    let mut set = MessageSetBuilder::new();
    set.push(b"x".to_vec());
    let produce = Request::Produce(ProduceRequest {
        topic: "t".parse().unwrap(),
        partition: 0,
        messages: set.build(CompressionCodec::None),
    });
    assert!(matches!(
        conn.call(&produce).await,
        Err(ClientError::NoResponse(_))
    ));
    // Nothing reached the broker, and the connection is still good for a real call.
    let mut byte = [0u8; 1];
    let nothing =
        tokio::time::timeout(Duration::from_millis(200), server_side.read(&mut byte)).await;
    assert!(nothing.is_err(), "the refused produce was sent anyway");
    assert!(!conn.is_poisoned());
}

#[tokio::test]
async fn a_call_abandoned_mid_way_poisons_the_connection() {
    let port = late_broker().await;
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(5))
        .await
        .unwrap();
    // The caller gives up on its own (a timeout around the call): the call's future is dropped.
    let abandoned = tokio::time::timeout(Duration::from_millis(100), conn.call(&fetch(0))).await;
    assert!(abandoned.is_err());
    tokio::time::sleep(Duration::from_millis(600)).await;
    match conn.call(&fetch(100)).await {
        Err(ClientError::Poisoned { cause, .. }) => assert!(cause.contains("abandoned"), "{cause}"),
        other => panic!("an abandoned call's connection was reused: {other:?}"),
    }
}

/// A broker stand-in that reads `requests` requests before answering any (so only a client that
/// sent them together is answered), then answers them in order, `answered` of them, and closes.
async fn batch_broker(requests: usize, answered: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut offsets = Vec::new();
        for _ in 0..requests {
            let body = read_request(&mut stream).await;
            // FETCH body: type (2), topic (2 + 1), partition (4), offset (8), max bytes (4).
            offsets.push(i64::from_be_bytes(body[9..17].try_into().unwrap()));
        }
        for offset in offsets.into_iter().take(answered) {
            let _ = stream
                .write_all(&fetch_response(&format!("answer to offset {offset}")))
                .await;
        }
    });
    port
}

/// The answer's payload: the text after the message header (one uncompressed message).
fn payload(response: &Response) -> String {
    match response {
        Response::Fetch(f) => {
            let text = String::from_utf8_lossy(&f.messages);
            let at = text.find("answer").expect("an answer");
            text[at..].to_string()
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn pipelined_requests_are_sent_together_and_answered_in_order() {
    let port = batch_broker(5, 5).await;
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(2))
        .await
        .unwrap();
    let requests: Vec<Request> = (10..15).map(fetch).collect();
    let answers = conn.call_pipelined(&requests).await.unwrap();
    let payloads: Vec<String> = answers.iter().map(payload).collect();
    assert_eq!(
        payloads,
        (10..15)
            .map(|o| format!("answer to offset {o}"))
            .collect::<Vec<_>>()
    );
    assert!(!conn.is_poisoned());
}

#[tokio::test]
async fn a_pipelined_batch_cut_short_poisons_the_connection() {
    let port = batch_broker(4, 2).await;
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(2))
        .await
        .unwrap();
    let requests: Vec<Request> = (0..4).map(fetch).collect();
    let cut = conn.call_pipelined(&requests).await;
    assert!(matches!(cut, Err(ClientError::Closed(_))), "{cut:?}");
    assert!(conn.is_poisoned());
    let next = conn.call(&fetch(9)).await;
    assert!(
        matches!(next, Err(ClientError::Poisoned { .. })),
        "{next:?}"
    );
}

#[tokio::test]
async fn too_many_requests_to_pipeline_are_refused_before_anything_is_sent() {
    let port = batch_broker(1, 1).await;
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(2))
        .await
        .unwrap();
    let too_many: Vec<Request> = (0..=tributary::client::PIPELINED_REQUESTS_MAX as i64)
        .map(fetch)
        .collect();
    let refused = conn.call_pipelined(&too_many).await;
    assert!(
        matches!(refused, Err(ClientError::TooManyPipelined { .. })),
        "{refused:?}"
    );
    assert!(!conn.is_poisoned());
    let answer = conn.call(&fetch(7)).await.unwrap();
    assert_eq!(payload(&answer), "answer to offset 7");
}
