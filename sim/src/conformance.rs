//! One suite of coordination checks, run against the ZooKeeper model and a real ZooKeeper.
//! Where they differ, the model is wrong.

use std::future::Future;
use std::time::Duration;

use tributary::coordination::{CoordError, Coordination, NodeKind, SessionEvent};
use tributary::failure::Failure;

/// How long a watch or an ephemeral node's removal may take to be seen.
const SETTLE: Duration = Duration::from_secs(10);

fn check(cond: bool, what: &str) -> Result<(), Failure> {
    if cond {
        Ok(())
    } else {
        Err(Failure::from(format!("conformance: {what}")))
    }
}

/// Runs every check under `base` (a path that does not exist yet), opening sessions with `open`.
pub async fn run<C, F, Fut>(base: &str, open: F) -> Result<(), Failure>
where
    C: Coordination,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<C, CoordError>>,
{
    let a = open()
        .await
        .map_err(|e| Failure::caused(format!("open: {e}"), e))?;
    let b = open()
        .await
        .map_err(|e| Failure::caused(format!("open: {e}"), e))?;
    nodes_and_versions(&a, base).await?;
    sequential_nodes(&a, base).await?;
    set_all_writes_every_node_or_none(&a, &b, base).await?;
    create_all_makes_every_node_or_none(&a, &b, base).await?;
    watches_fire_once_on_change(&a, &b, base).await?;
    a_read_after_sync_sees_what_was_written(&a, &b, base).await?;
    ephemeral_owner_is_the_creating_session(&a, &b, base).await?;
    ephemeral_nodes_go_with_their_session(a, &b, base).await?;
    Ok(())
}

/// The server's restarts, with `session` the timeout `open` asks for and `restart(down)`
/// killing the server, keeping it down for `down` and starting it again on the same data
/// (returning once it serves): a short outage keeps sessions and their ephemeral nodes; after
/// a long one the client gives its session up, while the restarted server still holds it, and
/// its ephemeral node, until the session times out there.
pub async fn run_restarts<C, F, Fut, R, RFut>(
    base: &str,
    session: Duration,
    open: F,
    restart: R,
) -> Result<(), Failure>
where
    C: Coordination,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<C, CoordError>>,
    R: Fn(Duration) -> RFut,
    RFut: Future<Output = ()>,
{
    let e = |e: CoordError| e.to_string();
    let a = open()
        .await
        .map_err(|e| Failure::caused(format!("open: {e}"), e))?;
    a.create(base, b"", NodeKind::Persistent).await.map_err(e)?;
    let node = format!("{base}/short");
    a.create(&node, b"a", NodeKind::Ephemeral)
        .await
        .map_err(e)?;
    let before = a.session_id();
    // A watch set before the outage, for a change made just after it.
    let b = open()
        .await
        .map_err(|e| Failure::caused(format!("open: {e}"), e))?;
    let watched = format!("{base}/watched");
    a.create(&watched, b"x", NodeKind::Persistent)
        .await
        .map_err(e)?;
    let (_, _, data_watch) = b.get_and_watch(&watched).await.map_err(e)?;

    // A short outage: the session and its node survive, and the session works again.
    restart(Duration::ZERO).await;
    let deadline = tokio::time::Instant::now() + SETTLE;
    let owner = loop {
        match a.get_with_owner(&node).await {
            Ok(found) => break found.owner,
            Err(CoordError::ConnectionLoss(_)) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(other) => {
                return Err(Failure::from(format!(
                    "conformance: after a short restart: {other}"
                )))
            }
        }
    };
    check(
        owner == Some(before) && a.session_id() == before,
        "a short restart keeps the session and its ephemeral node",
    )?;
    // The server kept no watch over its restart; the client set it again on reconnect
    // (`SetWatches`, with the last zxid it saw), so the change fires it whether the watcher
    // came back before or after it.
    a.set(&watched, b"y", None).await.map_err(e)?;
    check(
        tokio::time::timeout(SETTLE, data_watch).await.is_ok(),
        "a watch set before a restart fires for a change made after it",
    )?;
    b.close().await;

    // A long outage: the client gives the session up...
    let long = format!("{base}/long");
    a.create(&long, b"a", NodeKind::Ephemeral)
        .await
        .map_err(e)?;
    restart(session * 2).await;
    let expired = tokio::time::timeout(SETTLE, async {
        loop {
            if a.next_event().await == SessionEvent::Expired {
                return;
            }
        }
    })
    .await;
    check(
        expired.is_ok(),
        "a client gives its session up after a long outage",
    )?;
    // ...but the restarted server restored it: its node is there, owned by the old session,
    // and a new session sees that it is not its own...
    let c = open()
        .await
        .map_err(|e| Failure::caused(format!("open: {e}"), e))?;
    let found = c.get_with_owner(&long).await.map_err(e)?;
    check(
        found.owner == Some(before) && c.session_id() != before,
        "a restarted server restores sessions with their ephemeral nodes",
    )?;
    // ...until the restored session times out.
    let (_, gone) = c
        .get_and_watch(&long)
        .await
        .map(|(d, _, w)| (d, w))
        .map_err(e)?;
    check(
        tokio::time::timeout(session + SETTLE, gone).await.is_ok(),
        "a restored session's ephemeral node goes when it times out",
    )?;
    check(
        matches!(c.get(&long).await, Err(CoordError::NoNode(_)))
            && matches!(c.get(&node).await, Err(CoordError::NoNode(_))),
        "every ephemeral node of a restored session that no client resumed goes",
    )?;
    Ok(())
}

