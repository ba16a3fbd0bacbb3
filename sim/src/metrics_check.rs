//! The mirror scenario's metrics check (invariant `MirrorMetrics`): every broker and every
//! mirror serves its Prometheus endpoint in the simulator (the production HTTP server, over
//! turmoil), and once the mirror has drained, what they say agrees with the clusters:
//!
//! - each source broker's `tributary_log_flushed_offset` of a partition is the latest offset
//!   the broker answers for it (a partition with no log there, latest 0, has no gauge);
//! - for every source partition, some mirror reports `tributary_mirror_lag_bytes` of 0, and
//!   none reports more (the lag gauges follow the commits);
//! - with mirror positions, for every source partition holding data, the furthest
//!   `tributary_mirror_held_offset` the mirror brokers report for it is its latest offset.
//!
//! Gauges are refreshed on their own clocks (the mirror's every 5 s), so the check reads again
//! for a bounded time before calling a disagreement.

use std::collections::BTreeMap;
use std::time::Duration;

use tributary::failure::Failure;
use tributary::metrics::server::scrape;
use tributary_core::consumer::BrokerPartition;

use crate::env::SimEnv;

/// Where brokers serve metrics in the scenario (`metrics.port`).
pub const BROKER_METRICS_PORT: u16 = 9404;
/// Where the mirror maker serves its metrics (`--metrics.port`); an embedded mirror's are its
/// broker's, on [`BROKER_METRICS_PORT`].
pub const MIRROR_METRICS_PORT: u16 = 9405;
/// How long the check reads again before calling a disagreement.
const SETTLE: Duration = Duration::from_secs(20);
/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// A source partition: (topic, `<broker>-<partition>`).
pub type Part = (String, String);

/// The value of the first sample `name{…}` in a text-format scrape that carries every one of
/// `labels` (in any order, among others).
pub fn sample_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    sample_values(text, name, labels).next()
}

/// The values of every sample `name{…}` in a text-format scrape that carries every one of
/// `labels`, in the scrape's order.
pub fn sample_values<'a>(
    text: &'a str,
    name: &'a str,
    labels: &[(&str, &str)],
) -> impl Iterator<Item = f64> + 'a {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (found, value) = match rest.strip_prefix('{') {
            Some(inner) => {
                let (found, value) = inner.split_once("} ")?;
                (found.split(',').collect::<Vec<_>>(), value)
            }
            None => (Vec::new(), rest.strip_prefix(' ')?),
        };
        wanted
            .iter()
            .all(|w| found.contains(&w.as_str()))
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

/// What disagrees now (empty: everything agrees). `latest` holds each source partition's
/// latest offset as its broker answered; `held_by`, the mirror brokers whose positions must
/// reach it (none: not checked).
async fn disagreements(
    latest: &BTreeMap<Part, i64>,
    source_cluster: &str,
    mirror_endpoints: &[(String, u16)],
    held_by: &[String],
) -> Vec<String> {
    let env = SimEnv::new(0);
    let mut problems = Vec::new();
    let mut broker_texts: BTreeMap<String, String> = BTreeMap::new();
    for ((topic, name), end) in latest {
        let Some(BrokerPartition {
            broker_id: broker,
            partition,
        }) = BrokerPartition::parse(name)
        else {
            problems.push(format!("{topic}/{name}: not <broker>-<partition>"));
            continue;
        };
        let partition = partition.to_string();
        let host = format!("{source_cluster}-broker{broker}");
        if !broker_texts.contains_key(&host) {
            match scrape_within(&env, &host, BROKER_METRICS_PORT).await {
                Ok(text) => drop(broker_texts.insert(host.clone(), text)),
                Err(e) => {
                    problems.push(format!("{host}: {e}"));
                    continue;
                }
            }
        }
        let text = broker_texts.get(&host).map_or("", String::as_str);
        let flushed = sample_value(
            text,
            "tributary_log_flushed_offset",
            &[("topic", topic), ("partition", partition.as_str())],
        );
        // A partition with no log on its broker (0.7.1+ answers OFFSETS with 0 for it) has no
        // gauge.
        let agrees = match flushed {
            Some(v) => v == *end as f64,
            None => *end == 0,
        };
        if !agrees {
            problems.push(format!(
                "{host}: tributary_log_flushed_offset of {topic}/{partition} is {flushed:?}, its latest offset {end}"
            ));
        }
    }
    let mut mirror_texts = Vec::new();
    for (host, port) in mirror_endpoints {
        match scrape_within(&env, host, *port).await {
            Ok(text) => mirror_texts.push((host, text)),
            Err(e) => problems.push(format!("{host}: {e}")),
        }
    }
    for (topic, name) in latest.keys() {
        let labels = [("topic", topic.as_str()), ("partition", name.as_str())];
        let lags: Vec<(&String, f64)> = mirror_texts
            .iter()
            .filter_map(|(host, text)| {
                sample_value(text, "tributary_mirror_lag_bytes", &labels).map(|v| (*host, v))
            })
            .collect();
        if lags.iter().all(|(_, lag)| *lag != 0.0) || lags.iter().any(|(_, lag)| *lag > 0.0) {
            problems.push(format!(
                "{topic}/{name}: mirror lag gauges {lags:?} after the drain (wanted one 0 and none above)"
            ));
        }
    }
    problems.extend(held_disagreements(&env, latest, held_by).await);
    problems
}

