//! The Grafana dashboard in config/ is importable JSON and asks only for metrics the binaries
//! export: every metric of every component is registered and rendered, and each name a panel's
//! query uses must be among them (a renamed metric breaks this test, not an operator's graph).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tributary::metrics::broker::BrokerMeter;
use tributary::metrics::clients::{watch_consumer, watch_producer, ConsumerSnapshot};
use tributary::metrics::mirror::{watch_mirror, LagGauges};
use tributary::metrics::Metrics;
use tributary::mirror::MirrorStats;
use tributary::producer::ProducerStats;
use tributary_core::mirror::lag::LagSample;

/// Every series name a process with every component exports.
fn exported_names() -> BTreeSet<String> {
    let metrics = Metrics::new();
    let meter = BrokerMeter::new(Some(&metrics));
    meter.request("produce");
    meter.error("fetch", "offset_out_of_range");
    meter.bytes_in("t", 1);
    meter.bytes_out("t", 1);
    meter.flushed(Duration::from_millis(1));
    meter.connections(1);
    meter.partitions(
        &mut Default::default(),
        &mut Default::default(),
        [("t".to_string(), 0, 10, 5)],
    );
    let mirror = metrics.mirror();
    LagGauges::default().update(
        &mirror,
        0,
        &[LagSample {
            source: "east".into(),
            topic: "t".into(),
            partition: "0-0".into(),
            source_end: 10,
            position: 5,
        }],
    );
    let producer = Arc::new(ProducerStats::default());
    watch_producer(&metrics, Arc::downgrade(&producer));
    let stats = Arc::new(MirrorStats::default());
    watch_mirror(&metrics, Arc::downgrade(&stats));
    watch_consumer(
        &metrics,
        || {
            Some(ConsumerSnapshot {
                messages: 1,
                rebalances: 1,
                gaps: 0,
                gap_bytes: 0,
                committed: vec![("t".into(), "0-0".into(), 5)],
            })
        },
        Some(mirror),
    );
    let text = metrics.render().expect("render");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

/// Every `tributary_*` name in a PromQL expression.
fn names_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("tributary_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// Every string under a key named `key`, anywhere in `value`.
fn strings_under(value: &serde_json::Value, key: &str, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match v {
                    serde_json::Value::String(s) if k == key => out.push(s.clone()),
                    _ => strings_under(v, key, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings_under(v, key, out)),
        _ => {}
    }
}

fn dashboard() -> serde_json::Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/grafana-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("config/grafana-dashboard.json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

#[test]
fn every_metric_the_dashboard_queries_is_exported() {
    let exported = exported_names();
    for expected in [
        "tributary_bytes_in_total",
        "tributary_flush_duration_seconds_bucket",
        "tributary_mirror_lag_seconds",
        "tributary_producer_dropped_total",
        "tributary_consumer_committed_offset",
        "tributary_build_info",
    ] {
        assert!(
            exported.contains(expected),
            "{expected} not in {exported:?}"
        );
    }
    let mut queries = Vec::new();
    strings_under(&dashboard(), "expr", &mut queries);
    strings_under(&dashboard(), "definition", &mut queries);
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let mut used = BTreeSet::new();
    for query in &queries {
        for name in names_in(query) {
            assert!(
                exported.contains(&name),
                "the dashboard queries {name} ({query}), which nothing exports"
            );
            used.insert(name);
        }
    }
    // The metrics an operator of a mirror watches all have a panel.
    for needed in [
        "tributary_mirror_lag_bytes",
        "tributary_mirror_lag_seconds",
        "tributary_mirror_gaps_total",
        "tributary_bytes_in_total",
        "tributary_flush_duration_seconds_bucket",
    ] {
        assert!(used.contains(needed), "no panel shows {needed}");
    }
}

#[test]
fn the_dashboard_imports_with_a_prometheus_data_source_input() {
    let d = dashboard();
    assert_eq!(d["__inputs"][0]["name"], "DS_PROMETHEUS");
    assert_eq!(d["__inputs"][0]["pluginId"], "prometheus");
    assert_eq!(d["uid"], "tributary-mirror");
    let panels = d["panels"].as_array().expect("panels");
    let ids: BTreeSet<i64> = panels.iter().filter_map(|p| p["id"].as_i64()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    let mut uids = Vec::new();
    strings_under(&d, "uid", &mut uids);
    // Every query reads the data source chosen at import (Grafana's own annotations aside).
    let others: Vec<&String> = uids
        .iter()
        .filter(|u| {
            !matches!(
                u.as_str(),
                "tributary-mirror" | "${DS_PROMETHEUS}" | "-- Grafana --"
            )
        })
        .collect();
    assert!(
        others.is_empty(),
        "data sources not chosen at import: {others:?}"
    );
}
