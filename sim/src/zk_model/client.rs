//! The ZooKeeper model's client: [`Coordination`] over simulated TCP, behaving like a real
//! ZooKeeper client where the broker can tell: pings every third of the session timeout; on a
//! lost connection, in-flight calls fail with `ConnectionLoss`, a `Disconnected` event is
//! given, and the client keeps reconnecting with the same session; if the server has expired
//! it, `Expired` is given and the session is dead (every call fails, every watch fires). On
//! every reconnect it first sends `SetWatches` (its unfired watches, the last zxid it saw), as
//! `zookeeper-client` does, so a change made while it was away fires its watch.
//! Like the `zookeeper-client` crate, it also gives a session up on its own once it has heard
//! nothing from any server for 7/5 of the session timeout (a server down that long): `Expired`,
//! although a restarted server may still hold the session, and its ephemeral nodes, until the
//! session times out there.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tributary::coordination::{CoordError, Coordination, NodeKind, OwnedNode, SessionEvent, Watch};

use super::proto::{recv_server, send_client, ClientMsg, ErrCode, Op, Reply, ServerMsg};

type Pending = BTreeMap<u64, (String, oneshot::Sender<Result<Reply, CoordError>>)>;
/// Watches waiting to fire, by (path, is a child watch).
type Watches = BTreeMap<(String, bool), Vec<oneshot::Sender<()>>>;

#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<Pending>,
    watches: Mutex<Watches>,
    out: Mutex<Option<mpsc::UnboundedSender<ClientMsg>>>,
    dead: AtomicBool,
    next_xid: AtomicU64,
    /// The zxid of the last reply received: what `SetWatches` tells a server on reconnect.
    last_zxid: AtomicU64,
}

fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn fail_pending(&self, error: &CoordError) {
        for (_, (_, reply)) in std::mem::take(&mut *guard(&self.pending)) {
            let _ = reply.send(Err(error.clone()));
        }
    }

    fn fire_all_watches(&self) {
        for (_, senders) in std::mem::take(&mut *guard(&self.watches)) {
            senders.into_iter().for_each(|s| {
                let _ = s.send(());
            });
        }
    }
}

/// A session with the ZooKeeper model.
#[derive(Debug)]
pub struct ModelCoordination {
    shared: Arc<Shared>,
    events: tokio::sync::Mutex<mpsc::UnboundedReceiver<SessionEvent>>,
    timeout: Duration,
    session: u64,
    task: tokio::task::JoinHandle<()>,
}