/// Where the mirror brokers' `tributary_mirror_held_offset` does not reach a source
/// partition's latest offset (the furthest of their gauges for it is taken).
async fn held_disagreements(
    env: &SimEnv,
    latest: &BTreeMap<Part, i64>,
    held_by: &[String],
) -> Vec<String> {
    if held_by.is_empty() {
        return Vec::new();
    }
    let mut problems = Vec::new();
    let mut texts = Vec::new();
    for host in held_by {
        match scrape_within(env, host, BROKER_METRICS_PORT).await {
            Ok(text) => texts.push(text),
            Err(e) => problems.push(format!("{host}: {e}")),
        }
    }
    for ((topic, name), end) in latest.iter().filter(|(_, end)| **end > 0) {
        let labels = [
            ("source_topic", topic.as_str()),
            ("source_partition", name.as_str()),
        ];
        let furthest = texts
            .iter()
            .flat_map(|text| sample_values(text, "tributary_mirror_held_offset", &labels))
            .reduce(f64::max);
        if furthest != Some(*end as f64) {
            problems.push(format!(
                "{topic}/{name}: the mirror brokers hold its copy to {furthest:?} (tributary_mirror_held_offset), its latest offset is {end}"
            ));
        }
    }
    problems
}

/// One scrape within [`SCRAPE_TIMEOUT`] (a hung endpoint is a disagreement, not a stuck check).
async fn scrape_within(env: &SimEnv, host: &str, port: u16) -> Result<String, Failure> {
    match tokio::time::timeout(SCRAPE_TIMEOUT, scrape(env, host, port)).await {
        Ok(scraped) => scraped.map_err(|e| Failure::caused(e.to_string(), e)),
        Err(_) => Err(Failure::from(format!(
            "no answer within {SCRAPE_TIMEOUT:?}"
        ))),
    }
}

/// Reads until the metrics agree with the clusters or [`SETTLE`] passes; the disagreements
/// left (empty when they agree).
pub async fn check(
    latest: &BTreeMap<Part, i64>,
    source_cluster: &str,
    mirror_endpoints: &[(String, u16)],
    held_by: &[String],
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let problems = disagreements(latest, source_cluster, mirror_endpoints, held_by).await;
        if problems.is_empty() || tokio::time::Instant::now() >= deadline {
            return problems;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_found_by_name_and_labels_in_any_order() {
        let text = "# HELP x y\ntributary_mirror_lag_bytes{partition=\"0-1\",topic=\"orders\"} 0\n\
                    tributary_mirror_lag_bytes{partition=\"0-0\",topic=\"orders\"} 12\ntributary_connections 3\n";
        let lag = |p| {
            sample_value(
                text,
                "tributary_mirror_lag_bytes",
                &[("topic", "orders"), ("partition", p)],
            )
        };
        assert_eq!(lag("0-0"), Some(12.0));
        assert_eq!(lag("0-1"), Some(0.0));
        assert_eq!(lag("1-0"), None);
        assert_eq!(sample_value(text, "tributary_connections", &[]), Some(3.0));
    }
}