async fn ephemeral_owner_is_the_creating_session(
    a: &impl Coordination,
    b: &impl Coordination,
    base: &str,
) -> Result<(), Failure> {
    let e = |e: CoordError| e.to_string();
    let node = format!("{base}/owned");
    a.create(&node, b"mine", NodeKind::Ephemeral)
        .await
        .map_err(e)?;
    let seen_by_b = b.get_with_owner(&node).await.map_err(e)?;
    check(
        a.session_id() != b.session_id()
            && seen_by_b.owner == Some(a.session_id())
            && seen_by_b.data == b"mine",
        "an ephemeral node's owner is the session that created it",
    )?;
    check(
        a.get_with_owner(base).await.map_err(e)?.owner.is_none(),
        "a persistent node has no owner",
    )?;
    a.delete(&node, None).await.map_err(e)?;
    Ok(())
}

async fn nodes_and_versions(a: &impl Coordination, base: &str) -> Result<(), Failure> {
    let e = |e: CoordError| e.to_string();
    a.create(base, b"", NodeKind::Persistent).await.map_err(e)?;
    let node = format!("{base}/node");
    check(
        matches!(
            a.create(&format!("{base}/missing/child"), b"", NodeKind::Persistent)
                .await,
            Err(CoordError::NoNode(_))
        ),
        "create under a missing parent is NoNode",
    )?;
    check(
        a.create(&node, b"v0", NodeKind::Persistent)
            .await
            .map_err(e)?
            == node,
        "create returns the path",
    )?;
    check(
        matches!(
            a.create(&node, b"", NodeKind::Persistent).await,
            Err(CoordError::NodeExists(_))
        ),
        "second create is NodeExists",
    )?;
    check(
        a.get(&node).await.map_err(e)? == (b"v0".to_vec(), 0),
        "new node has version 0",
    )?;
    check(
        a.set(&node, b"v1", Some(0)).await.map_err(e)? == 1,
        "set bumps the version",
    )?;
    check(
        matches!(
            a.set(&node, b"v2", Some(0)).await,
            Err(CoordError::BadVersion(_))
        ),
        "set with a stale version is BadVersion",
    )?;
    check(
        a.set(&node, b"v2", None).await.map_err(e)? == 2,
        "set with any version",
    )?;
    check(
        matches!(
            a.delete(&node, Some(1)).await,
            Err(CoordError::BadVersion(_))
        ),
        "delete with a stale version is BadVersion",
    )?;
    a.create(&format!("{node}/b"), b"", NodeKind::Persistent)
        .await
        .map_err(e)?;
    a.create(&format!("{node}/a"), b"", NodeKind::Persistent)
        .await
        .map_err(e)?;
    check(
        a.children(&node).await.map_err(e)? == vec!["a".to_string(), "b".to_string()],
        "children are listed sorted",
    )?;
    check(
        matches!(a.delete(&node, None).await, Err(CoordError::NotEmpty(_))),
        "delete with children is NotEmpty",
    )?;
    a.delete(&format!("{node}/a"), None).await.map_err(e)?;
    a.delete(&format!("{node}/b"), Some(0)).await.map_err(e)?;
    a.delete(&node, Some(2)).await.map_err(e)?;
    check(
        matches!(a.get(&node).await, Err(CoordError::NoNode(_))),
        "a deleted node is NoNode",
    )?;
    check(
        matches!(a.children(&node).await, Err(CoordError::NoNode(_))),
        "children of a missing node is NoNode",
    )?;
    Ok(())
}

