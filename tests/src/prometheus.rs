//! A real Prometheus server (Debian's `prometheus` package) on a free loopback port, scraping
//! the targets it is given every second, and queries of its HTTP API.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::zookeeper::free_port;

/// How long the server may take to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A Prometheus server; killed when dropped.
#[derive(Debug)]
pub struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts a server scraping `targets` (`host:port`, job `tributary`) every second, and waits
    /// until it is ready.
    pub fn start(targets: &[String]) -> Prometheus {
        Self::start_with_rules(targets, None)
    }

    /// [`Prometheus::start`], evaluating the alerting rules `rules` (a rule file's text) every
    /// second; their state is in the `ALERTS` series.
    pub fn start_with_rules(targets: &[String], rules: Option<&str>) -> Prometheus {
        assert!(
            Path::new("/usr/bin/prometheus").exists(),
            "Prometheus is not installed: run scripts/install-deps.sh (apt-get install -y prometheus)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let quoted: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let rule_files = match rules {
            Some(rules) => {
                let path = dir.path().join("rules.yml");
                std::fs::write(&path, rules).expect("write rules.yml");
                format!("rule_files: ['{}']\n", path.display())
            }
            None => String::new(),
        };
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             {rule_files}scrape_configs:\n  - job_name: tributary\n    static_configs:\n      - targets: [{}]\n",
            quoted.join(", ")
        );
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, config).expect("write prometheus.yml");
        let child = Command::new("/usr/bin/prometheus")
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(dir.path().join("prometheus.log"))
                    .map_or_else(|_| Stdio::null(), Stdio::from),
            )
            .spawn()
            .expect("start prometheus");
        let server = Prometheus {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while !server.ready() {
            assert!(
                Instant::now() < deadline,
                "Prometheus did not become ready on port {port} within {START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn ready(&self) -> bool {
        ureq::get(&self.url("/-/ready")).call().is_ok()
    }

    /// The value of an instant query whose result is one sample (e.g. `sum(...)`); `None` when
    /// it has no result yet. Panics on an error answer (a wrong query is the test's bug).
    pub fn query(&self, expr: &str) -> Option<f64> {
        let body = ureq::get(&self.url("/api/v1/query"))
            .query("query", expr)
            .call()
            .unwrap_or_else(|e| panic!("query {expr}: {e}"))
            .into_body()
            .read_to_string()
            .unwrap_or_else(|e| panic!("query {expr}: reading the answer: {e}"));
        let answer: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("query {expr}: {e}: {body}"));
        assert_eq!(answer["status"], "success", "query {expr}: {body}");
        let result = answer["data"]["result"].as_array()?;
        let value = result.first()?["value"][1].as_str()?;
        value.parse().ok()
    }

    /// Waits until `expr` has a value that `ok` accepts, up to `limit`; the last value seen
    /// is in the panic message.
    pub fn wait_for(&self, expr: &str, limit: Duration, ok: impl Fn(f64) -> bool) -> f64 {
        self.try_wait_for(expr, limit, ok)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Prometheus::wait_for`], with the failure returned (for a test to add what it knows,
    /// such as the log of the process scraped).
    pub fn try_wait_for(
        &self,
        expr: &str,
        limit: Duration,
        ok: impl Fn(f64) -> bool,
    ) -> Result<f64, String> {
        let deadline = Instant::now() + limit;
        let mut last = None;
        loop {
            last = self.query(expr).or(last);
            if let Some(v) = last.filter(|v| ok(*v)) {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(format!("{expr}: last value {last:?} after {limit:?}"));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
