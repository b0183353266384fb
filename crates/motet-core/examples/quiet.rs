//! A group with no application traffic for S seconds of virtual time (no I/O), for counting what
//! a quiet group costs its members: the failure detector's beats and pings, stability rounds and
//! partition discovery. `valgrind --tool=callgrind target/release/examples/quiet S MEMBERS STACK`
//! for two values of S; the difference over the difference in seconds, divided by MEMBERS, is the
//! instructions a member spends per quiet second. Defaults: 10 s, 2 members, `vsync`, the clock
//! moving in steps of STEP = 10 ms (4th argument): each alarm fires at the first step at or after
//! its time, up to a step late. Each step costs the test kit itself about 470 instructions a
//! member, so the figures in docs/PERFORMANCE.md ("A quiet group") use steps of 50 ms.

use motet_core::testkit::Group;
use motet_core::Duration;

fn main() {
    let arg = |i: usize| std::env::args().nth(i);
    let seconds: u64 = arg(1).and_then(|a| a.parse().ok()).unwrap_or(10);
    let members: usize = arg(2).and_then(|a| a.parse().ok()).unwrap_or(2);
    let stack = arg(3).unwrap_or_else(|| "vsync".into());
    let step: u64 = arg(4).and_then(|a| a.parse().ok()).filter(|&ms| ms > 0).unwrap_or(10);
    let mut group = Group::new(members, &stack);
    group.tap = Some(Vec::new());
    let formed: Vec<_> = group.views.iter().map(|v| v.as_ref().map(|v| v.view_id)).collect();
    for _ in 0..seconds * 1000 / step {
        group.tick(Duration::from_millis(step));
    }
    let views: Vec<_> = group.views.iter().map(|v| v.as_ref().map(|v| v.view_id)).collect();
    assert_eq!(views, formed, "the quiet view held");
    let datagrams = group.tap.as_ref().map_or(0, Vec::len);
    println!(
        "{members} members of `{stack}`, {seconds} s quiet: {datagrams} datagrams ({:.1} per member per second)",
        datagrams as f64 / (members as u64 * seconds.max(1)) as f64
    );
}
