//! The mirror's ownership watchdog: alarms after the stated time, speaks once a minute, forgets
//! what is owned again.

use tributary_core::mirror::watchdog::{OwnershipWatch, SPEAK_EVERY_MS};

fn key(p: &str) -> (String, String) {
    ("t".to_string(), p.to_string())
}

#[test]
fn a_partition_unowned_past_the_alarm_time_is_alarmed_and_spoken_of_once_a_minute() {
    let mut watch = OwnershipWatch::new(30_000);
    let round = |w: &mut OwnershipWatch, now: i64, owned: bool| {
        w.observe(now, [(key("0-0"), true), (key("0-1"), owned)])
    };
    assert!(round(&mut watch, 0, false).alarmed.is_empty());
    assert!(round(&mut watch, 29_999, false).alarmed.is_empty());
    let first = round(&mut watch, 30_000, false);
    assert_eq!(first.alarmed, vec![(key("0-1"), 30_000)]);
    assert!(first.speak, "the first alarm speaks at once");
    let later = round(&mut watch, 30_000 + SPEAK_EVERY_MS - 1, false);
    assert!(
        !later.speak && later.alarmed.len() == 1,
        "quiet within the minute"
    );
    assert!(round(&mut watch, 30_000 + SPEAK_EVERY_MS, false).speak);
}

#[test]
fn ownership_regained_resets_the_clock_and_the_next_alarm_speaks_at_once() {
    let mut watch = OwnershipWatch::new(10_000);
    watch.observe(0, [(key("0-0"), false)]);
    assert!(watch.observe(10_000, [(key("0-0"), false)]).speak);
    // Owned again, then lost again: counted from the new loss.
    assert!(watch
        .observe(11_000, [(key("0-0"), true)])
        .alarmed
        .is_empty());
    assert!(watch
        .observe(12_000, [(key("0-0"), false)])
        .alarmed
        .is_empty());
    let again = watch.observe(22_000, [(key("0-0"), false)]);
    assert_eq!(again.alarmed, vec![(key("0-0"), 10_000)]);
    assert!(again.speak);
}

#[test]
fn a_partition_no_longer_covered_is_forgotten() {
    let mut watch = OwnershipWatch::new(1_000);
    watch.observe(0, [(key("0-0"), false)]);
    assert!(watch.observe(5_000, []).alarmed.is_empty());
    assert!(watch
        .observe(5_500, [(key("0-0"), false)])
        .alarmed
        .is_empty());
}
