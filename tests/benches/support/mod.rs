//! What the benches that run brokers in-process share.

use tributary::broker::Broker;
use tributary::env::TokioEnv;
use tributary_core::config::BrokerConfig;

/// A broker on a thread and runtime of its own (as in its own process), its threads named
/// [`tributary_tests::bench::BROKER_THREAD_NAME`] so that their CPU time can be told apart from
/// the component measured. [`BenchBroker::stop`] stops it and waits for it.
pub struct BenchBroker {
    /// The port it listens on.
    pub port: u16,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl BenchBroker {
    /// Starts a broker with `config` and waits until it listens.
    pub fn start(config: BrokerConfig) -> Self {
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(tributary_tests::bench::BROKER_THREAD_NAME.into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name(tributary_tests::bench::BROKER_THREAD_NAME)
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async move {
                    let broker = Broker::start(TokioEnv, config).await.expect("broker");
                    port_tx.send(broker.addr.port()).expect("port");
                    broker
                        .run_until(async { drop(stop_rx.await) })
                        .await
                        .expect("broker run");
                });
            })
            .expect("broker thread");
        let port = port_rx.recv().expect("the broker did not start");
        BenchBroker { port, stop, thread }
    }

    /// Stops the broker and waits for its thread; a broker that failed fails the bench.
    pub fn stop(self) {
        drop(self.stop);
        self.thread.join().expect("the broker thread panicked");
    }
}
