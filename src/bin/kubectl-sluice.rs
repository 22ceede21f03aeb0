//! `kubectl sluice`: kubectl finds this binary on the PATH as a plugin (`kubectl sluice why ...`).
//! Read only; see `sluice::kubectl_plugin`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = sluice::kubectl_plugin::PluginCli::parse();
    sluice::report::print_report(sluice::kubectl_plugin::run(cli))
}
