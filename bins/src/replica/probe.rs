//! The lag probe (metrics on): the source's end of every copied partition, against what the
//! replica durably has.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A source broker's `(host, port)`.
pub(super) type SourceAddress = (String, u16);

/// What the lag probe asks about: the source broker's address and the partitions copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ProbeTargets {
    pub(super) address: Option<SourceAddress>,
    pub(super) partitions: Vec<TopicPartition>,
}

/// With metrics on, every [`LAG_PROBE_INTERVAL`]: asks the source broker (over a connection of
/// its own, so copying never waits for it) for the end of every partition still copied, and
/// sets the lag gauges against each replica log's flushed end (what the replica durably has). A
/// round the source does not fully answer leaves the gauges as they were. Runs until `stop`.
pub(super) async fn probe_lag<E: Env>(
    env: E,
    logs: Arc<Logs<E::Fs>>,
    (source_broker, timeout): (i32, Duration),
    metrics: Arc<MirrorMetrics>,
    targets: watch::Receiver<ProbeTargets>,
    mut stop: watch::Receiver<bool>,
) {
    let mut lag = LagGauges::default();
    // The connection, with the address it goes to.
    let mut conn: Option<(SourceAddress, Connection<E::Stream>)> = None;
    loop {
        if pause(&mut stop, LAG_PROBE_INTERVAL).await {
            return;
        }
        let wanted = targets.borrow().clone();
        let Some(address) = wanted.address else {
            continue;
        };
        if conn.as_ref().is_none_or(|(at, _)| *at != address) {
            match connect(&env, &address.0, address.1, timeout).await {
                Ok(fresh) => conn = Some((address.clone(), fresh)),
                Err(e) => {
                    tracing::debug!(
                        "replica: lag probe: source broker {}:{}: {e}",
                        address.0,
                        address.1
                    );
                    conn = None;
                    continue;
                }
            }
        }
        let Some((_, open)) = conn.as_mut() else {
            continue;
        };
        let partitions: Vec<&TopicPartition> = wanted
            .partitions
            .iter()
            .filter(|tp| copying(&logs, &tp.topic))
            .collect();
        let asked: Vec<(TopicName, i32)> = partitions
            .iter()
            .map(|tp| (tp.topic.clone(), tp.partition as i32))
            .collect();
        let (ends, failed) = latest_offsets(open, &asked).await;
        if let Some(e) = failed {
            tracing::debug!("replica: lag probe: {e}; reconnecting at the next round");
            conn = None;
            continue;
        }
        // A stopped partition keeps its gauges: its lag grows, which is what to alert on.
        let samples: Vec<LagSample> = partitions
            .iter()
            .zip(ends)
            .filter_map(|(tp, end)| {
                let log = logs.get(tp)?;
                Some(LagSample {
                    source: String::new(),
                    topic: tp.topic.to_string(),
                    partition: format!("{source_broker}-{}", tp.partition),
                    source_end: end?,
                    position: i64::try_from(log.ends().1).unwrap_or(i64::MAX),
                })
            })
            .collect();
        lag.update(&metrics, env.now_ms(), &samples);
    }
}
