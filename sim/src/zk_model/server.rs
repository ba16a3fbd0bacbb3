//! The ZooKeeper model's server: a znode tree with versions; persistent, ephemeral and
//! sequential nodes; one-shot data and child watches; sessions that expire when the server has
//! heard nothing from the client for the session timeout (deleting their ephemeral nodes and
//! firing watches); replies and events delivered in order per session. Every create, set and
//! delete is a transaction with a zxid; replies carry the server's. Watches belong to a
//! connection, as in ZooKeeper: they go when it closes (and all of them when the server
//! restarts), an event sent on a connection the network cut is lost, and a client resuming its
//! session sets them again with `SetWatches` (the last zxid it saw): a watch on a node changed
//! since fires at once.
//!
//! The server can crash and restart ([`crash_and_restart`]), as a standalone ZooKeeper killed
//! and started again on the same data directory: every connection closes at once, nothing is
//! served while it is down, and it comes back with every node and every session it had (a
//! real server syncs each transaction before answering it), each session's timeout counted
//! afresh from the restart: a client that comes back within its timeout keeps its session and
//! its ephemeral nodes; one that does not (or that gave its session up meanwhile) has them
//! deleted when the restored session expires.
//!
//! Its followers can fall behind ([`lag_followers`]), as an ensemble's do: for a while each
//! session reads from its own view of the tree — the tree as the lag began, for a session open
//! then or opened during the lag (a new session may attach to a follower however far behind);
//! a session resuming keeps its view (a server never takes back what a client has seen).
//! ZooKeeper's guarantees still hold: a session's view only moves forward; it catches up to
//! every write completed so far when it writes (whatever the write's outcome: the leader orders
//! even a failed one, and the follower answers after applying what came before) or calls
//! `sync`, and when the lag ends; a watch event waits until its session's view holds the change
//! (the follower sends it when it applies the change), a watch set on a stale view fires when
//! the view catches up past a change made before it was set, and `SetWatches` is answered from
//! the session's view. Two sessions can thus each miss the other's write unless one of them
//! syncs. Not modelled: catching up takes no time (a sync or write through a follower far
//! behind returns at once, where a real one waits for the backlog), and events of several paths
//! owed at one catch-up are not ordered by zxid among themselves.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::proto::{recv_client, send_server, ClientMsg, ErrCode, Op, Reply, ServerMsg};

/// How often the server looks for expired sessions.
const EXPIRY_CHECK: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
struct Node {
    data: Vec<u8>,
    version: i32,
    owner: Option<u64>,
    next_sequence: u64,
    /// The transaction that created it or last set its data.
    mzxid: u64,
    /// The transaction that last created or deleted one of its children.
    pzxid: u64,
}

#[derive(Debug)]
struct Session {
    timeout: Duration,
    last_heard: Instant,
    conn: Option<mpsc::UnboundedSender<ServerMsg>>,
}

/// The model's whole state.
#[derive(Debug)]
pub struct ModelState {
    nodes: BTreeMap<String, Node>,
    sessions: BTreeMap<u64, Session>,
    data_watches: BTreeMap<String, BTreeSet<u64>>,
    child_watches: BTreeMap<String, BTreeSet<u64>>,
    next_session: u64,
    /// The last transaction (every create, set and delete is one).
    zxid: u64,
    /// Sessions expired so far (for traces and checks).
    pub expired: u64,
    /// Restarts so far.
    pub restarts: u64,
    /// A crash asked for, with how long the server stays down.
    outage: Option<Duration>,
    /// Wakes the server to crash.
    crash: Arc<Notify>,
    /// A lag of the followers asked for ([`lag_followers`]), with its length; it begins at the
    /// server's next expiry check.
    lag_asked: Option<Duration>,
    /// While the followers lag: until when.
    lag_until: Option<Instant>,
    /// While the followers lag: what each session sees.
    views: BTreeMap<u64, View>,
    /// The tree as of a zxid, shared by the views taken at it.
    snapshot: Option<(u64, Arc<Tree>)>,
    /// While the followers lag: the tree as the lag began (what a new session is shown).
    lag_start: Option<(u64, Arc<Tree>)>,
    /// Lags begun so far (for traces and checks).
    pub lags: u64,
}