async fn sequential_nodes(a: &impl Coordination, base: &str) -> Result<(), Failure> {
    let e = |e: CoordError| e.to_string();
    let dir = format!("{base}/seq");
    a.create(&dir, b"", NodeKind::Persistent).await.map_err(e)?;
    let first = a
        .create(&format!("{dir}/n-"), b"", NodeKind::PersistentSequential)
        .await
        .map_err(e)?;
    let second = a
        .create(&format!("{dir}/n-"), b"", NodeKind::EphemeralSequential)
        .await
        .map_err(e)?;
    check(
        first == format!("{dir}/n-0000000000") && second == format!("{dir}/n-0000000001"),
        &format!("sequential names: {first}, {second}"),
    )?;
    let ephemeral = format!("{dir}/eph");
    a.create(&ephemeral, b"", NodeKind::Ephemeral)
        .await
        .map_err(e)?;
    check(
        a.create(&format!("{ephemeral}/child"), b"", NodeKind::Persistent)
            .await
            .is_err(),
        "ephemeral nodes cannot have children",
    )?;
    Ok(())
}

/// `sync` answers, on an existing node and on one that does not exist, and a read after it
/// sees another session's completed write (on a single server always; the model's lagging
/// followers are what make the sync necessary).
async fn a_read_after_sync_sees_what_was_written(
    a: &impl Coordination,
    b: &impl Coordination,
    base: &str,
) -> Result<(), Failure> {
    let e = |e: CoordError| e.to_string();
    let node = format!("{base}/synced");
    b.create(&node, b"1", NodeKind::Persistent)
        .await
        .map_err(e)?;
    a.sync(&node).await.map_err(e)?;
    a.sync(&format!("{base}/never-created")).await.map_err(e)?;
    let (data, _) = a.get(&node).await.map_err(e)?;
    check(
        data == b"1",
        "a read after sync sees another session's write",
    )
}

/// `set_all` (ZooKeeper's `multi`): every node written, each version bumped (twice for a node
/// named twice), watches fired; with one node missing, none written and the error names it.
async fn set_all_writes_every_node_or_none(
    a: &impl Coordination,
    b: &impl Coordination,
    base: &str,
) -> Result<(), Failure> {
    let e = |e: CoordError| e.to_string();
    let together = format!("{base}/together");
    let (x, y, missing) = (
        format!("{together}/x"),
        format!("{together}/y"),
        format!("{together}/missing"),
    );
    for node in [&together, &x, &y] {
        a.create(node, b"0", NodeKind::Persistent)
            .await
            .map_err(e)?;
    }
    let (_, _, watch) = b.get_and_watch(&y).await.map_err(e)?;
    let writes = |values: &[(&String, &str)]| -> Vec<(String, Vec<u8>)> {
        values
            .iter()
            .map(|(path, data)| ((*path).clone(), data.as_bytes().to_vec()))
            .collect()
    };
    a.set_all(&writes(&[(&x, "1"), (&y, "1")]))
        .await
        .map_err(e)?;
    check(
        a.get(&x).await.map_err(e)? == (b"1".to_vec(), 1)
            && a.get(&y).await.map_err(e)? == (b"1".to_vec(), 1),
        "set_all writes every node and bumps each version",
    )?;
    check(
        tokio::time::timeout(SETTLE, watch).await.is_ok(),
        "set_all fires a data watch on a node it writes",
    )?;
    let refused = a
        .set_all(&writes(&[(&x, "2"), (&missing, "2"), (&y, "2")]))
        .await;
    check(
        matches!(&refused, Err(CoordError::NoNode(path)) if *path == missing),
        "set_all with a missing node is NoNode naming it",
    )?;
    check(
        a.get(&x).await.map_err(e)? == (b"1".to_vec(), 1)
            && a.get(&y).await.map_err(e)? == (b"1".to_vec(), 1),
        "a refused set_all writes nothing, not even the nodes before the missing one",
    )?;
    a.set_all(&writes(&[(&x, "3"), (&x, "4")]))
        .await
        .map_err(e)?;
    check(
        a.get(&x).await.map_err(e)? == (b"4".to_vec(), 3),
        "a node set twice in one set_all ends with the last data, its version bumped twice",
    )?;
    for node in [&x, &y, &together] {
        a.delete(node, None).await.map_err(e)?;
    }
    Ok(())
}

