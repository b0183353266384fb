//! CPU cost per message of the layered `fifo` stack, no I/O: a cast goes down the sender's stack,
//! is encoded by the central codec, decoded at a peer and delivered up to its application (plus the
//! sender's own local delivery, and amortized flow-control credit and stability gossip).
//!
//! Run: `cargo bench -p motet-core --bench stack`. Instruction counts: see docs/PERFORMANCE.md.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use motet_core::testkit::Group;
use motet_core::{Action, Duration, Payload};

fn cast_round(c: &mut Criterion) {
    let mut bench = c.benchmark_group("fifo_cast_down_and_up");
    for &(members, size) in &[(2usize, 4usize), (2, 1024), (5, 4)] {
        bench.throughput(Throughput::Elements(1));
        bench.bench_with_input(BenchmarkId::new(format!("{members}_members"), size), &size, |b, &size| {
            let mut group = Group::new(members, "fifo");
            let payload = Payload::from(vec![7u8; size]);
            let mut sent = 0u64;
            b.iter(|| {
                group.act(0, Action::Cast(payload.clone())).expect("flow control releases within the pump");
                sent += 1;
                // Let stability run now and then, as the sweep timer would, so buffers stay bounded.
                if sent.is_multiple_of(1024) {
                    group.tick(Duration::from_millis(100));
                }
            });
        });
    }
    bench.finish();
}

/// The price of the delivery services: the same cast round on 3 members, sent by the last rank
/// (with `total`, not the sequencer), one cast per turn (the worst case: nothing to batch).
fn ordering(c: &mut Criterion) {
    let mut bench = c.benchmark_group("ordering_cast_3_members");
    for stack in ["vsync", "total", "causal", "safe"] {
        bench.throughput(Throughput::Elements(1));
        bench.bench_function(stack, |b| {
            let mut group = Group::new(3, stack);
            let payload = Payload::from(vec![7u8; 4]);
            let mut sent = 0u64;
            b.iter(|| {
                group.act(2, Action::Cast(payload.clone())).expect("flow control releases within the pump");
                sent += 1;
                if sent.is_multiple_of(1024) {
                    group.tick(Duration::from_millis(100));
                }
            });
        });
    }
    bench.finish();
}

criterion_group!(benches, cast_round, ordering);
criterion_main!(benches);