type Tree = BTreeMap<String, Node>;

/// What one session sees while the followers lag: the tree as of `zxid`, and the watch events
/// of changes made after it, sent when the session catches up.
#[derive(Debug)]
struct View {
    zxid: u64,
    nodes: Arc<Tree>,
    events: Vec<ServerMsg>,
}

impl Default for ModelState {
    fn default() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "/".to_string(),
            Node {
                data: Vec::new(),
                version: 0,
                owner: None,
                next_sequence: 0,
                mzxid: 0,
                pzxid: 0,
            },
        );
        ModelState {
            nodes,
            sessions: BTreeMap::new(),
            data_watches: BTreeMap::new(),
            child_watches: BTreeMap::new(),
            next_session: 1,
            zxid: 0,
            expired: 0,
            restarts: 0,
            outage: None,
            crash: Arc::new(Notify::new()),
            lag_asked: None,
            lag_until: None,
            views: BTreeMap::new(),
            snapshot: None,
            lag_start: None,
            lags: 0,
        }
    }
}

fn parent(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) if path.len() > 1 => Some("/"),
        Some(i) if i > 0 => Some(&path[..i]),
        _ => None,
    }
}

fn valid(path: &str) -> bool {
    path.starts_with('/') && (path == "/" || (!path.ends_with('/') && !path.contains("//")))
}

/// Children names of `path` in `nodes`, sorted.
fn children_in(nodes: &Tree, path: &str) -> Vec<String> {
    let prefix = if path == "/" {
        "/".to_string()
    } else {
        format!("{path}/")
    };
    nodes
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .filter(|(k, _)| k.len() > prefix.len() && !k[prefix.len()..].contains('/'))
        .map(|(k, _)| k[prefix.len()..].to_string())
        .collect()
}

impl ModelState {
    /// Children names of `path`, sorted (the leader's tree).
    pub fn children(&self, path: &str) -> Vec<String> {
        children_in(&self.nodes, path)
    }

    /// Data of `path`, if it exists.
    pub fn data(&self, path: &str) -> Option<Vec<u8>> {
        self.nodes.get(path).map(|n| n.data.clone())
    }

    fn fire(&mut self, path: &str, children: bool) {
        let watches = if children {
            &mut self.child_watches
        } else {
            &mut self.data_watches
        };
        let Some(sessions) = watches.remove(path) else {
            return;
        };
        for id in sessions {
            if let Some(session) = self.sessions.get_mut(&id) {
                let event = ServerMsg::Watch {
                    path: path.to_string(),
                    children,
                };
                // A session without a connection has no watches here (they went with its
                // connection); its client sets them again, with `SetWatches`, on reconnect. A
                // lagging session hears of the change when its view holds it.
                if let Some(view) = self.views.get_mut(&id) {
                    view.events.push(event);
                } else if let Some(conn) = &session.conn {
                    let _lost_with_the_connection = conn.send(event).is_err();
                }
            }
        }
    }

    /// Applies `op` for `session`. A write (and a sync) brings a lagging session's view up to
    /// date before it is answered, whatever its outcome.
    fn apply(&mut self, session: u64, op: Op) -> Result<Reply, ErrCode> {
        let reads = matches!(op, Op::Get { .. } | Op::Children { .. });
        let result = self.apply_op(session, op);
        if !reads {
            self.catch_up(session);
        }
        result
    }

    /// The tree `session` reads: its view while the followers lag, else the leader's.
    fn seen_by(&self, session: u64) -> &Tree {
        self.views.get(&session).map_or(&self.nodes, |v| &v.nodes)
    }

