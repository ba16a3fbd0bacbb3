//! The ZooKeeper model's wire protocol (simulation only): `u32 length | message`, with a tiny
//! hand-rolled encoding. Both ends are ours; it only has to be unambiguous and bounded.

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest message either side accepts.
const MESSAGE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Errors a request can end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrCode {
    /// No such node.
    NoNode = 1,
    /// The node exists.
    NodeExists = 2,
    /// Another version.
    BadVersion = 3,
    /// The node has children.
    NotEmpty = 4,
    /// Ephemeral nodes cannot have children, or the path is invalid.
    Invalid = 5,
}

impl ErrCode {
    /// The code a byte names (an unknown byte is `Invalid`).
    fn decode(byte: u8) -> ErrCode {
        match byte {
            1 => ErrCode::NoNode,
            2 => ErrCode::NodeExists,
            3 => ErrCode::BadVersion,
            4 => ErrCode::NotEmpty,
            _ => ErrCode::Invalid,
        }
    }
}

/// A request's operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create `path` (kind: 0 persistent, 1 ephemeral, 2 persistent seq, 3 ephemeral seq).
    Create {
        path: String,
        data: Vec<u8>,
        kind: u8,
    },
    /// Read `path`, optionally leaving a data watch.
    Get { path: String, watch: bool },
    /// Write `path` if its version is `version` (-1: any).
    Set {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    /// Delete `path` if its version is `version` (-1: any).
    Delete { path: String, version: i32 },
    /// List children, optionally leaving a child watch.
    Children { path: String, watch: bool },
    /// ZooKeeper's `sync`: answered once the session's server has every write completed
    /// before it.
    Sync { path: String },
    /// ZooKeeper's `multi` of unconditional sets: every node written, as one write, or none.
    SetAll { writes: Vec<(String, Vec<u8>)> },
    /// ZooKeeper's `multi` of creates, all of one kind (0 persistent, 1 ephemeral): every node
    /// created, as one write, or none.
    CreateAll {
        creates: Vec<(String, Vec<u8>)>,
        kind: u8,
    },
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The created path.
    Created(String),
    /// Data, version and owning session (0: persistent).
    Data(Vec<u8>, i32, u64),
    /// The new version.
    Version(i32),
    /// Done.
    Done,
    /// Children, sorted.
    Children(Vec<String>),
    /// A [`Op::SetAll`] or [`Op::CreateAll`] that wrote nothing: the write at `index` failed with `code` (ZooKeeper
    /// answers a failed `multi` with a result per operation, the failed one's error among them).
    TransactionRefused { index: u32, code: ErrCode },
}

/// Client → server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMsg {
    /// Open (session 0) or resume a session.
    Connect { session: u64, timeout_ms: u64 },
    /// Keep-alive.
    Ping,
    /// An operation.
    Request { xid: u64, op: Op },
    /// End the session now.
    Close,
    /// Sent first on a connection that resumes a session (ZooKeeper's `SetWatches`): the
    /// client's outstanding watches and the last zxid it saw. The server fires each watch whose
    /// node changed (or went) after that zxid and sets the others again.
    SetWatches {
        last_zxid: u64,
        data: Vec<String>,
        children: Vec<String>,
    },
}

/// Server → client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMsg {
    /// The session is open.
    Connected { session: u64 },
    /// The session has expired; the connection closes.
    Expired,
    /// Keep-alive answer.
    Pong,
    /// A request's outcome.
    Reply {
        xid: u64,
        /// The server's zxid when it answered.
        zxid: u64,
        result: Result<Reply, ErrCode>,
    },
    /// A watch fired (carries no zxid, as ZooKeeper's notifications do not).
    Watch { path: String, children: bool },
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32(b.len() as u32);
    out.put_slice(b);
}

fn get_bytes(buf: &mut &[u8]) -> Option<Vec<u8>> {
    if buf.remaining() < 4 {
        return None;
    }
    let len = buf.get_u32() as usize;
    if buf.remaining() < len {
        return None;
    }
    let out = buf[..len].to_vec();
    buf.advance(len);
    Some(out)
}

fn get_string(buf: &mut &[u8]) -> Option<String> {
    String::from_utf8(get_bytes(buf)?).ok()
}

/// A count, then that many strings (at most what the bytes left can hold).
fn get_strings(buf: &mut &[u8]) -> Option<Vec<String>> {
    if buf.remaining() < 4 {
        return None;
    }
    let n = buf.get_u32() as usize;
    if n > buf.remaining() / 4 {
        return None;
    }
    (0..n).map(|_| get_string(buf)).collect()
}

/// Writes `(path, data)` pairs: their count, then each path and its data.
fn put_pairs(out: &mut BytesMut, pairs: &[(String, Vec<u8>)]) {
    out.put_u32(pairs.len() as u32);
    for (path, data) in pairs {
        put_bytes(out, path.as_bytes());
        put_bytes(out, data);
    }
}

