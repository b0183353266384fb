//! Casts N messages through a group in-process (no I/O), for instruction counting:
//! `valgrind --tool=callgrind target/release/examples/cast_loop N SIZE STACK MEMBERS BYPASS` and
//! the same with N = 0; the difference divided by N is instructions per message. The sender is
//! the last rank (with `total`, not the sequencer). Defaults: 100000 casts of 4 B, `fifo`, 2
//! members, bypass `on` (or `off`, `diff`). See docs/PERFORMANCE.md.

use motet_core::testkit::Group;
use motet_core::{Action, Bypass, Duration, Payload};

fn main() {
    let arg = |i: usize| std::env::args().nth(i);
    let count: u64 = arg(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let size: usize = arg(2).and_then(|a| a.parse().ok()).unwrap_or(4);
    let stack = arg(3).unwrap_or_else(|| "fifo".into());
    let members: usize = arg(4).and_then(|a| a.parse().ok()).unwrap_or(2);
    let bypass = match arg(5).as_deref() {
        None | Some("on") => Bypass::On,
        Some("off") => Bypass::Off,
        Some("diff") => Bypass::Diff,
        Some(other) => panic!("bypass `{other}`: expected on, off or diff"),
    };
    let mut group = Group::with_bypass(members, &stack, bypass);
    let sender = members - 1;
    let payload = Payload::from(vec![7u8; size]);
    for sent in 1..=count {
        group.act(sender, Action::Cast(payload.clone())).expect("flow control releases within the pump");
        if sent.is_multiple_of(1024) {
            group.tick(Duration::from_millis(100));
        }
    }
    group.tick(Duration::from_millis(100));
    group.tick(Duration::from_millis(100));
    assert_eq!(group.delivered, vec![count; members]);
    println!(
        "{count} casts of {size} B on `{stack}` delivered at {members} members (bypass {bypass:?}); {} still buffered",
        group.buffered()
    );
}