/// `create_all` (ZooKeeper's `multi` of creates): every node made, a parent made earlier in
/// the same transaction counting, the parent's child watch fired, ephemeral nodes owned by the
/// creating session; with one node in the way or a parent missing, none made and the error
/// names it; no child under an ephemeral node made in the same transaction.
async fn create_all_makes_every_node_or_none(
    a: &impl Coordination,
    b: &impl Coordination,
    base: &str,
) -> Result<(), Failure> {
    let e = |e: CoordError| e.to_string();
    let made = format!("{base}/made");
    let [x, y, z, w] = ["x", "y", "z", "w"].map(|name| format!("{made}/{name}"));
    let nowhere = format!("{base}/nowhere/child");
    let creates = |paths: &[&String]| -> Vec<(String, Vec<u8>)> {
        paths
            .iter()
            .map(|path| ((*path).clone(), path.as_bytes().to_vec()))
            .collect()
    };
    let (_, watch) = b.children_and_watch(base).await.map_err(e)?;
    a.create_all(&creates(&[&made, &x, &y]), NodeKind::Persistent)
        .await
        .map_err(e)?;
    check(
        a.children(&made).await.map_err(e)? == ["x", "y"]
            && a.get(&x).await.map_err(e)? == (x.as_bytes().to_vec(), 0),
        "create_all makes every node with its data, under a parent made before them in it",
    )?;
    check(
        tokio::time::timeout(SETTLE, watch).await.is_ok(),
        "create_all fires the child watch of a parent it creates under",
    )?;
    let refused = a
        .create_all(&creates(&[&z, &x, &w]), NodeKind::Persistent)
        .await;
    check(
        matches!(&refused, Err(CoordError::NodeExists(path)) if *path == x),
        "create_all of a node that exists is NodeExists naming it",
    )?;
    let refused = a
        .create_all(&creates(&[&z, &nowhere]), NodeKind::Persistent)
        .await;
    check(
        matches!(&refused, Err(CoordError::NoNode(path)) if *path == nowhere),
        "create_all under a missing parent is NoNode naming the node",
    )?;
    check(
        a.children(&made).await.map_err(e)? == ["x", "y"],
        "a refused create_all makes nothing, not even the nodes before the one refused",
    )?;
    b.create_all(&creates(&[&z, &w]), NodeKind::Ephemeral)
        .await
        .map_err(e)?;
    let owners = [a.get_with_owner(&z).await, a.get_with_owner(&w).await];
    check(
        owners
            .iter()
            .all(|node| matches!(node, Ok(node) if node.owner == Some(b.session_id()))),
        "create_all of ephemeral nodes makes them the creating session's",
    )?;
    let under_ephemeral = format!("{made}/v/kid");
    let refused = a
        .create_all(
            &creates(&[&format!("{made}/v"), &under_ephemeral]),
            NodeKind::Ephemeral,
        )
        .await;
    check(
        refused.is_err()
            && matches!(
                a.get(&format!("{made}/v")).await,
                Err(CoordError::NoNode(_))
            ),
        "create_all of a child under an ephemeral node it makes is refused whole",
    )?;
    for node in [&x, &y, &z, &w, &made] {
        a.delete(node, None).await.map_err(e)?;
    }
    Ok(())
}

async fn watches_fire_once_on_change(
    a: &impl Coordination,
    b: &impl Coordination,
    base: &str,
) -> Result<(), Failure> {
    let e = |e: CoordError| e.to_string();
    let node = format!("{base}/watched");
    a.create(&node, b"x", NodeKind::Persistent)
        .await
        .map_err(e)?;
    let (_, _, data_watch) = b.get_and_watch(&node).await.map_err(e)?;
    let (_, child_watch) = b.children_and_watch(&node).await.map_err(e)?;
    a.set(&node, b"y", None).await.map_err(e)?;
    check(
        tokio::time::timeout(SETTLE, data_watch).await.is_ok(),
        "a data watch fires on set",
    )?;
    a.create(&format!("{node}/kid"), b"", NodeKind::Persistent)
        .await
        .map_err(e)?;
    check(
        tokio::time::timeout(SETTLE, child_watch).await.is_ok(),
        "a child watch fires on create",
    )?;
    Ok(())
}

async fn ephemeral_nodes_go_with_their_session(
    a: impl Coordination,
    b: &impl Coordination,
    base: &str,
) -> Result<(), Failure> {
    let e = |e: CoordError| e.to_string();
    let node = format!("{base}/ephemeral");
    a.create(&node, b"mine", NodeKind::Ephemeral)
        .await
        .map_err(e)?;
    check(
        b.get(&node).await.map_err(e)?.0 == b"mine",
        "another session sees an ephemeral node",
    )?;
    let (_, gone) = b
        .get_and_watch(&node)
        .await
        .map(|(d, _, w)| (d, w))
        .map_err(e)?;
    a.close().await;
    check(
        tokio::time::timeout(SETTLE, gone).await.is_ok(),
        "a watch fires when the owner's session closes",
    )?;
    check(
        matches!(b.get(&node).await, Err(CoordError::NoNode(_))),
        "an ephemeral node goes with its session",
    )?;
    Ok(())
}