/// Reads what [`put_pairs`] wrote.
fn get_pairs(buf: &mut &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let n = get_u32(buf)? as usize;
    // Each pair takes at least eight bytes: no count claims more.
    if n > buf.remaining() / 8 {
        return None;
    }
    (0..n)
        .map(|_| Some((get_string(buf)?, get_bytes(buf)?)))
        .collect()
}

fn get_u8(buf: &mut &[u8]) -> Option<u8> {
    (buf.remaining() >= 1).then(|| buf.get_u8())
}

fn get_u64(buf: &mut &[u8]) -> Option<u64> {
    (buf.remaining() >= 8).then(|| buf.get_u64())
}

fn get_u32(buf: &mut &[u8]) -> Option<u32> {
    (buf.remaining() >= 4).then(|| buf.get_u32())
}

fn get_i32(buf: &mut &[u8]) -> Option<i32> {
    (buf.remaining() >= 4).then(|| buf.get_i32())
}

impl ClientMsg {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            ClientMsg::Connect {
                session,
                timeout_ms,
            } => {
                out.put_u8(0);
                out.put_u64(*session);
                out.put_u64(*timeout_ms);
            }
            ClientMsg::Ping => out.put_u8(1),
            ClientMsg::Request { xid, op } => {
                out.put_u8(2);
                out.put_u64(*xid);
                match op {
                    Op::Create { path, data, kind } => {
                        out.put_u8(0);
                        put_bytes(out, path.as_bytes());
                        put_bytes(out, data);
                        out.put_u8(*kind);
                    }
                    Op::Get { path, watch } => {
                        out.put_u8(1);
                        put_bytes(out, path.as_bytes());
                        out.put_u8(u8::from(*watch));
                    }
                    Op::Set {
                        path,
                        data,
                        version,
                    } => {
                        out.put_u8(2);
                        put_bytes(out, path.as_bytes());
                        put_bytes(out, data);
                        out.put_i32(*version);
                    }
                    Op::Delete { path, version } => {
                        out.put_u8(3);
                        put_bytes(out, path.as_bytes());
                        out.put_i32(*version);
                    }
                    Op::Children { path, watch } => {
                        out.put_u8(4);
                        put_bytes(out, path.as_bytes());
                        out.put_u8(u8::from(*watch));
                    }
                    Op::Sync { path } => {
                        out.put_u8(5);
                        put_bytes(out, path.as_bytes());
                    }
                    Op::SetAll { writes } => {
                        out.put_u8(6);
                        put_pairs(out, writes);
                    }
                    Op::CreateAll { creates, kind } => {
                        out.put_u8(7);
                        out.put_u8(*kind);
                        put_pairs(out, creates);
                    }
                }
            }
            ClientMsg::Close => out.put_u8(3),
            ClientMsg::SetWatches {
                last_zxid,
                data,
                children,
            } => {
                out.put_u8(4);
                out.put_u64(*last_zxid);
                for paths in [data, children] {
                    out.put_u32(paths.len() as u32);
                    paths.iter().for_each(|p| put_bytes(out, p.as_bytes()));
                }
            }
        }
    }

    fn decode(mut buf: &[u8]) -> Option<Self> {
        let b = &mut buf;
        Some(match get_u8(b)? {
            0 => ClientMsg::Connect {
                session: get_u64(b)?,
                timeout_ms: get_u64(b)?,
            },
            1 => ClientMsg::Ping,
            2 => {
                let xid = get_u64(b)?;
                let op = match get_u8(b)? {
                    0 => Op::Create {
                        path: get_string(b)?,
                        data: get_bytes(b)?,
                        kind: get_u8(b)?,
                    },
                    1 => Op::Get {
                        path: get_string(b)?,
                        watch: get_u8(b)? == 1,
                    },
                    2 => Op::Set {
                        path: get_string(b)?,
                        data: get_bytes(b)?,
                        version: get_i32(b)?,
                    },
                    3 => Op::Delete {
                        path: get_string(b)?,
                        version: get_i32(b)?,
                    },
                    4 => Op::Children {
                        path: get_string(b)?,
                        watch: get_u8(b)? == 1,
                    },
                    5 => Op::Sync {
                        path: get_string(b)?,
                    },
                    6 => Op::SetAll {
                        writes: get_pairs(b)?,
                    },
                    7 => {
                        let kind = get_u8(b)?;
                        Op::CreateAll {
                            kind,
                            creates: get_pairs(b)?,
                        }
                    }
                    _ => return None,
                };
                ClientMsg::Request { xid, op }
            }
            3 => ClientMsg::Close,
            4 => {
                let last_zxid = get_u64(b)?;
                let data = get_strings(b)?;
                let children = get_strings(b)?;
                ClientMsg::SetWatches {
                    last_zxid,
                    data,
                    children,
                }
            }
            _ => return None,
        })
    }
}

