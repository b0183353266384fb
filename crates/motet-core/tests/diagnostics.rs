//! What an operator reads when a group changes (issue 4, "Observability"): the layers report
//! their decisions through `tracing` (suspicions, the coordinator taking over, flush rounds, the
//! view cast, merges, leaves), each inside the span of the stack that made it (group, view,
//! rank), so a process in many groups tells them apart. Reporting never feeds back into the
//! protocol: the same run with and without a subscriber delivers the same.

use motet_core::testkit::Group;
use motet_core::{Action, Duration};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// Everything written by the subscriber, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Three members; one is cut off, suspected and excluded; the partition heals and the two
/// partitions merge; then a member leaves. Returns what each member delivered.
fn story() -> Vec<u64> {
    let mut group = Group::new(3, "vsync");
    group.act(0, Action::Cast(b"before".as_slice().into())).unwrap();
    group.partition = Some(vec![2]);
    for _ in 0..100 {
        group.tick(Duration::from_millis(100));
    }
    assert_eq!(group.views[0].as_ref().unwrap().members.len(), 2, "the cut-off member was excluded");
    group.partition = None;
    for _ in 0..100 {
        group.tick(Duration::from_millis(100));
    }
    assert_eq!(group.views[0].as_ref().unwrap().members.len(), 3, "the partitions merged");
    group.act(1, Action::Leave).unwrap();
    for _ in 0..50 {
        group.tick(Duration::from_millis(100));
    }
    assert_eq!(group.views[0].as_ref().unwrap().members.len(), 2, "the leaver is gone");
    group.delivered.clone()
}

#[test]
fn view_changes_are_reported_in_the_context_of_their_stack() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_env_filter("motet_core=debug")
        .with_ansi(false)
        .without_time()
        .finish();
    let delivered = tracing::subscriber::with_default(subscriber, story);
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for expected in [
        "no heartbeat within the timeout: suspected",
        "view change: flush round started",
        "flushing for the coordinator's round",
        "cut delivered: committed to this round's view",
        "every survivor delivered the cut: next view cast",
        "a hello from another partition of the group",
        "another partition found: flushing to merge with it",
        "a smaller partition asks to merge: flushing to grant",
        "merge granted: installing the merged view",
        "a member asks to leave",
        "left the group",
    ] {
        assert!(text.contains(expected), "no `{expected}` in:\n{text}");
    }
    // Every report carries its stack's context, and the fields say who and what.
    let suspected = text.lines().find(|l| l.contains("suspected")).unwrap();
    assert!(suspected.contains("stack{group=\"testkit\" view=0"), "{suspected}");
    assert!(suspected.contains("suspected={2}"), "{suspected}");
    // Reporting changes nothing the application sees.
    assert_eq!(story(), delivered);
}