    /// The last zxid `session`'s reads reflect.
    fn zxid_seen_by(&self, session: u64) -> u64 {
        self.views.get(&session).map_or(self.zxid, |v| v.zxid)
    }

    /// ZooKeeper's `multi` of unconditional sets: when every node exists, each is written in
    /// order (a node named twice is written twice) under one zxid; otherwise nothing is, and
    /// the reply names the first node missing.
    fn set_all(&mut self, writes: Vec<(String, Vec<u8>)>) -> Reply {
        if let Some(index) = writes
            .iter()
            .position(|(path, _)| !self.nodes.contains_key(path))
        {
            return Reply::TransactionRefused {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                code: ErrCode::NoNode,
            };
        }
        self.zxid += 1;
        for (path, data) in writes {
            let Some(node) = self.nodes.get_mut(&path) else {
                unreachable!("{path} was there when the transaction was checked");
            };
            node.data = data;
            node.version += 1;
            node.mzxid = self.zxid;
            self.fire(&path, false);
        }
        Reply::Done
    }

    /// ZooKeeper's `multi` of creates of one kind (0 persistent, 1 ephemeral): when every
    /// create can be made in order (its parent exists, or is made earlier in the transaction,
    /// and is not ephemeral; the node does not exist and is not made earlier), each is made
    /// under one zxid; otherwise nothing is, and the reply names the first that cannot be.
    fn create_all(&mut self, session: u64, creates: Vec<(String, Vec<u8>)>, kind: u8) -> Reply {
        let mut made: BTreeSet<&str> = BTreeSet::new();
        for (index, (path, _)) in creates.iter().enumerate() {
            let refused = |code| Reply::TransactionRefused {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                code,
            };
            let Some(parent_path) = parent(path).filter(|_| valid(path) && kind <= 1) else {
                return refused(ErrCode::Invalid);
            };
            match self.nodes.get(parent_path) {
                Some(parent) if parent.owner.is_some() => return refused(ErrCode::Invalid),
                Some(_) => {}
                None if made.contains(parent_path) && kind == 0 => {}
                None if made.contains(parent_path) => return refused(ErrCode::Invalid),
                None => return refused(ErrCode::NoNode),
            }
            if self.nodes.contains_key(path) || !made.insert(path) {
                return refused(ErrCode::NodeExists);
            }
        }
        self.zxid += 1;
        let owner = (kind == 1).then_some(session);
        for (path, data) in creates {
            self.insert_node(&path, data, owner);
        }
        Reply::Done
    }

    /// Makes `path` under the current zxid (the caller has bumped it and checked that the
    /// node can be made): its parent's child list changes, and the watches of both fire.
    fn insert_node(&mut self, path: &str, data: Vec<u8>, owner: Option<u64>) {
        let node = Node {
            data,
            version: 0,
            owner,
            next_sequence: 0,
            mzxid: self.zxid,
            pzxid: self.zxid,
        };
        self.nodes.insert(path.to_string(), node);
        let parent_path = parent(path).unwrap_or("/").to_string();
        if let Some(parent) = self.nodes.get_mut(&parent_path) {
            parent.pzxid = self.zxid;
        }
        self.fire(path, false);
        self.fire(&parent_path, true);
    }

