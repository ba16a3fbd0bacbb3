//! What a MIRROR_PRODUCE's answers leave of its sets: each message acknowledged, failed, retried
//! or sent again at once — and, for a set that failed, the point its source partition's later
//! messages must not pass.

use std::collections::BTreeSet;
use std::sync::Arc;

use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::{MirrorOutcome, MirrorSet};

use super::{Answer, Run};
use crate::env::Env;
use crate::producer::dispatch::{Dispatcher, Left, Pending, SetOutcome};
use crate::producer::{Delivered, SourceMark};

impl<E: Env> Dispatcher<E> {
    /// Resolves the messages of `sets` by their `outcomes` (one per set, in order) and places
    /// the `later` runs (a source partition's runs after its first, kept for the next round):
    /// retried after their partition's set when it is retried, else sent again at once.
    ///
    /// A set that failed was not stored, so its source partition's sent point goes back to
    /// its start ([`Self::note_unsent`]): the later runs, sent again, are then refused as
    /// following a gap rather than appended past the failed messages (which would have the
    /// mirror partition take those for held when they are sent again from the commit).
    pub(super) fn settle(
        &self,
        broker_id: i32,
        slots: &mut [Option<Pending>],
        sets: &[(MirrorSet, Run)],
        outcomes: Vec<Answer>,
        later: Vec<Run>,
        last: &mut String,
    ) -> Left {
        let mut left = Left::default();
        // Source partitions whose set is retried: their later runs are retried after it.
        let retried: BTreeSet<Arc<SourceKey>> = sets
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o, Answer::Plain(SetOutcome::Retry(_))))
            .map(|((_, run), _)| run.key.clone())
            .collect();
        for ((set, run), outcome) in sets.iter().zip(outcomes) {
            let partition = set.produce.partition;
            for &i in &run.indexes {
                let Some(p) = slots.get_mut(i).and_then(Option::take) else {
                    continue;
                };
                let delivered = |offset, held| Delivered {
                    broker_id,
                    partition,
                    offset: Some(offset),
                    held,
                };
                match &outcome {
                    Answer::Judged(ack) => match ack.outcome {
                        MirrorOutcome::Appended => {
                            self.finish(p.done, Ok(delivered(ack.offset, false)))
                        }
                        MirrorOutcome::Held => self.finish_held(p, ack, broker_id),
                        // Held up to `held_to`: those are acknowledged, the rest sent again.
                        MirrorOutcome::Overlap => match p.record.source.as_ref() {
                            Some(mark) if mark.start < ack.held_to => {
                                self.finish_held(p, ack, broker_id)
                            }
                            _ => left.again.push(p),
                        },
                    },
                    Answer::Plain(SetOutcome::Delivered(offset)) => self.finish(
                        p.done,
                        Ok(Delivered {
                            broker_id,
                            partition,
                            offset: *offset,
                            held: false,
                        }),
                    ),
                    Answer::Plain(SetOutcome::Fail(e)) => {
                        if let Some(mark) = &p.record.source {
                            self.note_unsent(mark);
                        }
                        self.finish(p.done, Err(e.clone()));
                    }
                    Answer::Plain(SetOutcome::Retry(why)) => {
                        last.clone_from(why);
                        left.retry.push(p);
                    }
                }
            }
        }
        for run in later {
            for i in run.indexes {
                let Some(p) = slots.get_mut(i).and_then(Option::take) else {
                    continue;
                };
                match retried.contains(&run.key) {
                    true => left.retry.push(p),
                    false => left.again.push(p),
                }
            }
        }
        left
    }

    /// Records that the message `mark` was not stored and never will be under this sender:
    /// its source partition's messages of the same ownership epoch may go on only from its
    /// start, so a later one is refused as following a gap (`refuse_gaps`) and the mirror
    /// starts that partition again from its commit.
    pub(in crate::producer) fn note_unsent(&self, mark: &SourceMark) {
        let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
        if let Some((epoch, reached)) = placed.sent.get_mut(&mark.key) {
            if *epoch == mark.epoch && *reached > mark.start {
                *reached = mark.start;
            }
        }
    }
}
