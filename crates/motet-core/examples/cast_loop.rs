//! Casts N messages through a two-member `fifo` group in-process (no I/O), for instruction
//! counting: `valgrind --tool=callgrind target/release/examples/cast_loop 100000` and the same with
//! `0`; the difference divided by N is instructions per message. See docs/PERFORMANCE.md.

use motet_core::testkit::Group;
use motet_core::{Action, Duration, Payload};

fn main() {
    let count: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let size: usize = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(4);
    let mut group = Group::new(2, "fifo");
    let payload = Payload::from(vec![7u8; size]);
    for sent in 1..=count {
        group.act(0, Action::Cast(payload.clone())).expect("flow control releases within the pump");
        if sent.is_multiple_of(1024) {
            group.tick(Duration::from_millis(100));
        }
    }
    group.tick(Duration::from_millis(100));
    group.tick(Duration::from_millis(100));
    assert_eq!(group.delivered, vec![count, count]);
    println!("{count} casts of {size} B delivered at both members; {} still buffered", group.buffered());
}