impl ServerMsg {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            ServerMsg::Connected { session } => {
                out.put_u8(0);
                out.put_u64(*session);
            }
            ServerMsg::Expired => out.put_u8(1),
            ServerMsg::Pong => out.put_u8(2),
            ServerMsg::Reply { xid, zxid, result } => {
                out.put_u8(3);
                out.put_u64(*xid);
                out.put_u64(*zxid);
                match result {
                    Err(code) => {
                        out.put_u8(0);
                        out.put_u8(*code as u8);
                    }
                    Ok(Reply::Created(path)) => {
                        out.put_u8(1);
                        put_bytes(out, path.as_bytes());
                    }
                    Ok(Reply::Data(data, version, owner)) => {
                        out.put_u8(2);
                        put_bytes(out, data);
                        out.put_i32(*version);
                        out.put_u64(*owner);
                    }
                    Ok(Reply::Version(version)) => {
                        out.put_u8(3);
                        out.put_i32(*version);
                    }
                    Ok(Reply::Done) => out.put_u8(4),
                    Ok(Reply::Children(children)) => {
                        out.put_u8(5);
                        out.put_u32(children.len() as u32);
                        children.iter().for_each(|c| put_bytes(out, c.as_bytes()));
                    }
                    Ok(Reply::TransactionRefused { index, code }) => {
                        out.put_u8(6);
                        out.put_u32(*index);
                        out.put_u8(*code as u8);
                    }
                }
            }
            ServerMsg::Watch { path, children } => {
                out.put_u8(4);
                put_bytes(out, path.as_bytes());
                out.put_u8(u8::from(*children));
            }
        }
    }

    fn decode(mut buf: &[u8]) -> Option<Self> {
        let b = &mut buf;
        Some(match get_u8(b)? {
            0 => ServerMsg::Connected {
                session: get_u64(b)?,
            },
            1 => ServerMsg::Expired,
            2 => ServerMsg::Pong,
            3 => {
                let xid = get_u64(b)?;
                let zxid = get_u64(b)?;
                let result = match get_u8(b)? {
                    0 => Err(ErrCode::decode(get_u8(b)?)),
                    1 => Ok(Reply::Created(get_string(b)?)),
                    2 => Ok(Reply::Data(get_bytes(b)?, get_i32(b)?, get_u64(b)?)),
                    3 => Ok(Reply::Version(get_i32(b)?)),
                    4 => Ok(Reply::Done),
                    5 => {
                        let n = get_i32(b)? as u32 as usize;
                        let mut children = Vec::with_capacity(n.min(1024));
                        for _ in 0..n {
                            children.push(get_string(b)?);
                        }
                        Ok(Reply::Children(children))
                    }
                    6 => Ok(Reply::TransactionRefused {
                        index: get_u32(b)?,
                        code: ErrCode::decode(get_u8(b)?),
                    }),
                    _ => return None,
                };
                ServerMsg::Reply { xid, zxid, result }
            }
            4 => ServerMsg::Watch {
                path: get_string(b)?,
                children: get_u8(b)? == 1,
            },
            _ => return None,
        })
    }
}

/// Writes one framed message.
pub async fn write_msg<W: AsyncWrite + Unpin>(
    w: &mut W,
    encode: impl FnOnce(&mut BytesMut),
) -> std::io::Result<()> {
    let mut body = BytesMut::new();
    encode(&mut body);
    let mut frame = BytesMut::with_capacity(4 + body.len());
    frame.put_u32(body.len() as u32);
    frame.put_slice(&body);
    w.write_all(&frame).await
}

/// Reads one framed message body.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let len = r.read_u32().await? as usize;
    if len > MESSAGE_BYTES_MAX {
        return Err(std::io::Error::other("model message too large"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(body)
}

/// Sends a client message.
pub async fn send_client<W: AsyncWrite + Unpin>(w: &mut W, msg: &ClientMsg) -> std::io::Result<()> {
    write_msg(w, |out| msg.encode(out)).await
}

/// Sends a server message.
pub async fn send_server<W: AsyncWrite + Unpin>(w: &mut W, msg: &ServerMsg) -> std::io::Result<()> {
    write_msg(w, |out| msg.encode(out)).await
}

/// Receives a client message.
pub async fn recv_client<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<ClientMsg> {
    let body = read_frame(r).await?;
    ClientMsg::decode(&body).ok_or_else(|| std::io::Error::other("bad client message"))
}

/// Receives a server message.
pub async fn recv_server<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<ServerMsg> {
    let body = read_frame(r).await?;
    ServerMsg::decode(&body).ok_or_else(|| std::io::Error::other("bad server message"))
}
