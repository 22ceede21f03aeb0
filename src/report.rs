//! Running a read-only command that prints a report, for the binaries (`sluice queue`, `sluice
//! scavengers`, `kubectl sluice`): one runtime, the TLS provider, the text or the error.

use std::process::ExitCode;

/// Runs a command that reads the cluster and prints a report (`sluice scavengers`, `sluice queue`).
pub fn print_report(report: impl std::future::Future<Output = anyhow::Result<String>>) -> ExitCode {
    match block_on(report) {
        Ok(Ok(text)) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
        Err(code) => code,
    }
}

/// Runs `command` to its end on a single-threaded runtime with the TLS provider installed; Err
/// (after saying why) when the runtime cannot start.
pub fn block_on<T>(command: impl std::future::Future<Output = T>) -> Result<T, ExitCode> {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(runtime.block_on(command))
}