    fn apply_op(&mut self, session: u64, op: Op) -> Result<Reply, ErrCode> {
        match op {
            Op::Sync { .. } => Ok(Reply::Done),
            Op::SetAll { writes } => Ok(self.set_all(writes)),
            Op::CreateAll { creates, kind } => Ok(self.create_all(session, creates, kind)),
            Op::Create { path, data, kind } => self.create(session, path, data, kind),
            Op::Get { path, watch } => {
                let node = self.seen_by(session).get(&path).ok_or(ErrCode::NoNode)?;
                let reply = Reply::Data(node.data.clone(), node.version, node.owner.unwrap_or(0));
                if watch {
                    self.data_watches.entry(path).or_default().insert(session);
                }
                Ok(reply)
            }
            Op::Set {
                path,
                data,
                version,
            } => {
                let node = self.nodes.get_mut(&path).ok_or(ErrCode::NoNode)?;
                if version >= 0 && node.version != version {
                    return Err(ErrCode::BadVersion);
                }
                self.zxid += 1;
                node.data = data;
                node.version += 1;
                node.mzxid = self.zxid;
                let v = node.version;
                self.fire(&path, false);
                Ok(Reply::Version(v))
            }
            Op::Delete { path, version } => {
                let node = self.nodes.get(&path).ok_or(ErrCode::NoNode)?;
                if version >= 0 && node.version != version {
                    return Err(ErrCode::BadVersion);
                }
                if !self.children(&path).is_empty() {
                    return Err(ErrCode::NotEmpty);
                }
                self.remove(&path);
                Ok(Reply::Done)
            }
            Op::Children { path, watch } => {
                let nodes = self.seen_by(session);
                if !nodes.contains_key(&path) {
                    return Err(ErrCode::NoNode);
                }
                let children = children_in(nodes, &path);
                if watch {
                    self.child_watches
                        .entry(path.clone())
                        .or_default()
                        .insert(session);
                }
                Ok(Reply::Children(children))
            }
        }
    }

    fn create(
        &mut self,
        session: u64,
        path: String,
        data: Vec<u8>,
        kind: u8,
    ) -> Result<Reply, ErrCode> {
        if !valid(&path) || path == "/" {
            return Err(ErrCode::Invalid);
        }
        let parent_path = parent(&path).ok_or(ErrCode::Invalid)?.to_string();
        let parent = self.nodes.get_mut(&parent_path).ok_or(ErrCode::NoNode)?;
        if parent.owner.is_some() {
            return Err(ErrCode::Invalid);
        }
        let path = if kind >= 2 {
            let seq = parent.next_sequence;
            parent.next_sequence += 1;
            format!("{path}{seq:010}")
        } else {
            path
        };
        if self.nodes.contains_key(&path) {
            return Err(ErrCode::NodeExists);
        }
        let owner = (kind == 1 || kind == 3).then_some(session);
        self.zxid += 1;
        self.insert_node(&path, data, owner);
        Ok(Reply::Created(path))
    }

    fn remove(&mut self, path: &str) {
        self.zxid += 1;
        self.nodes.remove(path);
        if let Some(parent) = parent(path).and_then(|p| self.nodes.get_mut(p)) {
            parent.pzxid = self.zxid;
        }
        self.fire(path, false);
        self.fire(path, true);
        if let Some(parent) = parent(path) {
            let parent = parent.to_string();
            self.fire(&parent, true);
        }
    }

