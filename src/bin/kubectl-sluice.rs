//! `kubectl sluice`: kubectl finds this binary on the PATH as a plugin (`kubectl sluice why ...`).
//! Read only; see `sluice::kubectl_plugin`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = sluice::kubectl_plugin::PluginCli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    match runtime.block_on(sluice::kubectl_plugin::run(cli)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
