//! `motet stack explain SPEC`: what a stack specification builds, and why.

use clap::Subcommand;
use motet_core::StackSpec;
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum StackCommand {
    /// Print the layers of SPEC top to bottom, what each provides, and why it was chosen.
    Explain {
        /// A preset (`fifo`), a property set (`Frag+Flow+Local`) or a layer list (`top:appl:...:bottom`).
        spec: String,
    },
}

pub(crate) fn run(command: StackCommand) -> ExitCode {
    let StackCommand::Explain { spec } = command;
    let (stack, reasons) = match StackSpec::parse_explained(&spec) {
        Ok(parsed) => parsed,
        Err(err) => {
            eprintln!("motet: cannot build stack `{spec}`: {err}");
            return ExitCode::from(2);
        }
    };
    println!("stack {stack} ({} layers), top to bottom:", stack.layers().len());
    for (kind, why) in reasons {
        let spec = kind.spec();
        let provides: Vec<_> = spec.provides.iter().map(|s| s.describe()).collect();
        println!("  {:<8} {}", spec.name, spec.summary);
        if !provides.is_empty() {
            println!("  {:<8}   provides: {}", "", provides.join(", "));
        }
        println!("  {:<8}   chosen:   {}", "", why);
    }
    ExitCode::SUCCESS
}
