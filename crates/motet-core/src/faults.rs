//! Seeded bugs, switched on per thread, for tests outside this crate that must show a checker
//! catching them: the simulator reporting a difference its `--bypass diff` runs find (issue 6),
//! end to end. Only with the feature `fault-injection`, which the workspace's test builds turn on
//! (`motet-sim`'s tests ask for it): the switches are checked on the bypass's path.

/// The bypass skips `layer`'s action on this thread's stacks (`None`: none), a bug the `Diff`
/// checker must report.
pub fn skip_action(layer: Option<crate::LayerKind>) {
    crate::stack::set_skip_action(layer);
}

/// Every node on this thread puts its alarms off by a few nanoseconds drawn from outside the
/// seed (the standard library's hash keys), as a layer that read a clock would: the bug the
/// determinism check (the same seed, the same trace hash) must catch.
pub fn unseeded_alarms(on: bool) {
    crate::node::set_unseeded_alarms(on);
}

/// Every connection id made on this thread has its key (the 32 bits a compressed datagram
/// carries, `motet_wire::ConnId::key`) cut to 2 bits, so a node's stacks share keys often, as
/// two of the 10^5 a process may run would once in a while. Not a bug: the oracles must find
/// nothing, and the node counts the compressed datagrams it drops (`DropReason::SharedKey`).
pub fn short_keys(on: bool) {
    crate::node::set_short_keys(on);
}

/// The member of rank `withholder` in every first view (one with no predecessor) made on this
/// thread never reports its flow-control credit (`mflow`'s, `pt2ptw`'s) to rank `origin`, though
/// it beats and delivers: a faulty member, which the credit deadline (`credit_timeout_ms`) must
/// exclude (`None`: none).
pub fn withhold_credit(fault: Option<(crate::Rank, crate::Rank)>) {
    crate::stack::set_withhold_credit(fault);
}
