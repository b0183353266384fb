//! Every order of a reliable stack's layers that `StackSpec` accepts works: an explicit layer list
//! is the user's to write (`--stack top:...:bottom`), so validation is what stands between a
//! mistyped order and a broken group. Two orders it once accepted were broken: `local` above
//! `appl` (its casts never came back to their sender, whatever the loop-back setting), and
//! `local` below `mflow` (its own casts were credited, and the credit report sent to itself
//! panicked `pt2pt`). `local` now declares where it must sit (`LayerSpec::above_every`,
//! `below_every`), and so do the flow-control layers: above `appl` or `frag`, their window did
//! not bound what the reliable layers number, which header compression relies on.

use motet_core::testkit::Group;
use motet_core::{Action, Duration, StackSpec, StackSpecError};

/// The layers between `top` and `bottom` of the `fifo` preset, in every order (Heap's algorithm).
fn every_order() -> Vec<Vec<&'static str>> {
    let mut layers = vec!["stable", "appl", "local", "frag", "pt2ptw", "mflow", "pt2pt", "mnak"];
    let n = layers.len();
    let mut c = vec![0; n];
    let mut orders = vec![layers.clone()];
    let mut i = 0;
    while i < n {
        if c[i] < i {
            layers.swap(if i % 2 == 0 { 0 } else { c[i] }, i);
            orders.push(layers.clone());
            c[i] += 1;
            i = 0;
        } else {
            c[i] = 0;
            i += 1;
        }
    }
    orders
}

#[test]
fn every_accepted_order_of_the_reliable_layers_delivers_everything() {
    let accepted: Vec<String> = every_order()
        .into_iter()
        .map(|order| format!("top:{}:bottom", order.join(":")))
        .filter(|spec| StackSpec::parse(spec).is_ok())
        .collect();
    assert!(accepted.len() > 50, "{} orders accepted", accepted.len());
    // Header compression's bound: every accepted order has the flow-control layers below `appl`
    // and `frag`, so their windows count what `mnak` and `pt2pt` number.
    for spec in &accepted {
        let at = |name: &str| spec.split(':').position(|l| l == name).unwrap();
        for flow in ["mflow", "pt2ptw"] {
            assert!(at(flow) > at("appl") && at(flow) > at("frag"), "{spec}");
        }
    }
    assert!(accepted.contains(&StackSpec::parse("fifo").unwrap().to_string()));
    for spec in &accepted {
        // Three members; each casts 30 times (a large cast every 7th, fragmented where the
        // stack has `frag`) and sends 30 times to the next.
        let mut group = Group::new(3, spec);
        for k in 0..90 {
            let size = if k % 7 == 0 { 5000 } else { 10 };
            group.act(k % 3, Action::Cast(vec![7u8; size].into())).unwrap();
            group.act(k % 3, Action::send(((k + 1) % 3) as u16, vec![1u8; 10].into())).unwrap();
            group.pump();
        }
        for _ in 0..50 {
            group.tick(Duration::from_millis(100));
        }
        // Every cast, the member's own included, and the 30 sends it was sent.
        assert_eq!(group.delivered, [120, 120, 120], "{spec}");
    }
}

#[test]
fn local_out_of_place_is_refused_and_says_where_it_must_sit() {
    let err = |spec: &str| StackSpec::parse(spec).unwrap_err();
    assert!(matches!(
        err("top:local:stable:appl:frag:pt2ptw:mflow:pt2pt:mnak:bottom"),
        StackSpecError::Order { layer: "local", other: "appl", above: false, .. }
    ));
    let below_mflow = err("top:stable:appl:frag:pt2ptw:mflow:local:pt2pt:mnak:bottom");
    assert!(matches!(below_mflow, StackSpecError::Order { layer: "local", other: "mflow", above: true, .. }));
    assert!(below_mflow.to_string().starts_with("layer `local` must sit above `mflow`"), "{below_mflow}");
}

/// A flow-control layer above `appl` (the application's messages pass no window) or above `frag`
/// (the window counts the whole message, the reliable layer numbers fragments) is refused: a receiver could
/// then fall 2^15 behind, and a compressed sequence number would expand to the wrong message.
#[test]
fn flow_control_out_of_place_is_refused() {
    for (spec, flow, other) in [
        ("top:pt2ptw:stable:appl:local:frag:mflow:pt2pt:mnak:bottom", "pt2ptw", "appl"),
        ("top:stable:appl:local:mflow:frag:pt2ptw:pt2pt:mnak:bottom", "mflow", "frag"),
    ] {
        match StackSpec::parse(spec) {
            Err(StackSpecError::Order { layer, other: o, above: false, .. }) => {
                assert_eq!((layer, o), (flow, other), "{spec}");
            }
            result => panic!("{spec}: {result:?}"),
        }
    }
}
