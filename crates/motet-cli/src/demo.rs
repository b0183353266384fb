//! `motet demo`: three member processes on this machine, over real UDP on loopback: they find
//! each other and merge, exchange messages, one is killed (SIGKILL) and restarts as a new member
//! that merges back, and the story is told with the verdict of the checks over every member's log.
//! `motet demo --sim` runs the simulated version instead: five members under loss, duplication,
//! reordering and a crash, with the simulator's oracles (and `--diagram`).

use clap::Args;
use motet_core::{Counter, DropReason, StackSpec};
use motet_sim::{run as run_sim, SimOptions};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Run the simulated demo (five members, a faulty network) instead of real processes.
    #[arg(long)]
    sim: bool,
    /// (`--sim`) The seed of the run (the same seed tells the same story) [default: 42]. Refused
    /// without `--sim`: the demo over UDP has no seed.
    #[arg(long)]
    seed: Option<u64>,
    /// (`--sim`) Also draw the run as a space-time diagram (SVG).
    #[arg(long, value_name = "FILE.svg")]
    diagram: Option<std::path::PathBuf>,
}

pub(crate) fn run(args: DemoArgs) -> ExitCode {
    if let Some(Err(message)) = args.diagram.as_deref().map(crate::sim::diagram_path) {
        eprintln!("motet demo: {message}");
        return ExitCode::from(2);
    }
    // `--diagram` draws the simulated run, so it implies `--sim`; a seed alone was ignored, and
    // the demo over UDP ran, whatever the seed.
    if args.sim || args.diagram.is_some() {
        return simulated(args);
    }
    if let Some(seed) = args.seed {
        eprintln!("motet demo: --seed {seed} is for the simulated demo: add --sim (the demo over UDP has no seed)");
        return ExitCode::from(2);
    }
    match crate::demo_udp::run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("motet demo: {message}");
            ExitCode::from(2)
        }
    }
}

fn simulated(args: DemoArgs) -> ExitCode {
    let stack = StackSpec::parse("vsync").expect("the vsync preset builds");
    let seed = args.seed.unwrap_or(42);
    let mut options = SimOptions::new(seed, 5, stack.clone());
    options.net.loss = 0.15;
    options.net.dup = 0.02;
    options.net.reorder = 0.2;
    options.crashes = 1;
    options.restart = true;
    options.restart_ms = 1_500;
    options.casts = 12;
    options.sends = 3;
    options.payload_max = 4000;
    options.workload_ms = 500;

    println!("Motet demo: a group of 5 members in one simulated network (seed {seed})");
    println!("  stack    {stack}");
    println!(
        "  network  {:.0}% loss, {:.0}% duplication, {:.0}% reordering, delays of 0.1 ms plus an exponential 0.4 ms mean",
        options.net.loss * 100.0,
        options.net.dup * 100.0,
        options.net.reorder * 100.0
    );
    println!(
        "  workload each member casts {} messages and sends {} point-to-point, up to {} B (fragmented above 1 KiB)",
        options.casts, options.sends, options.payload_max
    );
    println!("  faults   one member crashes at a random moment; its process restarts 1.5 s later as a new member\n");

    options.record_datagrams = args.diagram.is_some();
    let report = run_sim(&options);
    if let Some(path) = &args.diagram {
        if let Err(err) = std::fs::write(path, motet_sim::diagram::render_svg(&report, &options)) {
            eprintln!("motet demo: cannot write {}: {err}", path.display());
            return ExitCode::from(2);
        }
        eprintln!("diagram: {}", path.display());
    }
    println!("What happened:");
    for (time, text) in &report.story {
        println!("  {:>9.3} ms  {text}", time.0 as f64 / 1e6);
    }
    let stats = &report.stats;
    println!("\nThe protocol at work:");
    println!("  {} datagrams sent, {} lost by the network", report.datagrams, report.datagrams_lost);
    println!(
        "  {} retransmissions, {} NAKs, {} acknowledgements, {} stability messages, {} messages fragmented",
        stats.counter(Counter::Retransmit),
        stats.counter(Counter::NakSent),
        stats.counter(Counter::AckSent),
        stats.counter(Counter::Gossip),
        stats.counter(Counter::Fragmented)
    );
    println!("  {} duplicates discarded", stats.drops(DropReason::Duplicate));
    println!("\nWhat each member delivered:");
    for node in 0..report.trace.nodes {
        let casts = report.trace.deliveries.iter().filter(|d| d.node == node && d.cast).count();
        let sends = report.trace.deliveries.iter().filter(|d| d.node == node && !d.cast).count();
        let status = match report.trace.crashed[node] {
            Some(at) => format!("crashed at {:.3} ms", at.0 as f64 / 1e6),
            None if node >= options.nodes => "the restarted process, a new endpoint".to_string(),
            None => "correct".to_string(),
        };
        println!("  member {node}: {casts:>3} casts, {sends:>2} sends  ({status})");
    }
    let again = run_sim(&options);
    println!("\nVerdict:");
    println!("  oracles: view agreement and order, virtual synchrony, sending-view delivery, exactly-once");
    println!("           delivery, per-sender FIFO, no creation, integrity, one primary partition, and");
    println!("           convergence into one view with every buffer empty");
    if report.violations.is_empty() {
        println!("  PASS: 0 violations");
    } else {
        println!(
            "  FAIL: {} violations, first: {}",
            report.violations.len(),
            crate::sim::describe(&report.violations[0])
        );
    }
    println!(
        "  replay: trace {} (a second run of the same seed gave {})",
        report.trace_hash,
        if again.trace_hash == report.trace_hash { "the same trace" } else { "A DIFFERENT TRACE" }
    );
    if report.violations.is_empty() && again.trace_hash == report.trace_hash {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
