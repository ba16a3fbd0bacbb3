//! MIRROR_PRODUCE and MIRROR_POSITIONS: a mirror's sets appended at most once each, their
//! source positions recorded with them (`Log::append_mirrored`), and those positions read back.
//!
//! Every answer describes durable data only: a set appended, or found held, is answered once
//! the partition is flushed up to where it ends, and positions are read, then the partition
//! flushed up to where they end, before they are sent. A mirror that resumes from an answer
//! therefore never resumes past data a crash of this broker could take back.

use tributary_core::allow_list::Operation;
use tributary_core::log::{MirroredAppend, SourceRange, TopicPartition};
use tributary_core::mirror::position::placement::{self, PARTITION_SALT};
use tributary_core::wire::{
    ErrorCode, MirrorAck, MirrorOutcome, MirrorPositionsRequest, MirrorPositionsResponse,
    MirrorProduceResponse, MirrorSet, SourceHeld, TOPIC_AUTHORIZATION_FAILED,
};

use super::access::Access;
use super::handler::{CloseReason, Effects, Handler, Prepared};
use super::limits::ACK_WAIT_TIMEOUT;
use crate::env::Env;
use crate::logs::{with_log, SharedLog};
use crate::metrics::broker::code_label;

/// One set judged and, if new, appended: its answer, and how far its partition must be
/// durable before the answer is sent.
struct Judged<F: tributary_core::log::LogFs> {
    ack: MirrorAck,
    tp: TopicPartition,
    log: SharedLog<F>,
    durable_to: u64,
}

impl<E: Env> Handler<E> {
    /// Judges each set on its own against its partition's positions (appending what is new),
    /// then answers once everything each answer describes is durable.
    pub(super) async fn mirror_produce(
        &self,
        sets: Vec<MirrorSet>,
        effects: &mut Effects,
        access: &Access,
    ) -> Result<MirrorProduceResponse, CloseReason> {
        let Some(acks) = self.acks() else {
            return Err(CloseReason::Unsupported(
                "mirrored produce (this broker has no committer)",
            ));
        };
        let arriving = acks.arriving();
        let mut judged = Vec::with_capacity(sets.len());
        for set in sets {
            judged.push(
                match access.allows(Operation::Produce, &set.produce.topic) {
                    true => self.judge(set, effects).await,
                    false => Err(TOPIC_AUTHORIZATION_FAILED),
                },
            );
        }
        for j in judged.iter().flatten() {
            if acks.request(&j.tp, &j.log, j.durable_to).is_err() {
                tracing::warn!("{}: the committer is gone (shutting down)", j.tp);
            }
        }
        drop(arriving);
        let deadline = tokio::time::Instant::now() + ACK_WAIT_TIMEOUT;
        let mut out = Vec::with_capacity(judged.len());
        for j in judged {
            let ack = match j {
                Ok(j) => match acks.wait_durable(&j.log, j.durable_to, deadline).await {
                    Ok(()) => j.ack,
                    Err(why) => {
                        tracing::warn!("{}: mirrored set not acknowledged: {why:?}", j.tp);
                        MirrorAck::failed(ErrorCode::Unknown)
                    }
                },
                Err(error) => MirrorAck::failed(error),
            };
            if ack.error != ErrorCode::NoError {
                self.meter().error("mirror_produce", &code_label(ack.error));
            }
            out.push(ack);
        }
        Ok(MirrorProduceResponse {
            error: ErrorCode::NoError,
            acks: out,
        })
    }

