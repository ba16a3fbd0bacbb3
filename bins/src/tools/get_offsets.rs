//! `get-offsets`: 0.7's GetOffsetShell.

use std::time::Duration;

use tributary_core::wire::{OffsetsRequest, Request, Response, TopicName};

use crate::client::{connect, parse_server};
use crate::env::TokioEnv;

/// Asks `server` for up to `count` offsets of `topic`/`partition` before `time`.
pub async fn get_offsets(
    server: &str,
    topic: &TopicName,
    partition: i32,
    time: i64,
    count: i32,
) -> Result<Vec<i64>, String> {
    let (host, port) = parse_server(server)?;
    let mut conn = connect(&TokioEnv, &host, port, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let request = Request::Offsets(OffsetsRequest {
        topic: topic.clone(),
        partition,
        time,
        max_offsets: count,
    });
    match conn.call(&request).await.map_err(|e| e.to_string())? {
        Response::Offsets(r) => Ok(r.offsets),
        other => Err(format!("unexpected response {other:?}")),
    }
}
