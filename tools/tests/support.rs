//! What the tools' tests share: a broker to run a tool against.

use std::path::Path;

use tributary::broker::{Broker, BrokerError};
use tributary::env::TokioEnv;
use tributary_core::config::{BrokerConfig, Properties};

/// A standalone broker (no ZooKeeper) in this process on a free port, with `extra` lines of
/// configuration, serving until the returned task is aborted; its port.
pub async fn standalone_broker(
    dir: &Path,
    extra: &str,
) -> (u16, tokio::task::JoinHandle<Result<(), BrokerError>>) {
    let text = format!(
        "brokerid=0\nport=0\nhostname=127.0.0.1\nlog.dir={}\nenable.zookeeper=false\n{extra}",
        dir.display()
    );
    let properties = Properties::parse("test", &text).expect("the test's broker properties parse");
    let config =
        BrokerConfig::from_properties(&properties).expect("the test's broker config is valid");
    let broker = Broker::start(TokioEnv, config)
        .await
        .expect("the test broker starts");
    let port = broker.addr.port();
    (port, tokio::spawn(broker.run_until(std::future::pending())))
}