    /// Ends `session`: its ephemeral nodes go and its watches are dropped.
    fn end_session(&mut self, id: u64) {
        let Some(session) = self.sessions.remove(&id) else {
            return;
        };
        self.views.remove(&id);
        if let Some(conn) = session.conn {
            let _ = conn.send(ServerMsg::Expired);
        }
        let owned: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.owner == Some(id))
            .map(|(k, _)| k.clone())
            .collect();
        for path in owned {
            self.remove(&path);
        }
        for watches in [&mut self.data_watches, &mut self.child_watches] {
            watches.values_mut().for_each(|s| {
                s.remove(&id);
            });
        }
    }

    /// The server went down: every connection is gone (their sessions live on, in its data),
    /// and with them every watch (a real server keeps watches in memory only; clients set them
    /// again on reconnect).
    fn crashed(&mut self) {
        for session in self.sessions.values_mut() {
            session.conn = None;
        }
        self.data_watches.clear();
        self.child_watches.clear();
        // Every server restarted: none is behind.
        self.views.clear();
        self.snapshot = None;
        self.lag_start = None;
        self.lag_until = None;
    }

    /// Drops every watch of `session` (its connection is gone, as ZooKeeper drops a
    /// connection's watches).
    fn drop_watches(&mut self, session: u64) {
        if let Some(view) = self.views.get_mut(&session) {
            view.events.clear();
        }
        for watches in [&mut self.data_watches, &mut self.child_watches] {
            watches.values_mut().for_each(|s| {
                s.remove(&session);
            });
            watches.retain(|_, s| !s.is_empty());
        }
    }

    /// ZooKeeper's `SetWatches` from a client resuming `session`: a watch on a node changed
    /// (or gone) since `last_zxid` fires now; the others are set again.
    fn set_watches(
        &mut self,
        session: u64,
        last_zxid: u64,
        data: Vec<String>,
        children: Vec<String>,
    ) {
        for (paths, for_children) in [(data, false), (children, true)] {
            for path in paths {
                // As the session's server sees it: a change its view does not hold yet fires
                // when the view catches up (the watch is set again meanwhile).
                let changed = self.seen_by(session).get(&path).is_none_or(|n| {
                    let zxid = if for_children { n.pzxid } else { n.mzxid };
                    zxid > last_zxid
                });
                if changed {
                    if let Some(conn) = self.sessions.get(&session).and_then(|s| s.conn.as_ref()) {
                        let event = ServerMsg::Watch {
                            path,
                            children: for_children,
                        };
                        let _lost_with_the_connection = conn.send(event).is_err();
                    }
                } else {
                    let watches = if for_children {
                        &mut self.child_watches
                    } else {
                        &mut self.data_watches
                    };
                    watches.entry(path).or_default().insert(session);
                }
            }
        }
    }

    /// The server is back: every session it had is restored, its timeout counted from `now`.
    fn restored(&mut self, now: Instant) {
        for session in self.sessions.values_mut() {
            session.last_heard = now;
        }
        self.restarts += 1;
    }

    /// Expires every session not heard from within its timeout.
    fn expire(&mut self, now: Instant) -> usize {
        let stale: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| now.duration_since(s.last_heard) > s.timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in &stale {
            self.end_session(*id);
            self.expired += 1;
        }
        stale.len()
    }

    /// The tree as it is now, shared.
    fn snapshot(&mut self) -> (u64, Arc<Tree>) {
        match &self.snapshot {
            Some((zxid, tree)) if *zxid == self.zxid => (*zxid, tree.clone()),
            _ => {
                let tree = Arc::new(self.nodes.clone());
                self.snapshot = Some((self.zxid, tree.clone()));
                (self.zxid, tree)
            }
        }
    }

    /// While the followers lag, `session` (new, or open when the lag began) is shown the tree
    /// as the lag began.
    fn stale_view(&mut self, session: u64) {
        if let Some((zxid, nodes)) = self.lag_start.clone() {
            let view = View {
                zxid,
                nodes,
                events: Vec::new(),
            };
            self.views.insert(session, view);
        }
    }

    /// While the followers lag, a session resuming keeps its view; one without a view (none
    /// lagged when it last read) is shown the tree as it is now, never older than what it saw.
    fn resumed_view(&mut self, session: u64) {
        if self.lag_until.is_some() && !self.views.contains_key(&session) {
            let (zxid, nodes) = self.snapshot();
            let view = View {
                zxid,
                nodes,
                events: Vec::new(),
            };
            self.views.insert(session, view);
        }
    }

    /// Whether the followers lag now, or are about to.
    fn lagging(&self) -> bool {
        self.lag_until.is_some() || self.lag_asked.is_some()
    }

    /// Brings `session`'s view up to date (nothing when it has none): the watch events it was
    /// owed first, then the watches it set on its stale view on nodes changed since.
    fn catch_up(&mut self, session: u64) {
        let Some(old) = self.views.get(&session).map(|v| v.zxid) else {
            return;
        };
        let (zxid, nodes) = self.snapshot();
        let Some(view) = self.views.get_mut(&session) else {
            return;
        };
        assert!(zxid >= old, "a session's view went back: {old} -> {zxid}");
        let mut events = std::mem::take(&mut view.events);
        (view.zxid, view.nodes) = (zxid, nodes);
        let conn = self.sessions.get(&session).and_then(|s| s.conn.clone());
        for for_children in [false, true] {
            let watches = if for_children {
                &mut self.child_watches
            } else {
                &mut self.data_watches
            };
            for (path, sessions) in watches.iter_mut() {
                let changed = self.nodes.get(path).is_none_or(|n| {
                    let zxid = if for_children { n.pzxid } else { n.mzxid };
                    zxid > old
                });
                if changed && sessions.remove(&session) {
                    events.push(ServerMsg::Watch {
                        path: path.clone(),
                        children: for_children,
                    });
                }
            }
            watches.retain(|_, s| !s.is_empty());
        }
        if let Some(conn) = conn {
            for event in events {
                let _lost_with_the_connection = conn.send(event).is_err();
            }
        }
    }

    /// Begins or ends a lag of the followers, as asked and as due.
    fn lag_tick(&mut self, now: Instant) {
        if let Some(length) = self.lag_asked.take() {
            if self.lag_until.is_none() {
                self.lag_until = Some(now + length);
                self.lag_start = Some(self.snapshot());
                self.lags += 1;
                let ids: Vec<u64> = self.sessions.keys().copied().collect();
                for id in ids {
                    self.stale_view(id);
                }
                tracing::info!("zk model: the followers fall behind for {length:?}");
            }
        }
        if self.lag_until.is_some_and(|until| now >= until) {
            let ids: Vec<u64> = self.views.keys().copied().collect();
            for id in ids {
                self.catch_up(id);
            }
            self.views.clear();
            self.snapshot = None;
            self.lag_start = None;
            self.lag_until = None;
            tracing::info!("zk model: the followers caught up");
        }
    }
}