impl ModelCoordination {
    /// Opens a session with the model at `host:port`; fails after `connect_timeout`.
    pub async fn connect(
        host: &str,
        port: u16,
        session_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self, CoordError> {
        let addr = (host.to_string(), port);
        // Like a real client: keep trying (a partition may heal) until the connect timeout.
        let deadline = tokio::time::Instant::now() + connect_timeout;
        let (stream, session) = loop {
            let attempt =
                tokio::time::timeout(session_timeout / 3, handshake(&addr, 0, session_timeout))
                    .await;
            match attempt {
                Ok(Ok(connected)) => break connected,
                _ if tokio::time::Instant::now() >= deadline => {
                    return Err(CoordError::ConnectionLoss(format!(
                        "{host}:{port}: no session within {connect_timeout:?}"
                    )))
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        let shared = Arc::new(Shared::default());
        let (events_tx, events) = mpsc::unbounded_channel();
        let outbox = outbox(&shared);
        let task = tokio::spawn(run_session(
            addr,
            session,
            session_timeout,
            stream,
            outbox,
            shared.clone(),
            events_tx,
        ));
        Ok(ModelCoordination {
            shared,
            events: tokio::sync::Mutex::new(events),
            timeout: session_timeout,
            session,
            task,
        })
    }

    async fn call(&self, op: Op, path: &str) -> Result<Reply, CoordError> {
        if self.shared.dead.load(Ordering::SeqCst) {
            return Err(CoordError::SessionExpired);
        }
        let xid = self.shared.next_xid.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        guard(&self.shared.pending).insert(xid, (path.to_string(), tx));
        let sent = guard(&self.shared.out)
            .as_ref()
            .is_some_and(|out| out.send(ClientMsg::Request { xid, op }).is_ok());
        if !sent {
            guard(&self.shared.pending).remove(&xid);
            return Err(CoordError::ConnectionLoss(format!("{path}: not connected")));
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(CoordError::ConnectionLoss(format!(
                "{path}: connection lost"
            ))),
            Err(_) => {
                guard(&self.shared.pending).remove(&xid);
                Err(CoordError::ConnectionLoss(format!(
                    "{path}: no answer within {:?}",
                    self.timeout
                )))
            }
        }
    }

    fn watch(&self, path: &str, children: bool) -> Watch {
        let (tx, rx) = oneshot::channel();
        guard(&self.shared.watches)
            .entry((path.to_string(), children))
            .or_default()
            .push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

fn map_err(code: ErrCode, path: &str) -> CoordError {
    match code {
        ErrCode::NoNode => CoordError::NoNode(path.to_string()),
        ErrCode::NodeExists => CoordError::NodeExists(path.to_string()),
        ErrCode::BadVersion => CoordError::BadVersion(path.to_string()),
        ErrCode::NotEmpty => CoordError::NotEmpty(path.to_string()),
        ErrCode::Invalid => CoordError::Other(format!("{path}: invalid")),
    }
}

fn unexpected(reply: Reply) -> CoordError {
    CoordError::Other(format!("unexpected reply {reply:?}"))
}

async fn handshake(
    addr: &(String, u16),
    session: u64,
    timeout: Duration,
) -> std::io::Result<(turmoil::net::TcpStream, u64)> {
    let mut stream = turmoil::net::TcpStream::connect((addr.0.as_str(), addr.1)).await?;
    send_client(
        &mut stream,
        &ClientMsg::Connect {
            session,
            timeout_ms: timeout.as_millis() as u64,
        },
    )
    .await?;
    match recv_server(&mut stream).await? {
        ServerMsg::Connected { session } => Ok((stream, session)),
        ServerMsg::Expired => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "session expired",
        )),
        other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
    }
}

/// A fresh outgoing queue, installed before the connection's tasks start so that calls made
/// right after a (re)connect are not refused.
fn outbox(shared: &Shared) -> mpsc::UnboundedReceiver<ClientMsg> {
    let (tx, rx) = mpsc::unbounded_channel();
    *guard(&shared.out) = Some(tx);
    rx
}

/// Queues `SetWatches` first on a connection that resumes the session, as the
/// `zookeeper-client` crate does (`resend_watches`): every watch not fired yet, with the last
/// zxid seen, so a change made while the client was away still fires its watch.
fn set_watches_again(shared: &Shared) {
    let (mut data, mut children) = (Vec::new(), Vec::new());
    for (path, for_children) in guard(&shared.watches).keys() {
        match for_children {
            true => children.push(path.clone()),
            false => data.push(path.clone()),
        }
    }
    if data.is_empty() && children.is_empty() {
        return;
    }
    let message = ClientMsg::SetWatches {
        last_zxid: shared.last_zxid.load(Ordering::SeqCst),
        data,
        children,
    };
    if let Some(out) = guard(&shared.out).as_ref() {
        let _closed_again = out.send(message).is_err();
    }
}

/// Drives the session: one connection at a time, pings, reconnects, expiry.
async fn run_session(
    addr: (String, u16),
    session: u64,
    timeout: Duration,
    mut stream: turmoil::net::TcpStream,
    mut rx: mpsc::UnboundedReceiver<ClientMsg>,
    shared: Arc<Shared>,
    events: mpsc::UnboundedSender<SessionEvent>,
) {
    // The zookeeper-client crate's limit on a session without contact (its
    // `session_expired_timeout`): past it the client expires the session itself.
    let give_up_after = timeout * 7 / 5;
    loop {
        let last_heard = serve_connection(stream, rx, timeout, &shared).await;
        shared.fail_pending(&CoordError::ConnectionLoss("connection lost".into()));
        let _ = events.send(SessionEvent::Disconnected);
        stream = loop {
            tokio::time::sleep(timeout / 10).await;
            if tokio::time::Instant::now() >= last_heard + give_up_after {
                shared.dead.store(true, Ordering::SeqCst);
                shared.fail_pending(&CoordError::SessionExpired);
                shared.fire_all_watches();
                let _ = events.send(SessionEvent::Expired);
                return;
            }
            match tokio::time::timeout(timeout / 3, handshake(&addr, session, timeout)).await {
                Ok(Ok((s, _))) => {
                    rx = outbox(&shared);
                    set_watches_again(&shared);
                    break s;
                }
                Ok(Err(e))
                    if e.kind() == std::io::ErrorKind::ConnectionRefused
                        && e.to_string().contains("expired") =>
                {
                    shared.dead.store(true, Ordering::SeqCst);
                    shared.fail_pending(&CoordError::SessionExpired);
                    shared.fire_all_watches();
                    let _ = events.send(SessionEvent::Expired);
                    return;
                }
                _ => {}
            }
        };
        let _ = events.send(SessionEvent::Connected);
    }
}

/// Runs one connection until it breaks or stays silent past two thirds of the timeout; returns
/// when the server was last heard from.
async fn serve_connection(
    stream: turmoil::net::TcpStream,
    mut rx: mpsc::UnboundedReceiver<ClientMsg>,
    timeout: Duration,
    shared: &Arc<Shared>,
) -> tokio::time::Instant {
    let mut last_heard = tokio::time::Instant::now();
    let (mut reader, mut writer) = tokio::io::split(stream);
    let Some(tx) = guard(&shared.out).clone() else {
        return last_heard;
    };
    let writer_task = AbortOnDrop(tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            if send_client(&mut writer, &msg).await.is_err() {
                return;
            }
        }
    }));
    let ping = tx.clone();
    let pinger = AbortOnDrop(tokio::spawn(async move {
        loop {
            tokio::time::sleep(timeout / 3).await;
            if ping.send(ClientMsg::Ping).is_err() {
                return;
            }
        }
    }));
    loop {
        let msg = match tokio::time::timeout(timeout * 2 / 3, recv_server(&mut reader)).await {
            Ok(Ok(msg)) => msg,
            _ => break,
        };
        last_heard = tokio::time::Instant::now();
        match msg {
            ServerMsg::Reply { xid, zxid, result } => {
                shared.last_zxid.fetch_max(zxid, Ordering::SeqCst);
                if let Some((path, reply)) = guard(&shared.pending).remove(&xid) {
                    let _ = reply.send(result.map_err(|code| map_err(code, &path)));
                }
            }
            ServerMsg::Watch { path, children } => {
                for s in guard(&shared.watches)
                    .remove(&(path, children))
                    .unwrap_or_default()
                {
                    let _ = s.send(());
                }
            }
            ServerMsg::Expired => break,
            ServerMsg::Pong | ServerMsg::Connected { .. } => {}
        }
    }
    *guard(&shared.out) = None;
    drop((pinger, writer_task));
    last_heard
}

/// A connection's task, aborted when this is dropped: whether the connection ends or the whole
/// session task is aborted (the client was dropped), its writer and pinger go with it, and the
/// connection closes, as a real client's does. (Left running, they would keep pinging a
/// session its owner dropped, and a restarted host's runtime would drop them in an order set by
/// tokio's process-wide task ids, which depend on what other tests run at the same time.)
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for ModelCoordination {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Coordination for ModelCoordination {
    async fn create(&self, path: &str, data: &[u8], kind: NodeKind) -> Result<String, CoordError> {
        let kind = match kind {
            NodeKind::Persistent => 0,
            NodeKind::Ephemeral => 1,
            NodeKind::PersistentSequential => 2,
            NodeKind::EphemeralSequential => 3,
        };
        match self
            .call(
                Op::Create {
                    path: path.into(),
                    data: data.to_vec(),
                    kind,
                },
                path,
            )
            .await?
        {
            Reply::Created(actual) => Ok(actual),
            other => Err(unexpected(other)),
        }
    }

    async fn get(&self, path: &str) -> Result<(Vec<u8>, i32), CoordError> {
        match self
            .call(
                Op::Get {
                    path: path.into(),
                    watch: false,
                },
                path,
            )
            .await?
        {
            Reply::Data(data, version, _) => Ok((data, version)),
            other => Err(unexpected(other)),
        }
    }

    async fn get_with_owner(&self, path: &str) -> Result<OwnedNode, CoordError> {
        match self
            .call(
                Op::Get {
                    path: path.into(),
                    watch: false,
                },
                path,
            )
            .await?
        {
            Reply::Data(data, version, owner) => Ok(OwnedNode {
                data,
                version,
                owner: (owner != 0).then_some(owner),
            }),
            other => Err(unexpected(other)),
        }
    }

    async fn get_and_watch(&self, path: &str) -> Result<(Vec<u8>, i32, Watch), CoordError> {
        let watch = self.watch(path, false);
        match self
            .call(
                Op::Get {
                    path: path.into(),
                    watch: true,
                },
                path,
            )
            .await?
        {
            Reply::Data(data, version, _) => Ok((data, version, watch)),
            other => Err(unexpected(other)),
        }
    }

    async fn set(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<i32, CoordError> {
        match self
            .call(
                Op::Set {
                    path: path.into(),
                    data: data.to_vec(),
                    version: version.unwrap_or(-1),
                },
                path,
            )
            .await?
        {
            Reply::Version(v) => Ok(v),
            other => Err(unexpected(other)),
        }
    }

    async fn set_all(&self, writes: &[(String, Vec<u8>)]) -> Result<(), CoordError> {
        if let Some(refused) = tributary::coordination::transaction_refusal(writes) {
            return Err(refused);
        }
        let first = writes.first().map_or("", |(path, _)| path.as_str());
        let op = Op::SetAll {
            writes: writes.to_vec(),
        };
        match self.call(op, first).await? {
            Reply::Done => Ok(()),
            Reply::TransactionRefused { index, code } => {
                let path = writes
                    .get(index as usize)
                    .map_or(first, |(path, _)| path.as_str());
                Err(map_err(code, path))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn create_all(
        &self,
        creates: &[(String, Vec<u8>)],
        kind: NodeKind,
    ) -> Result<(), CoordError> {
        if let Some(refused) = tributary::coordination::create_all_refusal(creates, kind) {
            return Err(refused);
        }
        let first = creates.first().map_or("", |(path, _)| path.as_str());
        let op = Op::CreateAll {
            creates: creates.to_vec(),
            kind: u8::from(kind == NodeKind::Ephemeral),
        };
        match self.call(op, first).await? {
            Reply::Done => Ok(()),
            Reply::TransactionRefused { index, code } => {
                let path = creates
                    .get(index as usize)
                    .map_or(first, |(path, _)| path.as_str());
                Err(map_err(code, path))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn delete(&self, path: &str, version: Option<i32>) -> Result<(), CoordError> {
        match self
            .call(
                Op::Delete {
                    path: path.into(),
                    version: version.unwrap_or(-1),
                },
                path,
            )
            .await?
        {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn sync(&self, path: &str) -> Result<(), CoordError> {
        match self.call(Op::Sync { path: path.into() }, path).await? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn children(&self, path: &str) -> Result<Vec<String>, CoordError> {
        match self
            .call(
                Op::Children {
                    path: path.into(),
                    watch: false,
                },
                path,
            )
            .await?
        {
            Reply::Children(c) => Ok(c),
            other => Err(unexpected(other)),
        }
    }

    async fn children_and_watch(&self, path: &str) -> Result<(Vec<String>, Watch), CoordError> {
        let watch = self.watch(path, true);
        match self
            .call(
                Op::Children {
                    path: path.into(),
                    watch: true,
                },
                path,
            )
            .await?
        {
            Reply::Children(c) => Ok((c, watch)),
            other => Err(unexpected(other)),
        }
    }

    fn session_id(&self) -> u64 {
        self.session
    }

    async fn next_event(&self) -> SessionEvent {
        match self.events.lock().await.recv().await {
            Some(event) => event,
            None => std::future::pending().await,
        }
    }

    async fn close(self) {
        if let Some(out) = guard(&self.shared.out).as_ref() {
            let _ = out.send(ClientMsg::Close);
        }
        // Give the writer a moment to send it; the server ends the session on receipt.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