    /// One set: its partition (chosen from the source partition when the request says -1),
    /// then appended unless the partition holds (some of) it.
    async fn judge(
        &self,
        set: MirrorSet,
        effects: &mut Effects,
    ) -> Result<Judged<E::Fs>, ErrorCode> {
        let MirrorSet { produce, source } = set;
        if source.start < 0 || source.next < source.start {
            tracing::warn!(
                "{}: mirrored set refused: source offsets {}..{} of {} are not a range",
                produce.topic,
                source.start,
                source.next,
                source.key
            );
            return Err(ErrorCode::InvalidMessage);
        }
        let key = source.key.clone();
        let (topic, logs) = (produce.topic.clone(), self.logs().clone());
        // A partition that durably holds a copy of the source partition keeps it: the topic's
        // count may have changed since (a renamed copy given its source's count at a restart),
        // and one source partition split over two partitions is copied twice.
        let pick = move |count: u32| {
            let holds = |p: &u32| {
                logs.get(&TopicPartition::new(topic.clone(), *p))
                    .is_some_and(|log| log.held().iter().any(|(k, _)| *k == key))
            };
            match (0..count).find(holds) {
                Some(p) => p as i32,
                None => placement::index(&key, PARTITION_SALT, count as usize) as i32,
            }
        };
        let Prepared {
            tp,
            log,
            set: validated,
            bytes,
        } = self.prepare(produce, pick, effects).await?;
        let partition = tp.partition as i32;
        let now = self.env().now_ms();
        let range = SourceRange {
            key: source.key,
            start: source.start,
            next: source.next,
        };
        let judged = with_log(self.env(), &log, move |l| {
            // A set inside one compressed source message (its messages all resume at the
            // message's start) holds no whole source offset: appended as any other write.
            let outcome = match range.start == range.next {
                true => l
                    .append_validated(&validated, now)
                    .map(MirroredAppend::Appended),
                false => l.append_mirrored(&validated, &range, now),
            }?;
            let held_to = l
                .positions()
                .and_then(|book| book.resume_at(&range.key))
                .unwrap_or(range.next);
            Ok::<_, tributary_core::log::LogError>((outcome, held_to, l.written_end()))
        })
        .await
        .map_err(|e| {
            tracing::error!("{e}");
            ErrorCode::Unknown
        })?;
        let (outcome, held_to, written_end) = judged;
        let ack = |outcome, offset| MirrorAck {
            error: ErrorCode::NoError,
            outcome,
            partition,
            offset,
            held_to,
        };
        Ok(match outcome {
            MirroredAppend::Appended(info) => {
                self.meter().bytes_in(tp.topic.as_str(), bytes);
                Judged {
                    ack: ack(MirrorOutcome::Appended, info.offset as i64),
                    tp,
                    log,
                    durable_to: info.next_offset,
                }
            }
            // What is held lies below the log's end now: durable once the log is to there.
            MirroredAppend::Held => Judged {
                ack: ack(MirrorOutcome::Held, -1),
                tp,
                log,
                durable_to: written_end,
            },
            MirroredAppend::Overlap { .. } => Judged {
                ack: ack(MirrorOutcome::Overlap, -1),
                tp,
                log,
                durable_to: written_end,
            },
        })
    }

    /// The partition's positions and the translations asked for, once the data they describe
    /// is durable. A partition past the topic's count answers `WrongPartition`; one with no
    /// mirrored set (or not created yet), empty lists and -1 for every translation.
    pub(super) async fn mirror_positions(
        &self,
        request: MirrorPositionsRequest,
        access: &Access,
    ) -> MirrorPositionsResponse {
        let refused = |error| MirrorPositionsResponse {
            error,
            sources: Vec::new(),
            translated: Vec::new(),
        };
        if !access.allows(Operation::Fetch, &request.topic) {
            self.meter()
                .error("mirror_positions", &code_label(TOPIC_AUTHORIZATION_FAILED));
            return refused(TOPIC_AUTHORIZATION_FAILED);
        }
        let Some(acks) = self.acks() else {
            // Without a committer nothing here can be made durable on request: refused
            // rather than answered with positions a crash could take back.
            return refused(ErrorCode::Unknown);
        };
        let Some(tp) = u32::try_from(request.partition)
            .ok()
            .filter(|p| *p < self.logs().partition_count(&request.topic))
            .map(|p| TopicPartition::new(request.topic.clone(), p))
        else {
            return refused(ErrorCode::WrongPartition);
        };
        let Some(log) = self.logs().get(&tp) else {
            // A partition never written to here holds nothing of any source.
            return MirrorPositionsResponse {
                error: ErrorCode::NoError,
                sources: Vec::new(),
                translated: vec![-1; request.translate.len()],
            };
        };
        let translate = request.translate;
        let (sources, translated, end) = with_log(self.env(), &log, move |l| {
            let Some(book) = l.positions() else {
                return (Vec::new(), vec![-1; translate.len()], 0);
            };
            let sources = book
                .sources()
                .map(|p| SourceHeld {
                    key: p.key.clone(),
                    held_to: p.source_next,
                    mirror_end: p.mirror_end as i64,
                })
                .collect();
            let translated = translate
                .iter()
                .map(|(key, offset)| book.translate(key, *offset).map_or(-1, |o| o as i64))
                .collect();
            (sources, translated, book.end())
        })
        .await;
        let deadline = tokio::time::Instant::now() + ACK_WAIT_TIMEOUT;
        let durable = match acks.request(&tp, &log, end) {
            Ok(()) => acks.wait_durable(&log, end, deadline).await,
            Err(why) => Err(why),
        };
        if let Err(why) = durable {
            tracing::warn!("{tp}: mirror positions not answered: {why:?}");
            self.meter()
                .error("mirror_positions", &code_label(ErrorCode::Unknown));
            return refused(ErrorCode::Unknown);
        }
        MirrorPositionsResponse {
            error: ErrorCode::NoError,
            sources,
            translated,
        }
    }
}