/// A shared handle to the model's state (to inspect it from checks).
pub type SharedModel = Arc<Mutex<ModelState>>;

fn lock(model: &SharedModel) -> std::sync::MutexGuard<'_, ModelState> {
    model.lock().unwrap_or_else(|p| p.into_inner())
}

/// Crashes the server serving `model` and restarts it from its state after `down` (see the
/// module's documentation). Asking again while it is down has no effect.
pub fn crash_and_restart(model: &SharedModel, down: Duration) {
    let crash = {
        let mut state = lock(model);
        if state.outage.is_some() {
            return;
        }
        state.outage = Some(down);
        state.crash.clone()
    };
    crash.notify_one();
}

/// Whether the server serving `model` is down now, or about to go down ([`crash_and_restart`]).
pub fn down(model: &SharedModel) -> bool {
    lock(model).outage.is_some()
}

/// Makes the followers of the server serving `model` fall behind for `length` (see the module's
/// documentation), from its next expiry check. Asking again while they lag (or are about to)
/// has no effect: `false`.
pub fn lag_followers(model: &SharedModel, length: Duration) -> bool {
    let mut state = lock(model);
    if state.lagging() {
        return false;
    }
    state.lag_asked = Some(length);
    true
}

/// Whether the followers of the server serving `model` lag now, or are about to.
pub fn lagging(model: &SharedModel) -> bool {
    lock(model).lagging()
}

/// Serves the model on `port` until the host stops, crashing and restarting when asked
/// ([`crash_and_restart`]).
pub async fn serve(port: u16, model: SharedModel) -> std::io::Result<()> {
    let crash = lock(&model).crash.clone();
    loop {
        let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
        let mut tasks = JoinSet::new();
        let expiry_model = model.clone();
        tasks.spawn(async move {
            loop {
                tokio::time::sleep(EXPIRY_CHECK).await;
                let expired = {
                    let mut state = lock(&expiry_model);
                    state.lag_tick(Instant::now());
                    state.expire(Instant::now())
                };
                if expired > 0 {
                    tracing::info!("zk model: expired {expired} sessions");
                }
            }
        });
        let down = loop {
            tokio::select! {
                biased;
                () = crash.notified() => break lock(&model).outage.unwrap_or_default(),
                accepted = listener.accept() => {
                    let (stream, _) = accepted?;
                    tasks.spawn(connection(stream, model.clone()));
                }
                Some(done) = tasks.join_next() => {
                    if let Err(e) = done {
                        if e.is_panic() {
                            std::panic::resume_unwind(e.into_panic());
                        }
                    }
                }
            }
        };
        // Down: no listener, every connection closed, no session expires.
        drop(listener);
        tasks.shutdown().await;
        lock(&model).crashed();
        tracing::info!("zk model: crashed; back in {down:?}");
        tokio::time::sleep(down).await;
        let mut state = lock(&model);
        state.restored(Instant::now());
        state.outage = None;
        tracing::info!(
            "zk model: restarted with {} sessions restored",
            state.sessions.len()
        );
    }
}

async fn connection(stream: turmoil::net::TcpStream, model: SharedModel) {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let Ok(ClientMsg::Connect {
        session,
        timeout_ms,
    }) = recv_client(&mut reader).await
    else {
        return;
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<ServerMsg>();
    let id = {
        let mut state = lock(&model);
        let new = session == 0;
        let id = if new {
            let id = state.next_session;
            state.next_session += 1;
            state.sessions.insert(
                id,
                Session {
                    timeout: Duration::from_millis(timeout_ms),
                    last_heard: Instant::now(),
                    conn: None,
                },
            );
            id
        } else {
            session
        };
        match state.sessions.get_mut(&id) {
            Some(s) => {
                s.last_heard = Instant::now();
                let _ = tx.send(ServerMsg::Connected { session: id });
                s.conn = Some(tx.clone());
                if new {
                    state.stale_view(id);
                } else {
                    state.resumed_view(id);
                }
            }
            None => {
                let _ = tx.send(ServerMsg::Expired);
            }
        }
        id
    };
    // Writer and reader in this one task, so a crash (which aborts it) closes both halves.
    let writer_side = async move {
        while let Some(msg) = rx.recv().await {
            let expired = msg == ServerMsg::Expired;
            if send_server(&mut writer, &msg).await.is_err() || expired {
                return;
            }
        }
    };
    let reader_side = reader_side(&mut reader, id, tx, &model);
    tokio::join!(reader_side, writer_side);
}

async fn reader_side(
    reader: &mut tokio::io::ReadHalf<turmoil::net::TcpStream>,
    id: u64,
    tx: mpsc::UnboundedSender<ServerMsg>,
    model: &SharedModel,
) {
    while let Ok(msg) = recv_client(reader).await {
        let mut state = lock(model);
        let Some(session) = state.sessions.get_mut(&id) else {
            break;
        };
        session.last_heard = Instant::now();
        match msg {
            ClientMsg::Ping => {
                let _ = tx.send(ServerMsg::Pong);
            }
            ClientMsg::Request { xid, op } => {
                let result = state.apply(id, op);
                let zxid = state.zxid_seen_by(id);
                let _ = tx.send(ServerMsg::Reply { xid, zxid, result });
            }
            ClientMsg::SetWatches {
                last_zxid,
                data,
                children,
            } => state.set_watches(id, last_zxid, data, children),
            ClientMsg::Close => {
                state.end_session(id);
                break;
            }
            ClientMsg::Connect { .. } => break,
        }
    }
    // The connection is gone, and its watches with it; the session lives on until it times out.
    let mut state = lock(model);
    if let Some(session) = state.sessions.get_mut(&id) {
        if session.conn.as_ref().is_some_and(|c| c.same_channel(&tx)) {
            session.conn = None;
            state.drop_watches(id);
        }
    }
}
